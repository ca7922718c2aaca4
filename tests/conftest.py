import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# no prompt cached on disk by an earlier run or test: the disk tier's tests turn it on in a
# folder of their own (tests/test_prefix_disk.py)
os.environ.setdefault("SPECGUARD_PREFIX_DISK", "off")

import pytest

from specguard_graph.testing import TinyModels, tiny_models

# an agent's conversation over two calls (the prefix store's and its disk tier's tests)
SYSTEM = "You are a careful assistant. Use the tools you are given. " * 3
TURN_1 = SYSTEM + "User: list the files in the home folder.\nAssistant:"
TURN_2 = TURN_1 + " ls()\nTool: notes.txt report.pdf\nAssistant:"


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
def model_args(model_dirs):
    """The tiny pair saved as model dirs, as the CLI's --draft/--target/--embedder options."""
    return ["--draft", str(model_dirs / "draft"), "--target", str(model_dirs / "target"),
            "--embedder", str(model_dirs / "embedder")]  # fmt: skip


def wait_until_up(url: str, proc, what: str, timeout: float = 120.0) -> None:
    """Poll `url` until it answers 200; fail with `what` if the process dies or time runs out."""
    import time

    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            pytest.fail(f"{what} exited while starting")
        time.sleep(0.5)
    pytest.fail(f"{what} did not come up in {timeout:.0f} s")


def stop(proc) -> None:
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, tiny):
    """The tiny pair and embedder saved to disk, as a user would point the CLI at them."""
    root = tmp_path_factory.mktemp("models")
    for name, lm in (("draft", tiny.draft), ("target", tiny.target)):
        lm.model.save_pretrained(root / name)
        lm.tokenizer.save_pretrained(root / name)
    tiny.embedder.model.save(str(root / "embedder"))
    return root
