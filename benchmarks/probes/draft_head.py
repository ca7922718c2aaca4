"""Does the draft's frequent-vocabulary head (`models/local/draft_head.py`, FR-Spec) make the
project's lossless SD faster, with the same text? `sd-verify` with the full head and with the
reduced one, interleaved per problem and round: seconds per token, the share of proposals the
target kept, and whether the two texts are equal.

    .venv/bin/python benchmarks/probes/draft_head.py --problems 3 --max-tokens 128 --rounds 2
    .venv/bin/python benchmarks/probes/draft_head.py --format gguf --vocab 0 100000 --problems 6
"""

from __future__ import annotations

import argparse
import statistics

from specguard_graph.bench.data import gsm8k_100
from specguard_graph.bench.methods import verified_sd
from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--vocab", type=int, nargs="+", default=[0, 32768])
    ap.add_argument("--format", choices=["int8", "gguf"], default="int8")
    args = ap.parse_args()
    draft, target = (load_lm(role, **OPTIONS[args.format]) for role in ("draft", "target"))
    print(describe(), flush=True)
    solve = verified_sd(target, draft, args.max_tokens)
    per: dict[int, list[float]] = {v: [] for v in args.vocab}
    for p in gsm8k_100()[: args.problems]:
        texts = {}
        for r in range(args.rounds):
            for v in args.vocab:
                draft.proposal_vocab = v
                for m in (draft, target):
                    m.prefix_store.clear()
                out = solve(p["question"])
                st = out["verified"]
                per[v].append(out["latency_s"] / out["tokens"])
                texts[v] = out["text"]
                kept = st["drafted"] / max(st["proposed"], 1)
                print(
                    f"{p['id']} r{r} vocab {v or 'full':>6}: {1000 * per[v][-1]:6.1f} ms/token"
                    f"  proposals kept {kept:.2f}  forwards {st['forwards']}",
                    flush=True,
                )
        print(f"  same text: {len(set(texts.values())) == 1}", flush=True)
    base = statistics.median(per[args.vocab[0]])
    for v in args.vocab:
        print(f"vocab {v or 'full':>6}: median {1000 * statistics.median(per[v]):.1f} ms/token "
              f"({statistics.median(per[v]) / base:.3f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
