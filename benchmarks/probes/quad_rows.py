"""From how many rows do int8 activations pay in quads (`gguf-a8`, `kernels/block_quads.inc`)?

Below `kQuadRows` a call with int8 activations runs the int16 code on the int8 values; from it
on, the codes are repacked into quads once per call and met by `vpdpbusd` / `vpmaddubsw`. The
two give the same bits, so the threshold is a matter of speed only. This probe builds the kernel
with quads from every row count (`-DSPECGUARD_QUAD_ROWS=1`) beside the installed one, checks
that every block layer of the target gives the same bits in both at each row count, and times
all of the target's block layers at each (a check of m rows is m rows through every layer),
interleaved, median of `--rounds`.

    .venv/bin/python benchmarks/probes/quad_rows.py --rows 1 2 3 4 5 6 8 16
"""

from __future__ import annotations

import argparse
import statistics

import torch
from kernel_ab import compile_texts, through

from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local import int8_kernel
from specguard_graph.models.local.blocks import BlockLinear


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 8, 16])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(describe(), flush=True)
    texts = {f.name: f.read_text() for f in int8_kernel.SOURCES + int8_kernel.INCLUDES}
    quads = compile_texts(texts, ("SPECGUARD_QUAD_ROWS=1",))
    kernels = {"int16 code": int8_kernel.load(), "quads": quads}
    layers = [m for m in load_lm("target", **OPTIONS["gguf-a8"]).model.modules()
              if isinstance(m, BlockLinear)]  # fmt: skip
    xs = {r: [torch.randn(r, lay.in_features) for lay in layers] for r in args.rows}
    for rows, x in xs.items():
        ref, got = (through(layers, x, kernel)[0] for kernel in kernels.values())
        if not all(map(torch.equal, ref, got)):
            raise SystemExit(f"{rows} rows: quads changed an output's bits")
    print(f"bits: quads give the int16 code's outputs at every row count {args.rows}", flush=True)
    times: dict[tuple[str, int], list[float]] = {(k, r): [] for k in kernels for r in args.rows}
    for _ in range(args.rounds):
        for rows, x in xs.items():
            for name, kernel in kernels.items():
                times[name, rows].append(through(layers, x, kernel)[1])
    print(f"\nthe target's block layers, int8 activations; ms per pass, median of {args.rounds}")
    print("| rows | int16 code ms | quads ms | quads / int16 code |")
    print("|---|---|---|---|")
    for rows in args.rows:
        a, b = (statistics.median(times[k, rows]) * 1000 for k in kernels)
        print(f"| {rows} | {a:.1f} | {b:.1f} | {b / a:.2f} |", flush=True)


if __name__ == "__main__":
    main()
