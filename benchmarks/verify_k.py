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
import time

from specguard_graph.bench.data import load
from specguard_graph.bench.methods import SPEC, plain
from specguard_graph.machine import describe
from specguard_graph.models import int8_kernel
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.verify import verify_greedy
from specguard_graph.steps import NEVER


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--k", nargs="+", type=int, default=[1, 3])
    args = ap.parse_args()
    print(f"{describe()}; int8 kernel: {int8_kernel.name()}; greedy, {args.max_tokens} tokens\n")
    draft, target = (load_lm(role, **OPTIONS["int8"]) for role in ("draft", "target"))
    alone = plain(target, args.max_tokens)
    ratios: dict[int, list[float]] = {k: [] for k in args.k}
    print("| problem | target s | k | s | × target | same text | forwards | accepted |")
    print("|---|---|---|---|---|---|---|---|")
    for p in load("gsm8k", limit=args.problems):
        ref = alone(p["question"])
        for k in args.k:
            pcs = [
                m.new_prefix(SPEC.render_prompt(p["question"], m.tokenizer))
                for m in (target, draft)
            ]
            t0 = time.perf_counter()
            s, st = verify_greedy(target, pcs[0], candidate=[], delimiter=NEVER, draft=draft,
                                  max_new_tokens=args.max_tokens, draft_pc=pcs[1], k=k)  # fmt: skip
            dt = time.perf_counter() - t0
            ratios[k].append(dt / ref["latency_s"])
            same = s.candidates[0].text == ref["text"]
            print(f"| {p['id']} | {ref['latency_s']:.1f} | {k} | {dt:.1f} | {ratios[k][-1]:.2f} | "
                  f"{same} | {st.forwards} | {st.drafted}/{st.proposed} |", flush=True)  # fmt: skip
    for k in args.k:
        print(f"\nk = {k}: median {statistics.median(ratios[k]):.2f}x the target", end="")
    print()


if __name__ == "__main__":
    main()
