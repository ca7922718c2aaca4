"""Resolve model paths (defaults or user paths) and load them with the fastest safe options."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import ModelLoadError
from .embedder import SentenceEmbedder
from .hf import LocalCausalLM
from .numerics import Quantize
from .registry import DEFAULTS, model_dir

# named CPU options as `load_lm` keywords: what the benchmarks compare side by side
OPTIONS: dict[str, dict[str, str]] = {
    "fp32": {"dtype": "float32", "quantize": "none"},
    "int8": {"dtype": "float32", "quantize": "int8"},
    "int8x2": {"dtype": "float32", "quantize": "int8x2"},
    "dynamic-int8": {"dtype": "float32", "quantize": "dynamic-int8"},
    "bf16": {"dtype": "bfloat16", "quantize": "none"},  # the whole model in bfloat16
}


def resolve(role: str, path: str | Path | None) -> Path:
    """A user path as given, or the installed default for `role`."""
    if path is not None:
        return Path(path).expanduser()
    out = model_dir(role)
    if not out.is_dir():
        raise ModelLoadError(
            f"default {role} model ({DEFAULTS[role].name}) is not installed: "
            "run `specguard models install`"
        )
    return out


def pick_device(device: str | None) -> str:
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda was asked for but no CUDA device is available")
    return device


def pick_dtype(device: str, dtype: str | None) -> torch.dtype:
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            dtype
        ]
    except KeyError:
        raise ModelLoadError(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16") from None


def load_lm(
    role: str,
    path: str | Path | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    quantize: Quantize = "auto",
    threads: int | None = None,
) -> LocalCausalLM:
    """Load a draft or target. On CPU the default is weight-only int8 on float32 (`numerics`):
    it computes the same model whatever the batch, top-1 within 1 % of float32; CUDA gets
    bfloat16."""
    dev = pick_device(device)
    if threads or os.environ.get("SPECGUARD_THREADS"):
        torch.set_num_threads(int(threads or os.environ["SPECGUARD_THREADS"]))
    q = ("int8" if dev == "cpu" else "none") if quantize == "auto" else quantize
    return LocalCausalLM.load(
        resolve(role, path), device=dev, dtype=pick_dtype(dev, dtype), quantize=q
    )


def load_embedder(path: str | Path | None = None, *, device: str = "cpu") -> SentenceEmbedder:
    return SentenceEmbedder.load(resolve("embedder", path), device=device)
