"""Resolve model paths (defaults or user paths) and load them with the fastest safe options."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import ConfigError, ModelLoadError
from .embedder import SentenceEmbedder
from .install.registry import DEFAULTS, model_dir
from .local.hf import LocalCausalLM
from .local.numerics import QUANTIZE_CHOICES, Quantize
from .served.client import ServedStepModel, is_served

# named CPU options as `load_lm` keywords: what the benchmarks compare side by side
OPTIONS: dict[str, dict[str, str]] = {
    "fp32": {"dtype": "float32", "quantize": "none"},
    "int8": {"dtype": "float32", "quantize": "int8"},
    "int8x2": {"dtype": "float32", "quantize": "int8x2"},
    "gguf": {"dtype": "float32", "quantize": "gguf"},  # the GGUF's own blocks (`blocks/`)
    "gguf-a8": {"dtype": "float32", "quantize": "gguf-a8"},  # ... with int8 activations
    "gguf-a8o": {"dtype": "float32", "quantize": "gguf-a8o"},  # ... and int16 outliers
    "dynamic-int8": {"dtype": "float32", "quantize": "dynamic-int8"},
    "bf16": {"dtype": "bfloat16", "quantize": "none"},  # the whole model in bfloat16
}


def resolve(role: str, path: str | Path | None) -> Path:
    """A user path as given, an installed distilled draft (`distilled:NAME`), or the installed
    default for `role`."""
    if isinstance(path, str) and path.startswith("distilled:"):
        from .install.distilled import resolve as distilled

        return distilled(path)
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
    """Load a draft or target; `quantize="auto"` picks the format (`pick_quantize`). An http(s)
    base URL ending in /v1 is a served model (`served/client.py`); its name is `model`,
    $SPECGUARD_<ROLE>_MODEL, or the first the server lists."""
    if is_served(path):
        name = model or os.environ.get(f"SPECGUARD_{role.upper()}_MODEL") or None
        return ServedStepModel(str(path), model=name)
    dev = pick_device(device)
    if (n := pick_threads(threads)) is not None:
        torch.set_num_threads(n)
    where, torch_dtype = resolve(role, path), pick_dtype(dev, dtype)
    q = pick_quantize(quantize, where, dev, torch_dtype)
    return from_path(where, device=dev, dtype=torch_dtype, quantize=q)


def requested_quantize(quantize: Quantize) -> Quantize:
    """The format asked for: `quantize`, or for `auto` $SPECGUARD_QUANTIZE where it is set
    ("auto" still means the machine's choice, `pick_quantize`)."""
    if quantize != "auto":
        return quantize
    env = os.environ.get("SPECGUARD_QUANTIZE", "").strip() or "auto"
    if env not in QUANTIZE_CHOICES:
        raise ConfigError(f"SPECGUARD_QUANTIZE must be one of "
                          f"{', '.join(QUANTIZE_CHOICES)}, got {env!r}")  # fmt: skip
    return env  # type: ignore[return-value]


def pick_quantize(quantize: Quantize, path: Path, device: str, dtype: torch.dtype) -> Quantize:
    """`auto` on a CPU in float32 is the model's own GGUF blocks where it has them (a `.gguf`
    file, or an installed default) and the project's kernel runs: the fastest exact format here,
    and the most faithful (top-1 equal to the GGUF's float32 on every scored token,
    docs/numerics.md). Elsewhere on a CPU it is int8, which computes any model the same whatever
    the batch; on CUDA, the model as loaded. $SPECGUARD_QUANTIZE stands in for `auto` where
    no call names a format (Studio's graph, the benchmark scripts, a pinned record)."""
    quantize = requested_quantize(quantize)
    if quantize != "auto":
        return quantize
    if not device.startswith("cpu"):
        return "none"
    from .local import int8_kernel
    from .local.blocks import gguf_source

    if dtype == torch.float32 and gguf_source(path) is not None and int8_kernel.load() is not None:
        return "gguf"
    return "int8"


def load_embedder(path: str | Path | None = None, *, device: str = "cpu") -> SentenceEmbedder:
    return SentenceEmbedder.load(resolve("embedder", path), device=device)
