"""Proposals per forward for the project's lossless SD (`models/verify.py`), against the target.

For each of the first `--problems` gsm8k problems the target decodes greedily, then the
verifier writes the same text with k = 1, 2, ... draft proposals per target forward; timers
interleaved per problem. Prints each run's time against the target's, whether the text is the
target's, forwards and accepted proposals, and the median ratio per k: the evidence behind
`verify.proposals`.

    .venv/bin/python benchmarks/verify_k.py --problems 5 --max-tokens 160 --k 1 3
"""

from __future__ import annotations

import argparse
import statistics

from specguard_graph.bench.data import load
from specguard_graph.bench.methods import plain, verified_sd
from specguard_graph.machine import describe
from specguard_graph.models import int8_kernel
from specguard_graph.models.loading import OPTIONS, load_lm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--k", nargs="+", type=int, default=[1, 3])
    args = ap.parse_args()
    print(f"{describe()}; int8 kernel: {int8_kernel.name()}; greedy, {args.max_tokens} tokens\n")
    draft, target = (load_lm(role, **OPTIONS["int8"]) for role in ("draft", "target"))
    alone = plain(target, args.max_tokens)
    solves = {k: verified_sd(target, draft, args.max_tokens, k=k) for k in args.k}
    ratios: dict[int, list[float]] = {k: [] for k in args.k}
    print("| problem | target s | k | s | × target | same text | forwards | accepted |")
    print("|---|---|---|---|---|---|---|---|")
    for p in load("gsm8k", limit=args.problems):
        ref = alone(p["question"])
        for k, solve in solves.items():
            r = solve(p["question"])
            st = r["verified"]
            ratios[k].append(r["latency_s"] / ref["latency_s"])
            print(f"| {p['id']} | {ref['latency_s']:.1f} | {k} | {r['latency_s']:.1f} | "
                  f"{ratios[k][-1]:.2f} | {r['text'] == ref['text']} | {st['forwards']} | "
                  f"{st['drafted']}/{st['proposed']} |", flush=True)  # fmt: skip
    for k in args.k:
        print(f"\nk = {k}: median {statistics.median(ratios[k]):.2f}x the target", end="")
    print()


if __name__ == "__main__":
    main()
