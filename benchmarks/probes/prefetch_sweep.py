"""How far ahead should the gguf kernel prefetch a panel's stream on this machine?

    .venv/bin/python benchmarks/probes/prefetch_sweep.py --distances 0,1024,2048,4096,8192

A decode reads every weight once from memory. This builds the working tree's kernel once per
prefetch distance (`-DSPECGUARD_AHEAD=n`, bytes ahead in a panel's stream; `kAhead` in
`kernels/block_gemm.cpp`), puts the draft and the target in `gguf` on their blocks, and times
`--rows` rows (1: a decode) through every block layer of a model, one layer after another:
the passes alternate between the models and the distances, so that no model's weights are
left in cache for the next timed pass. Each variant's outputs are first checked equal to the
installed kernel's (a prefetch moves no sum). A plain 2-thread sum over 1 GiB gives the memory
rate to compare with.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local import int8_kernel
from specguard_graph.models.local.blocks import BlockLinear

sys.path.insert(0, str(Path(__file__).parent))
from kernel_ab import compile_texts, through


def plain_read_rate() -> float:
    """GB/s of torch's float32 sum over 1 GiB: what this machine's memory gives 2 threads."""
    x = torch.ones(1 << 28)
    x.sum()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t0)
    return x.numel() * 4 / statistics.median(times) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distances", default="0,1024,2048,4096,8192",
                    help="bytes ahead, comma-separated (0: the line being read)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1,
                    help="rows per call: 1 a decode, 4-5 a verification forward")  # fmt: skip
    args = ap.parse_args()
    try:
        distances = [int(d) for d in args.distances.split(",")]
    except ValueError:
        ap.error(f"--distances must be integers separated by commas, got {args.distances!r}")
    if min(distances) < 0 or args.rounds < 1 or args.rows < 1:
        ap.error("--distances must be >= 0, --rounds and --rows >= 1")
    torch.set_num_threads(2)
    print(describe(), flush=True)
    texts = {f.name: f.read_text() for f in int8_kernel.SOURCES + int8_kernel.INCLUDES}
    kernels = {d: compile_texts(texts, (f"SPECGUARD_AHEAD={d}",)) for d in distances}
    models = {}
    for role in ("draft", "target"):
        layers = [m for m in load_lm(role, **OPTIONS["gguf"]).model.modules()
                  if isinstance(m, BlockLinear)]  # fmt: skip
        xs = [torch.randn(args.rows, m.in_features) for m in layers]
        ref = [m(x) for m, x in zip(layers, xs, strict=True)]  # the installed kernel
        models[role] = layers, xs, sum(m.panels.numel() for m in layers)
        for d, kernel in kernels.items():
            if not all(map(torch.equal, through(layers, xs, kernel)[0], ref)):
                raise SystemExit(f"{role}: {d} bytes ahead changed an output's bits")
    print(f"bits: every distance gives the installed kernel's outputs {distances}", flush=True)
    times: dict[tuple[str, int], list[float]] = {(r, d): [] for r in models for d in distances}
    for _ in range(args.rounds):
        for d, kernel in kernels.items():
            for role, (layers, xs, _) in models.items():
                times[role, d].append(through(layers, xs, kernel)[1])
    print(f"plain 2-thread read: {plain_read_rate():.1f} GB/s")
    print(f"\n{args.rows} row(s) through every block layer, median of {args.rounds} interleaved "
          "rounds")  # fmt: skip
    print("| bytes ahead | draft ms | draft GB/s | target ms | target GB/s |")
    print("|---|---|---|---|---|")
    for d in distances:
        cells = []
        for role, (_, _, nbytes) in models.items():
            t = statistics.median(times[role, d])
            cells += [f"{1000 * t:.2f}", f"{nbytes / t / 1e9:.1f}"]
        print(f"| {d} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
