"""The gguf block kernel's copies side by side, one layer at a time: ms per call by rows.

The copies (AVX2, AVX-512 VNNI, AMX-INT8; `kernels/block_gemm.cpp`) give the same bits, so
which one runs a call is a matter of speed only, and this probe is where `kAmxMinRows` (the rows
from which the AMX copy runs) comes from. Each layer is one of the target's shapes with random
blocks of its format; for each row count every copy this CPU runs is timed on the same input,
interleaved, median of `--repeats`, and the outputs are checked to be equal.

    .venv/bin/python benchmarks/probes/block_copies.py --rows 1 4 8 16 64 256
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # random_blocks
from copies import load_kernel, median_ms
from test_blocks import activations, random_blocks

from specguard_graph.machine import describe
from specguard_graph.models.local.blocks import FORMATS, BlockLinear

NAMES = ("AVX2", "VNNI", "AMX")
LAYERS = ((12, 8960, 1536, "gate/up"), (14, 1536, 8960, "down"), (8, 4864, 896, "draft MLP"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 64, 256])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    kernel = load_kernel(args.threads)
    copies = range(kernel.block_isa() + 1)
    print(f"{describe()}; block kernel copies: {', '.join(NAMES[c] for c in copies)}; "
          f"ms per call, median of {args.repeats}\n")  # fmt: skip
    print("| layer | format | rows | " + " | ".join(f"{NAMES[c]} ms" for c in copies) + " |")
    print("|---|---|---|" + "---|" * len(copies))
    for fmt, n, k, what in LAYERS:
        layer = BlockLinear(random_blocks(fmt, n, k), fmt, k)
        for rows in args.rows:
            x = activations(rows, k)
            mm = partial(kernel.block_mm, x, layer.panels, fmt, n)  # mm(copy)
            med = median_ms(mm, copies, args.repeats, f"{FORMATS[fmt]} at {rows} rows")
            cells = " | ".join(f"{m:.2f}" for m in med)
            print(f"| {what} {n}×{k} | {FORMATS[fmt]} | {rows} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
