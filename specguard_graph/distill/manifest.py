"""The manifest an adapter travels with: what it was trained on and from, checked before use.

Why: a distilled draft is only as good as its match with the base it merges into and the data
it learned from. The manifest pins the base GGUF, the tokenizer, the data files and the adapter's
own files by SHA-256, with the recipe, the steps, the seed and the cost, so that `install`
refuses an adapter for another base, a corrupt or swapped file, and `specguard distill`
reproduces one from its record.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError
from .merge import ADAPTER, CONFIG

MANIFEST = "manifest.json"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def tokenizer_sha(tokenizer: Any) -> str:
    """A tokenizer's identity for this purpose: its vocabulary, ids included."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def machine() -> dict[str, Any]:
    import torch

    return {"cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__}  # fmt: skip


def write(adapter: Path, **record: Any) -> dict[str, Any]:
    """Write the manifest beside the adapter's files, hashing them."""
    files = {n: sha256(adapter / n) for n in (ADAPTER, CONFIG)}
    manifest = {"format": 1, **record, "files": files}
    (adapter / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def check(adapter: Path, *, base_sha256: str, tokenizer: str | None = None) -> dict[str, Any]:
    """The manifest of `adapter` once every pin holds; else one line naming the file."""
    path = adapter / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        files, base = manifest["files"], manifest["base"]["gguf_sha256"]
    except OSError:
        raise ModelLoadError(f"{path}: missing; an adapter is installed only with its "
                             "manifest") from None  # fmt: skip
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{path}: not a distillation manifest ({exc})") from None
    for name, want in files.items():
        f = adapter / name
        if not f.is_file():
            raise ModelLoadError(f"{f}: missing (the manifest lists it)")
        if sha256(f) != want:
            raise ModelLoadError(f"{f}: sha256 does not match the manifest: corrupt, truncated "
                                 "or replaced")  # fmt: skip
    if base != base_sha256:
        raise ModelLoadError(f"{path}: trained on another base model (GGUF sha256 {base[:12]}…, "
                             f"this draft's is {base_sha256[:12]}…)")  # fmt: skip
    want_tok = manifest["base"].get("tokenizer_sha256")
    if tokenizer is not None and want_tok != tokenizer:
        raise ModelLoadError(f"{path}: trained with another tokenizer than this draft's")
    return manifest
