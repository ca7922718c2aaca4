"""Resolve model paths (defaults or user paths) and load them with the fastest safe options."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import ConfigError, ModelLoadError
from .embedder import SentenceEmbedder
from .install.registry import DEFAULTS, model_dir
from .local.hf import LocalCausalLM
from .local.numerics import Quantize
from .served.client import ServedStepModel, is_served

# named CPU options as `load_lm` keywords: what the benchmarks compare side by side
OPTIONS: dict[str, dict[str, str]] = {
    "fp32": {"dtype": "float32", "quantize": "none"},
    "int8": {"dtype": "float32", "quantize": "int8"},
    "int8x2": {"dtype": "float32", "quantize": "int8x2"},
    "gguf": {"dtype": "float32", "quantize": "gguf"},  # the GGUF's own blocks (`blocks/`)
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
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was asked for but no CUDA device is available")
    return device


def pick_threads(threads: int | None) -> int | None:
    """The CPU thread count: the argument, else $SPECGUARD_THREADS, else torch's default."""
    name = "threads"
    if threads is None:
        name, raw = "SPECGUARD_THREADS", os.environ.get("SPECGUARD_THREADS", "").strip()
        if not raw:
            return None
        try:
            threads = int(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a positive integer, got {raw!r}") from None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"{name} must be a positive integer, got {threads!r}")
    return threads


def pick_dtype(device: str, dtype: str | None) -> torch.dtype:
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            dtype
        ]
    except KeyError:
        raise ModelLoadError(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16") from None


def from_path(
    path: str | Path,
    *,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    quantize: Quantize = "none",
) -> LocalCausalLM:
    """A transformers model directory or a single `.gguf` file, fully offline, in one of
    `numerics`' CPU weight formats ("int8" is the faithful one)."""
    return LocalCausalLM.load(path, device=device, dtype=dtype, quantize=quantize)


def load_lm(
    role: str,
    path: str | Path | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    quantize: Quantize = "auto",
    threads: int | None = None,
    model: str | None = None,
) -> LocalCausalLM | ServedStepModel:
    """Load a draft or target. On CPU the default is weight-only int8 on float32 (`numerics`):
    it computes the same model whatever the batch, top-1 within 1 % of float32; CUDA gets
    bfloat16. An http(s) base URL ending in /v1 is a served model (`served/client.py`); its name is
    `model`, $SPECGUARD_<ROLE>_MODEL, or the first the server lists."""
    if is_served(path):
        name = model or os.environ.get(f"SPECGUARD_{role.upper()}_MODEL") or None
        return ServedStepModel(str(path), model=name)
    dev = pick_device(device)
    if (n := pick_threads(threads)) is not None:
        torch.set_num_threads(n)
    q = ("int8" if dev == "cpu" else "none") if quantize == "auto" else quantize
    return from_path(resolve(role, path), device=dev, dtype=pick_dtype(dev, dtype), quantize=q)


def load_embedder(path: str | Path | None = None, *, device: str = "cpu") -> SentenceEmbedder:
    return SentenceEmbedder.load(resolve("embedder", path), device=device)
