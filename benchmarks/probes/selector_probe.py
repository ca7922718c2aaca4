"""Why does the paper's k = 4 do worse than one sample on the embedded pair? A probe.

On the GSM8K run, `specguard` (k = 4, medoid of four T = 0.7 samples) solved far fewer
problems than `specguard-adaptive` (usually one T = 0.7 sample). Two explanations are
checked here, step by step along the medoid's own path (every step accepted, as at τ = 0):

A. Batching hurts the samples: dynamic int8 quantises each call's activations with one scale
   for the whole batch, so four diverging rows may each be drawn from a worse distribution
   than a row drawn alone. Compare the four batched rows with four rows drawn one at a time.
B. The medoid picks badly: compare the medoid with the other three rows of its batch.

Quality proxy: the target's mean log-prob per token of the candidate (the RSD-style reward),
computed in one prefill per candidate. Prints a per-step log and a summary table.

    .venv/bin/python benchmarks/probes/selector_probe.py --problems 6 --steps 5
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from specguard_graph.bench.data import load as load_data
from specguard_graph.machine import describe
from specguard_graph.models import Candidate, LocalCausalLM, PrefixCache
from specguard_graph.models.loading import load_embedder, load_lm
from specguard_graph.scoring import select_medoid
from specguard_graph.steps import ReasoningSteps

SPEC = ReasoningSteps()


def target_quality(
    target: LocalCausalLM, pc: PrefixCache, ids: list[int], cand: Candidate
) -> float:
    """Mean target log-prob per token of `cand` after context `ids`; `pc` keeps the target's
    cache across calls (the common-prefix check crops the previous candidate)."""
    if not cand.token_ids:
        return float("nan")
    pc.ids = list(ids)
    lps, _ = target.score(pc, cand.token_ids, frozenset())
    return statistics.fmean(lps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-step-tokens", type=int, default=160)
    args = ap.parse_args()
    print(describe(), flush=True)
    t_start = time.perf_counter()
    draft, target, embedder = load_lm("draft"), load_lm("target"), load_embedder()
    rows: dict[str, list[float]] = {"single": [], "medoid": [], "others": []}
    lengths: dict[str, list[int]] = {"medoid": [], "others": [], "single": []}
    rank_of_medoid: list[int] = []
    kw = dict(
        delimiter=SPEC.delimiter,
        max_new_tokens=args.max_step_tokens,
        temperature=args.temperature,
    )
    for p, prob in enumerate(load_data("gsm8k", limit=args.problems)):
        pc = draft.new_prefix(SPEC.render_prompt(prob["question"], draft.tokenizer))
        pc_t = PrefixCache(ids=list(pc.ids))
        for step in range(args.steps):
            ctx = list(pc.ids)
            seed = 1000 * p + 10 * step
            batch = draft.sample(pc, n=args.k, seed=seed, **kw)
            singles = [
                draft.sample(pc, n=1, seed=seed + 1 + j, **kw).candidates[0] for j in range(args.k)
            ]
            q_b = [target_quality(target, pc_t, ctx, c) for c in batch.candidates]
            q_s = [target_quality(target, pc_t, ctx, c) for c in singles]
            m = select_medoid(embedder.embed([c.text for c in batch.candidates]))
            rows["single"] += q_s
            rows["medoid"].append(q_b[m])
            rows["others"] += [q for i, q in enumerate(q_b) if i != m]
            lengths["medoid"].append(len(batch.candidates[m].token_ids))
            lengths["others"] += [
                len(c.token_ids) for i, c in enumerate(batch.candidates) if i != m
            ]
            lengths["single"] += [len(c.token_ids) for c in singles]
            rank_of_medoid.append(1 + sum(q > q_b[m] for q in q_b))
            print(
                f"problem {p} step {step}: medoid row {m} (rank {rank_of_medoid[-1]} of "
                f"{args.k} by target log-prob); batched {[round(q, 2) for q in q_b]} "
                f"singles {[round(q, 2) for q in q_s]}  [{time.perf_counter() - t_start:.0f} s]",
                flush=True,
            )
            chosen = batch.candidates[m]
            draft.adopt(pc, batch, m)
            if chosen.ended != "delimiter" or SPEC.extract_answer(chosen.text) is not None:
                break
    n = len(rank_of_medoid)
    print(
        f"\n{n} steps on {args.problems} GSM8K problems, k = {args.k}, "
        f"T = {args.temperature}, draft and target int8"
    )
    print("| candidates | n | mean target log-prob/token | median | median tokens |")
    print("|---|---|---|---|---|")
    rows["batched"] = rows["medoid"] + rows["others"]  # every row of every batch
    lengths["batched"] = lengths["medoid"] + lengths["others"]
    for name in ("batched", "single", "medoid", "others"):
        qs = [q for q in rows[name] if not math.isnan(q)]
        ls = lengths[name]
        print(
            f"| {name} | {len(qs)} | {statistics.fmean(qs):.3f} | {statistics.median(qs):.3f} "
            f"| {statistics.median(ls):.0f} |"
        )
    dist = {r: rank_of_medoid.count(r) for r in range(1, args.k + 1)}
    print(f"medoid's rank among its batch by target log-prob (1 = best): {dist}")


if __name__ == "__main__":
    main()
