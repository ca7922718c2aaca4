"""Proposals per forward for the project's lossless SD (`models/verify.py`), against the target.

For each of the first `--problems` gsm8k problems the target decodes greedily, then the
verifier writes the same text with k = 1, 2, ... draft proposals per target forward; timers
interleaved per problem. Prints each run's time against the target's, whether the text is the
target's, forwards and accepted proposals, and the median ratio per k: the evidence behind
`verify.proposals`.

    .venv/bin/python benchmarks/probes/verify_k.py --problems 5 --max-tokens 160 --k 1 3
    .venv/bin/python benchmarks/probes/verify_k.py --problems 6 --max-tokens 256 --k 1 --lookup 0 2
    .venv/bin/python benchmarks/probes/verify_k.py --format gguf --k 1 3 --lookup 2 --more-if 0 0.9

With `--lookup`, each k runs once per number of looked-up tokens after the draft's proposals
(`verify.lookup_tokens`), and the rows say how many of those the target kept. With `--more-if`,
once per threshold: the draft goes on past a proposal (up to k) only where it gave that one at
least this probability (`verify.propose`).
"""

from __future__ import annotations

import argparse
import statistics

from specguard_graph.bench.data import load
from specguard_graph.bench.methods import plain, verified_sd
from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local import numerics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--k", nargs="+", type=int, default=[1, 3])
    ap.add_argument("--lookup", nargs="+", type=int, default=[0])
    ap.add_argument("--more-if", nargs="+", type=float, default=[0.0],
                    help="the draft's probability of its last proposal to propose another "
                    "(up to k; 0: always k)")  # fmt: skip
    ap.add_argument("--format", choices=["int8", "gguf"], default="int8")
    args = ap.parse_args()
    print(
        f"{describe()}; int8 kernel: {numerics.kernel_name()}; greedy, {args.max_tokens} tokens\n"
    )
    draft, target = (load_lm(role, **OPTIONS[args.format]) for role in ("draft", "target"))
    alone = plain(target, args.max_tokens)
    solves = {(k, n, m): verified_sd(target, draft, args.max_tokens, k=k, lookup=n, more_if=m)
              for k in args.k for n in args.lookup for m in args.more_if}  # fmt: skip
    ratios: dict[tuple[int, int, float], list[float]] = {key: [] for key in solves}
    print("| problem | target s | k | lookup | more if | s | × target | same text | forwards "
          "| accepted | looked up kept |\n" + "|---" * 11 + "|")  # fmt: skip
    for p in load("gsm8k", limit=args.problems):
        ref = alone(p["question"])
        for k, solve in solves.items():
            r = solve(p["question"])
            st = r["verified"]
            ratios[k].append(r["latency_s"] / ref["latency_s"])
            print(f"| {p['id']} | {ref['latency_s']:.1f} | {k[0]} | {k[1]} | {k[2]} | "
                  f"{r['latency_s']:.1f} "
                  f"| {ratios[k][-1]:.2f} | {r['text'] == ref['text']} | {st['forwards']} | "
                  f"{st['drafted']}/{st['proposed']} | {st['found']}/{st['looked_up']} |",
                  flush=True)  # fmt: skip
    for k, lookup, more in solves:
        med = statistics.median(ratios[k, lookup, more])
        print(f"\nk = {k}, lookup = {lookup}, more if {more}: median {med:.2f}x the target", end="")
    print()


if __name__ == "__main__":
    main()
