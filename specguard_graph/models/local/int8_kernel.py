"""The project's CPU kernels, compiled once per machine: the row-invariant int8 matmul
(`kernels/int8_gemm.cpp`), the row-invariant matmul over GGUF blocks (`kernels/block_gemm.cpp`,
used by `blocks/`), fixed-order attention (`kernels/attention.cpp`) and the decoder layers'
ops between those calls (`kernels/layer.cpp`, used by `lean_layers.py`).

Why a matmul of our own: torch's weight-only int8 kernel runs every row count through one small
tile, so a 400-token prefill ran at about half of what two AVX2 cores do and a decode below the
memory's speed (issue 41, `benchmarks/engine_speed.py`). This one sums each output in one fixed
order whatever the rows (so the faithful-numerics contract holds by construction, on AVX2 and
AVX-512 alike), widens each weight block once for a prefill's many rows, and streams weights
front to back for a decode, in float32. Why attention of our own: torch's float32 attention
rounds a row by the call's shape, and the float64 attention that avoided it converted the whole
KV cache in every layer of every decoded token; `capture.py` says how it is used.

Both are built with torch's C++ extension tooling (a C++ compiler and `ninja`, both present on
the machines this project runs on) into `$SPECGUARD_HOME/kernels/<hash of sources, flags and
the compiling environment>` (`build_key`); `SPECGUARD_KERNEL_DIR` overrides the place. Where
they cannot run (not x86-64 with AVX2 and FMA) or `SPECGUARD_INT8_KERNEL=torch` asks so, `int8`
falls back to torch's kernel (on bfloat16 activations), row-invariant too, and attention to
float64.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import os
import platform
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch

SOURCES = tuple(
    Path(__file__).with_name("kernels") / f
    for f in ("int8_gemm.cpp", "attention.cpp", "block_gemm.cpp", "layer.cpp")
)
INCLUDES = tuple(  # read by block_gemm.cpp and attention.cpp
    Path(__file__).with_name("kernels") / f
    for f in (
        "block_panels.inc",
        "block_wide.inc",
        "block_quads.inc",
        "block_amx.inc",
        "attention_plain.inc",
        "attention_row.inc",
    )
)
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-fopenmp"]
FUNCTIONS = [
    "pack",
    "mm",
    "attention",
    "block_mm",
    "block_row_bytes",
    "block_isa",
    "layer_pre",
    "layer_post",
]
BLOCK = 64  # output channels per packed block: the weight's rows are padded to a multiple


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def supported() -> bool:
    """Can this process run the kernel: x86-64 Linux with AVX2, FMA and F16C, not switched off?"""
    if os.environ.get("SPECGUARD_INT8_KERNEL", "").lower() == "torch":
        return False
    return platform.machine() in ("x86_64", "AMD64") and {"avx2", "fma", "f16c"} <= _cpu_flags()


def build_key() -> bytes:
    """What a build depends on: the sources, the flags, and the environment that compiles it.
    torch writes its include paths and the interpreter into the build's ninja file as the
    process sees them, so two environments (or two paths to one venv) sharing a folder would
    each find the other's build out of date and compile again (~45 s per new process)."""
    return b"\0".join([
        *(f.read_bytes() for f in SOURCES + INCLUDES), " ".join(FLAGS).encode(),
        torch.__version__.encode(), str(Path(torch.__file__).parent).encode(),
        sys.executable.encode(),
    ])  # fmt: skip


def build_dir() -> Path:
    """Where the compiled kernel lives: one directory per `build_key`."""
    env = os.environ.get("SPECGUARD_KERNEL_DIR")
    if env:
        return Path(env).expanduser()
    from ..install.registry import home

    return home() / "kernels" / hashlib.sha256(build_key()).hexdigest()[:16]


@functools.cache
def load() -> ModuleType | None:
    """The compiled kernel module (`FUNCTIONS`), or None where it cannot run or build."""
    if not supported():
        return None
    from torch.utils.cpp_extension import load_inline

    where = build_dir()
    where.mkdir(parents=True, exist_ok=True)
    if not any(where.glob("*.so")):
        print(f"compiling the int8 kernel once, into {where} (about a minute)", file=sys.stderr)
    try:
        return load_inline(
            "specguard_cpu_kernels",
            cpp_sources=[f.read_text() for f in SOURCES],
            functions=FUNCTIONS,
            extra_include_paths=[str(INCLUDES[0].parent)],
            extra_cflags=FLAGS,
            extra_ldflags=["-fopenmp"],
            build_directory=str(where),
        )
    except Exception as e:  # no compiler, no ninja: torch's kernel still computes int8
        first = (str(e).strip().splitlines() or [type(e).__name__])[-1]
        warnings.warn(f"int8 kernel not built ({first}); using torch's int8 kernel", stacklevel=2)
        return None


def block_copy() -> str:
    """The copy of the gguf block kernel this process runs, for benchmark headers."""
    kernel = load()
    if kernel is None:
        return "not built"
    return ("AVX2", "AVX-512 VNNI", "AMX-INT8 from 16 rows, else AVX-512 VNNI")[kernel.block_isa()]


_TORCH_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("torch_int8", default=False)


@contextmanager
def torch_kernel() -> Iterator[None]:
    """Layers quantised inside this block use torch's kernel: benchmarks time both kernels side
    by side in one process (`benchmarks/engine_speed.py --torch-kernel`)."""
    token = _TORCH_ONLY.set(True)
    try:
        yield
    finally:
        _TORCH_ONLY.reset(token)


def current() -> ModuleType | None:
    """The kernel a layer quantised now should use: ours, or None for torch's."""
    return None if _TORCH_ONLY.get() else load()


class UsesKernel:
    """A layer that may call the compiled kernel keeps whether it does, not the module object:
    a Python module cannot be deep-copied, and a model's copy must run the same kernel."""

    _ours = False

    @property
    def _kernel(self) -> ModuleType | None:
        return load() if self._ours else None

    @_kernel.setter
    def _kernel(self, kernel: ModuleType | None) -> None:
        self._ours = kernel is not None
