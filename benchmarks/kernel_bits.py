"""The int8 kernel's contract on any x86-64 CPU with torch, without the package installed.

    python3 benchmarks/kernel_bits.py      # compiles into a temp dir

Compiles `kernels/int8_gemm.cpp` as the package does and checks, on the target's matrix sizes
and two odd ones, that every output is one fixed sum: the same bits whatever rows are fed with
it (every few-row group, the many-row switch, row-block boundaries) and whatever the threads,
and within float32 rounding of a float64 product. Written to check a lent machine's CPU
(`benchmarks/results/engine/kernel-bits-device.txt`), where only torch is installed.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

# the package's kernel module read as a file (its sources and flags, no other import), so this
# runs where the package's dependencies are not installed
_SPEC = importlib.util.spec_from_file_location(
    "int8_kernel", Path(__file__).parents[1] / "specguard_graph/models/local/int8_kernel.py"
)
int8_kernel = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(int8_kernel)

SPLITS = [(0, 1), (7, 8), (0, 2), (0, 3), (3, 6), (2, 6), (0, 5), (0, 6), (0, 7), (0, 9),
          (1, 10), (0, 11), (0, 12), (1, 13), (100, 163), (119, 121), (250, 300)]  # fmt: skip
SHAPES = [(2048, 1536), (1536, 8960), (128, 700), (192, 513)]  # (out, in)


def main() -> None:
    cpu = open("/proc/cpuinfo").read()
    model = next(line for line in cpu.splitlines() if line.startswith("model name"))
    isa = "AVX-512" if "avx512f" in cpu else "AVX2"
    print(model.split(":", 1)[1].strip(), "|", isa, "| torch", torch.__version__)
    where = os.environ.get("SPECGUARD_KERNEL_DIR") or tempfile.mkdtemp()
    t = time.time()
    gemm = next(f for f in int8_kernel.SOURCES if f.name == "int8_gemm.cpp")
    kernel = load_inline("kernel_bits", cpp_sources=[gemm.read_text()], functions=["pack", "mm"],
                         extra_cflags=int8_kernel.FLAGS, extra_ldflags=["-fopenmp"],
                         build_directory=where)  # fmt: skip
    print(f"built in {time.time() - t:.0f} s")
    g, bad = torch.Generator().manual_seed(0), 0
    for n, k in SHAPES:
        q = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
        s = torch.rand(n, generator=g) / 50 + 1e-3
        blocks, x = kernel.pack(q), torch.randn(300, k, generator=g)
        torch.set_num_threads(2)
        y = kernel.mm(x, blocks, s)
        ref = (x.double() @ q.double().T) * s.double()
        err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
        for a, b in SPLITS:
            if not torch.equal(kernel.mm(x[a:b], blocks, s), y[a:b]):
                bad += 1
                print("rows differ:", n, k, a, b)
        for threads in (1, 3, 8, 16):
            torch.set_num_threads(threads)
            if not (torch.equal(kernel.mm(x, blocks, s), y)
                    and torch.equal(kernel.mm(x[:4], blocks, s), y[:4])):  # fmt: skip
                bad += 1
                print("threads differ:", n, k, threads)
        print(f"{n}x{k}: relative error against float64 {err:.1e}")
    print("CONTRACT HOLDS" if bad == 0 else f"{bad} MISMATCHES")


if __name__ == "__main__":
    main()
