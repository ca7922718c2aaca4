"""Which CPU kernels produced a figure: every benchmark header and result record says so.

torch picks its vectorised kernels once per process by instruction set (AVX2 or AVX-512 on
x86, lowered with $ATEN_CPU_CAPABILITY), and floating-point reductions round differently
under each, so a number measured on one kind of CPU is only evidence about that kind.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels use in this process: "AVX2", "AVX512", ..."""
    return str(torch.backends.cpu.get_cpu_capability())


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """One header line: torch, the kernels' instruction set (and whether it was forced), the
    threads and the CPU."""
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    kernels = cpu_capability() + (f" (ATEN_CPU_CAPABILITY={forced})" if forced else "")
    return (
        f"torch {torch.__version__}, CPU kernels {kernels}, {torch.get_num_threads()} threads, "
        f"{_cpu_model()}"
    )
