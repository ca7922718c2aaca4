"""The int8 matmul of a git revision against the working tree's, interleaved in one process.

    .venv/bin/python benchmarks/kernel_ab.py [--base HEAD] [--rows 1,2,3,4,6,8] [--rounds 9]

Both sources are compiled (once each, under $SPECGUARD_HOME/kernels/ab-*) and run on one
layer of the target's matrices (q+k+v, o, gate+up, down at Qwen2.5-1.5B's sizes) with random
int8 weights, rounds interleaved. Prints the median time per layer for each row count, its
ratio to one row, and the new/old ratio. Before timing, it checks that both give the same bits
for every row count (the kernel's contract: the tiling never changes a sum).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

from specguard_graph.machine import describe
from specguard_graph.models import int8_kernel
from specguard_graph.models.registry import home

ROOT = Path(__file__).parents[1]
GEMM = "specguard_graph/models/kernels/int8_gemm.cpp"
SHAPES = [(2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960)]  # (out, in) per layer


def build(source: str, tag: str):
    digest = hashlib.sha256(source.encode() + torch.__version__.encode()).hexdigest()[:12]
    where = home() / "kernels" / f"ab-{tag}-{digest}"
    where.mkdir(parents=True, exist_ok=True)
    return load_inline(f"ab_{tag}_{digest}", cpp_sources=[source], functions=["pack", "mm"],
                       extra_cflags=int8_kernel.FLAGS, extra_ldflags=["-fopenmp"],
                       build_directory=str(where))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision of the old kernel")
    ap.add_argument("--rows", default="1,2,3,4,6,8")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    print(describe())
    old_src = subprocess.run(["git", "show", f"{args.base}:{GEMM}"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    kernels = {"old": build(old_src, "old"), "new": build((ROOT / GEMM).read_text(), "new")}
    torch.manual_seed(0)
    weights = [(torch.randint(-127, 128, (n, k), dtype=torch.int8), torch.rand(n) * 0.01)
               for n, k in SHAPES]  # fmt: skip
    packed = {name: [(m.pack(q), s) for q, s in weights] for name, m in kernels.items()}
    xs = {m: [torch.randn(m, k) for _, k in SHAPES] for m in rows}
    for m in rows:
        for (bo, s), (bn, _), x in zip(packed["old"], packed["new"], xs[m], strict=True):
            if not torch.equal(kernels["old"].mm(x, bo, s), kernels["new"].mm(x, bn, s)):
                raise SystemExit(f"{m} rows: the new kernel's bits differ from {args.base}'s")
    print(f"bits: new = {args.base} at every row count {rows}")
    times: dict[tuple[str, int], list[float]] = {(n, m): [] for n in kernels for m in rows}
    for _ in range(args.rounds):
        for m in rows:
            for name, kernel in kernels.items():
                t0 = time.perf_counter()
                for _ in range(3):
                    for (b, s), x in zip(packed[name], xs[m], strict=True):
                        kernel.mm(x, b, s)
                times[name, m].append((time.perf_counter() - t0) / 3)
    med = {key: statistics.median(v) * 1000 for key, v in times.items()}
    print(f"\nms per layer (q+k+v, o, gate+up, down), median of {args.rounds} interleaved rounds")
    print("| rows | old ms | old × 1 row | new ms | new × 1 row | new / old |")
    print("|---|---|---|---|---|---|")
    for m in rows:
        o, n = med["old", m], med["new", m]
        print(f"| {m} | {o:.2f} | {o / med['old', rows[0]]:.2f} | {n:.2f} | "
              f"{n / med['new', rows[0]]:.2f} | {n / o:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
