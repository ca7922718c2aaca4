"""Value-label continuations: the plain greedy loop against prompt lookup, side by side.

For the first PROBLEMS records of METHOD in a results directory, the target continues greedily
from the prompt plus the record's first few accepted steps (the value label's "without" prefixes),
once with the plain loop (`sample`, as the labels were first made) and once with
`models/lookup.greedy`, proposing from the problem's other records and the continuations before
it, as `evidence/value.py` does. Prints per continuation both times, tokens per checking forward
and whether the tokens are identical; then the median time ratio (lookup / plain).

    .venv/bin/python benchmarks/probes/lookup_speed.py benchmarks/results/gsm8k-100 --problems 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from specguard_graph.evidence import records
from specguard_graph.machine import describe
from specguard_graph.models.loading import load_lm
from specguard_graph.models.local import lookup
from specguard_graph.models.local.decoding import cut_step
from specguard_graph.results import ResultLog
from specguard_graph.steps import NEVER, ReasoningSteps, separator

SPEC = ReasoningSteps()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--method", default="specguard-greedy")
    ap.add_argument("--problems", type=int, default=3)
    ap.add_argument("--prefixes", type=int, default=3, help="continuations per problem")
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    lm = load_lm("target", threads=args.threads)
    corpus = records.texts_by_problem(args.results)
    recs = list(ResultLog(args.results / f"{args.method}.jsonl", key="id").done().values())
    ratios, same = [], 0
    print(describe())
    print("problem   prefix  tokens  plain_s  lookup_s  tok/fwd  identical")
    for rec in recs[: args.problems]:
        prompt = SPEC.render_prompt(rec["question"], lm.tokenizer)
        index = lookup.NgramIndex()
        for text in corpus.get(rec["id"], []):
            index.add(lm.encode(text))
        prefix = ""
        for i, step in enumerate(rec["step_records"][: args.prefixes]):
            got = []
            for use in ("plain", "lookup"):
                pc = lm.new_prefix(prompt)
                lm.append_text(pc, prefix)
                t0 = time.perf_counter()
                if use == "plain":
                    s = lm.sample(pc, n=1, delimiter=NEVER, max_new_tokens=args.budget,
                                  temperature=0.0, fork=False)  # fmt: skip
                    ids, fwd = s.candidates[0].token_ids, len(s.candidates[0].token_ids)
                else:
                    gen, fwd = lookup.greedy(lm, pc, max_new_tokens=args.budget, index=index)
                    ids = cut_step(gen, NEVER, lm.eos_ids, lm.decode, None).token_ids
                got.append((ids, time.perf_counter() - t0, fwd))
            (a, ta, _), (b, tb, fwd) = got
            same += a == b
            ratios.append(tb / ta)
            print(f"{rec['id']:<10}{i:>6}{len(a):>8}{ta:>9.1f}{tb:>10.1f}"
                  f"{len(b) / fwd:>9.2f}  {a == b}")  # fmt: skip
            prefix += step["text"] + separator(SPEC.delimiter, step.get("ended", ""))
    print(f"identical {same}/{len(ratios)}; median time lookup/plain "
          f"{statistics.median(ratios):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
