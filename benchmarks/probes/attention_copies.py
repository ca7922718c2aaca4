"""The attention kernel's copies side by side, one layer at a time, on an agent's shapes.

The copies (plain: one row at a time, the reference; AVX2 and AVX-512: row blocks through key
chunks, eight scores at a time; `kernels/attention.cpp`) give the same bits, so which one runs
is a matter of speed only. An agent's calls are long-context: a cold prefill of a ~3,000-token
prompt of tool documentation, then catch-ups of a few dozen new tokens, 2- to 4-row checks and
single decode rows after it. Each shape is timed on every copy this CPU runs, interleaved,
median of `--repeats`, and the outputs are checked to be equal.

    .venv/bin/python benchmarks/probes/attention_copies.py --context 3000
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
from copies import load_kernel, median_ms

from specguard_graph.machine import describe

NAMES = ("plain", "AVX2", "AVX-512")
MODELS = (("target", 12, 128), ("draft", 14, 64))  # query heads (2 kv heads), head size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", type=int, default=3000, help="keys already in the cache")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    kernel = load_kernel(args.threads)
    copies = range(3 if kernel.block_isa() >= 1 else 2)
    n = args.context
    shapes = ((f"prefill {n}", n, n), (f"catch-up 64 @ {n}", 64, n + 64),
              (f"check 4 @ {n}", 4, n + 4), (f"decode 1 @ {n}", 1, n + 1))  # fmt: skip
    print(f"{describe()}; attention copies: {', '.join(NAMES[c] for c in copies)}; ms per "
          f"layer call, median of {args.repeats}\n")  # fmt: skip
    print("| model | call | " + " | ".join(f"{NAMES[c]} ms" for c in copies) + " | plain / best |")
    print("|---|---|" + "---|" * len(copies) + "---|")
    g = torch.Generator().manual_seed(0)
    none = torch.empty(0, dtype=torch.bool)  # causal
    for model, heads, d in MODELS:
        for what, rows, keys in shapes:
            q = torch.randn(1, heads, rows, d, generator=g)
            k, v = torch.randn(1, 2, keys, d, generator=g), torch.randn(1, 2, keys, d, generator=g)
            calls = max(1, 200 // rows)  # small calls repeated, so a timer sees milliseconds
            attend = partial(kernel.attention, q, k, v, none, d**-0.5, False)  # attend(copy)
            med = median_ms(attend, copies, args.repeats, f"{model} {what}", calls)
            cells = " | ".join(f"{m:.2f}" for m in med)
            print(f"| {model} | {what} | {cells} | {med[0] / med[-1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
