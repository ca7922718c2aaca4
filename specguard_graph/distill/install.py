"""Install a distilled draft: check the adapter, merge it, and save a model directory the loader
reads as it reads the embedded draft (`draft = "distilled:NAME"`).

The directory holds the merged GGUF (whose blocks the kernel computes with), the base's config
and tokenizer, and float weights dequantised from the merged blocks (what other formats and
the block check read). Everything is built beside the old directory and swapped in only after
the new draft has loaded and computed finite logits: a bad adapter never replaces a working
draft.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError
from ..models.install import distilled
from ..models.install.installer import MARKER, gguf_path
from ..models.install.registry import DRAFT, model_dir
from . import manifest as mf
from .merge import merge

GGUF = "model.gguf"
Progress = Callable[[str, int, int], None]


def install(adapter: Path, name: str, progress: Progress | None = None) -> dict[str, Any]:
    """Merge `adapter` into the embedded draft as `distilled:NAME`; returns what was done."""
    out, base_dir, base_gguf = distilled.distilled_dir(name), model_dir("draft"), gguf_path(DRAFT)
    if not base_gguf.is_file() or not (base_dir / "config.json").is_file():
        raise ModelLoadError("the embedded draft is not installed: run `specguard models install`")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
    manifest = mf.check(adapter, base_sha256=DRAFT.sha256, tokenizer=mf.tokenizer_sha(tokenizer))
    tmp = out.with_name(out.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        changed = merge(base_gguf, adapter, tmp / GGUF,
                        lambda d, t: progress and progress("merge", d, t))  # fmt: skip
        _float_weights(base_dir, tmp, changed)
        marker = {"source_sha256": mf.sha256(tmp / GGUF), "gguf": GGUF, "distilled": name,
                  "manifest": manifest}  # fmt: skip
        (tmp / MARKER).write_text(json.dumps(marker, indent=1))
        _smoke(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return {"name": name, "dir": str(out), "changed_tensors": len(changed)}


def _float_weights(base_dir: Path, out: Path, changed: list[str]) -> None:
    """The base's files, with the changed weights replaced by the merged blocks, dequantised."""
    import gguf
    import torch
    from safetensors.torch import load_file, save_file

    from .merge import gguf_name

    for f in base_dir.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name not in (MARKER, GGUF):
            shutil.copy2(f, out / f.name)
    state: dict[str, torch.Tensor] = {}
    for f in sorted(base_dir.glob("*.safetensors")):
        state.update(load_file(str(f)))
    blocks = {t.name: t for t in gguf.GGUFReader(str(out / GGUF)).tensors if t.name in changed}
    for key in list(state):
        name = gguf_name(key.removesuffix(".weight"))
        if name in blocks:
            t = blocks[name]
            state[key] = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy())
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})


def _smoke(path: Path) -> None:
    """The new draft loads in the block format and computes finite logits."""
    import torch

    from ..models.loading import from_path

    lm = from_path(path, device="cpu", dtype=torch.float32, quantize="gguf")
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([lm.encode("1 + 1 =")])).logits
    if not torch.isfinite(logits).all():
        raise ModelLoadError(f"{path}: the merged draft computes non-finite logits")
