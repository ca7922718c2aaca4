import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from specguard_graph.testing import TinyModels, tiny_models


@pytest.fixture(scope="session")
def tiny() -> TinyModels:
    return tiny_models()


@pytest.fixture(scope="session")
def real_pair():
    """The embedded Qwen pair. `make test` installs it first; a missing install fails the
    test (CI must prove the real path) unless SPECGUARD_SKIP_REAL=1 is set."""
    from specguard_graph.errors import ModelLoadError
    from specguard_graph.models.loading import load_embedder, load_lm

    try:
        return load_lm("draft"), load_lm("target"), load_embedder()
    except ModelLoadError as exc:
        if os.environ.get("SPECGUARD_SKIP_REAL") == "1":
            pytest.skip(f"real pair skipped: {exc}")
        pytest.fail(f"{exc} (or set SPECGUARD_SKIP_REAL=1)")


@pytest.fixture
def model_args(tmp_path, tiny):
    """The tiny pair saved as model dirs, as the CLI's --draft/--target/--embedder options."""
    root = tmp_path / "models"
    for name, lm in (("draft", tiny.draft), ("target", tiny.target)):
        lm.model.save_pretrained(root / name)
        lm.tokenizer.save_pretrained(root / name)
    tiny.embedder.model.save(str(root / "embedder"))
    return ["--draft", str(root / "draft"), "--target", str(root / "target"),
            "--embedder", str(root / "embedder")]  # fmt: skip
