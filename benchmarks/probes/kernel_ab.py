"""The int8 matmul of a git revision against the working tree's, interleaved in one process.

    .venv/bin/python benchmarks/probes/kernel_ab.py [--base HEAD] [--rows 1,2,3,4,6,8] [--rounds 9]
    .venv/bin/python benchmarks/probes/kernel_ab.py --model target --rows 1,2,3,4

Both sources are compiled (once each, under $SPECGUARD_HOME/kernels/ab-*) and run on one
layer of the target's matrices (q+k+v, o, gate+up, down at Qwen2.5-1.5B's sizes) with random
int8 weights, rounds interleaved. Prints the median time per layer for each row count, its
ratio to one row, and the new/old ratio. Before timing, it checks that both give the same bits
for every row count (the kernel's contract: the tiling never changes a sum).

One layer's 46 MB can sit in a large L3 (an AVX-512 Xeon's), where it times cache, not the
memory stream a decode is: `--model` times whole forwards of an embedded model instead (a
400-token cache, then m tokens), the two kernels swapped into the same packed layers.
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
from specguard_graph.models.install.registry import home
from specguard_graph.models.local import int8_kernel

ROOT = Path(__file__).parents[2]
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
    ap.add_argument("--model", choices=["draft", "target"], help="whole forwards of this model")
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
    if args.model:
        return whole_model(args.model, kernels, rows, args.rounds)
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
    table(f"ms per layer (q+k+v, o, gate+up, down), median of {args.rounds} interleaved rounds",
          med, rows)  # fmt: skip


def whole_model(role: str, kernels: dict, rows: list[int], rounds: int) -> None:
    """Whole forwards of `role` after a 400-token cache, each kernel swapped into its layers."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from engine_speed import prompt_ids

    from specguard_graph.models.loading import OPTIONS, load_lm
    from specguard_graph.models.local.kv_cache import new_cache
    from specguard_graph.models.local.numerics import Int8WeightOnlyLinear

    lm = load_lm(role, **OPTIONS["int8"])
    layers = [m for m in lm.model.modules() if isinstance(m, Int8WeightOnlyLinear)]
    ids = prompt_ids(lm, 400 + max(rows))
    times: dict[tuple[str, int], list[float]] = {(n, m): [] for n in kernels for m in rows}
    with torch.inference_mode():
        cache = new_cache(lm.model.config)
        lm.model(input_ids=torch.tensor([ids[:400]]), cache=cache, use_cache=True)
        for r in range(rounds + 1):
            for m in rows:
                x = torch.tensor([ids[400 : 400 + m]])
                for name, kernel in kernels.items():
                    for layer in layers:
                        layer._kernel = kernel
                    t0 = time.perf_counter()
                    lm.model(input_ids=x, cache=cache, use_cache=True)
                    if r:  # the first round warms both up
                        times[name, m].append(time.perf_counter() - t0)
                    cache.crop(-m)
    med = {key: statistics.median(v) * 1000 for key, v in times.items()}
    table(f"ms per {role} forward (a 400-token cache, then m tokens), median of {rounds} "
          "interleaved rounds", med, rows)  # fmt: skip


def table(title: str, med: dict[tuple[str, int], float], rows: list[int]) -> None:
    print(f"\n{title}")
    print("| rows | old ms | old × 1 row | new ms | new × 1 row | new / old |")
    print("|---|---|---|---|---|---|")
    for m in rows:
        o, n = med["old", m], med["new", m]
        print(f"| {m} | {o:.2f} | {o / med['old', rows[0]]:.2f} | {n:.2f} | "
              f"{n / med['new', rows[0]]:.2f} | {n / o:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
