"""Resolve model paths (defaults or user paths) and load them with the fastest safe options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, ModelLoadError
from . import numerics
from .embedder import SentenceEmbedder
from .hf import LocalCausalLM
from .numerics import Quantize
from .registry import DEFAULTS, model_dir
from .served import ServedStepModel, is_served

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
        model = numerics.apply(model, quantize, device)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    return LocalCausalLM(model, tokenizer, name=path.name)


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
    bfloat16. An http(s) base URL ending in /v1 is a served model (`served.py`); its name is
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
