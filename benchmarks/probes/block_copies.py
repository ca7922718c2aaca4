"""The gguf block kernel's copies side by side, one layer at a time: ms per call by rows.

The copies (AVX2, AVX-512 VNNI, AMX-INT8; `kernels/block_gemm.cpp`) give the same bits, so
which one runs a call is a matter of speed only, and this probe is where `kAmxMinRows` (the rows
from which the AMX copy runs) comes from. Each layer is one of the target's shapes with random
blocks of its format; for each row count every copy this CPU runs is timed on the same input,
interleaved, median of `--repeats`, and the outputs are checked to be equal. `--bits 16 8` times
each copy with int16 and with int8 activations (each int8 output also checked equal to the int8
values through the int16 products, `bits=-8`); `9` and `10` are int8 with each group's largest
one or two values at int16 (`gguf-a8o`).

    .venv/bin/python benchmarks/probes/block_copies.py --rows 1 4 8 16 64 256
    .venv/bin/python benchmarks/probes/block_copies.py --rows 1 4 16 256 --bits 16 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

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
    ap.add_argument("--bits", type=int, nargs="+", default=[16], choices=[16, 8, 9, 10],
                    help="activations to time each copy with: 16, 8 bits, or 8 with each "
                    "group's largest one (9) or two (10) at int16")  # fmt: skip
    args = ap.parse_args()
    kernel = load_kernel(args.threads)
    copies = range(kernel.block_isa() + 1)
    variants = [(c, b) for b in args.bits for c in copies]  # (copy, activation bits)
    print(f"{describe()}; block kernel copies: {', '.join(NAMES[c] for c in copies)}; "
          f"ms per call, median of {args.repeats}\n")  # fmt: skip
    bits = {16: " int16", 8: " int8", 9: " int8+1", 10: " int8+2"}
    heads = [f"{NAMES[c]}{'' if args.bits == [16] else bits[b]} ms" for c, b in variants]
    print("| layer | format | rows | " + " | ".join(heads) + " |")
    print("|---|---|---|" + "---|" * len(variants))
    for fmt, n, k, what in LAYERS:
        layer = BlockLinear(random_blocks(fmt, n, k), fmt, k)
        for rows in args.rows:
            x = activations(rows, k)
            for b in args.bits:  # int8's products are the int16 products of the int8 values
                ref = kernel.block_mm(x, layer.panels, fmt, n, 0, b if b == 16 else -b)
                for c in copies:
                    if not torch.equal(kernel.block_mm(x, layer.panels, fmt, n, c, b), ref):
                        raise SystemExit(f"{FORMATS[fmt]} at {rows} rows: {NAMES[c]} int{b} "
                                         "differs")  # fmt: skip

            def mm(v: int, x=x, w=layer.panels, fmt=fmt, n=n) -> torch.Tensor:
                return kernel.block_mm(x, w, fmt, n, *variants[v])

            med = median_ms(mm, range(len(variants)), args.repeats, f"{FORMATS[fmt]} at {rows}",
                            compare=False)  # fmt: skip
            cells = " | ".join(f"{m:.2f}" for m in med)
            print(f"| {what} {n}×{k} | {FORMATS[fmt]} | {rows} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
