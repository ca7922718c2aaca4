"""Read a model from disk: a transformers directory or a single `.gguf` file, offline, in one
of `numerics`' CPU weight formats. Kept apart from `hf.py` so the engine class does not import
the public loader that builds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ...errors import ModelLoadError
from ..tool_template import fix_tokenizer
from . import numerics
from .numerics import Quantize


def read(
    path: str | Path,
    *,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    quantize: Quantize = "none",
) -> tuple[Any, Any]:
    """The model (in its weight format, on its device) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path).expanduser()
    if not path.exists():
        raise ModelLoadError(f"model path does not exist: {path}")
    kwargs: dict[str, Any] = {"local_files_only": True}
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(f"not a model directory or .gguf file: {path}")
        src, kwargs["gguf_file"] = str(path.parent), path.name
    else:
        if not (path / "config.json").exists():
            raise ModelLoadError(f"not a model directory (no config.json): {path}")
        src = str(path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            src, dtype=dtype, attn_implementation="sdpa", **kwargs
        )
    except Exception as exc:  # any parse failure of a user file is a load error
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelLoadError(f"cannot load model from {path}: {detail}") from None
    model.to(device)
    try:
        if quantize in numerics.GGUF_ACTIVATIONS:
            model = _blocks(model, path, device, quantize)
        else:
            model = numerics.apply(model, quantize, device)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    return model, fix_tokenizer(tokenizer)


def _blocks(model: Any, path: Path, device: str, quantize: str) -> Any:
    from .blocks import gguf_source, quantize_gguf

    if not device.startswith("cpu"):
        raise ValueError(f"{quantize} is a CPU weight format (device is {device})")
    source = gguf_source(path)
    if source is None:
        raise ValueError(f"quantize={quantize!r} needs a .gguf file or an installed default "
                         f"model; {path} has no GGUF source")  # fmt: skip
    return quantize_gguf(model, source, act=numerics.GGUF_ACTIVATIONS[quantize])
