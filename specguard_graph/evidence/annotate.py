"""Target-side step annotations, computed offline from bench records: what the target thinks
of each scored draft step.

Per step (the selected draft candidate, whatever replaced it), in one pass over a problem
with one prefix cache:

* the target's token log-probs of the draft step after the prompt and the steps accepted
  before it (min and mean): a signal, nearly free in a live run because the target prefills
  accepted draft tokens when it catches up;
* the target's 0–9 rating of the step (the SpecReason judge prompt, one prefill, the
  probability-weighted digit / 9): a label.

Written to `target_labels.jsonl` in the results directory, one line per problem, resumable;
`specguard evidence` reads it when present. The annotations depend only on the records'
text, not on the numerics that produced them.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ..steps import ReasoningSteps, history, separator
from . import records

FILE = "target_labels.jsonl"
SPEC = ReasoningSteps()


def problem_labels(target: Any, question: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """{step index: {target_logprob_min, target_logprob_mean, judge}} for one record."""
    from ..bench.rsd import digit_ids, judge, judge_prompt

    digits = digit_ids(target)
    pc = target.new_prefix(SPEC.render_prompt(question, target.tokenizer))
    out: dict[str, Any] = {}
    for i, s in enumerate(steps):
        cand = records.scored_candidate(s)
        if cand is not None and cand.get("text"):
            text = cand["text"]
            lps, _ = target.score(pc, target.encode(text), frozenset())
            so_far = history(SPEC.delimiter, steps[:i]) + text
            rating = judge(target, pc, judge_prompt(target, question, so_far), digits)
            out[str(i)] = {"target_logprob_min": min(lps) if lps else None,
                           "target_logprob_mean": statistics.fmean(lps) if lps else None,
                           "judge": rating}  # fmt: skip
        pc.extend(target.encode(s["text"] + separator(SPEC.delimiter, s.get("ended", ""))))
    return out


def annotate(results_dir: Path, target: Any, methods: list[str] | None = None,
             progress: records.Progress = lambda done, total: None) -> Path:  # fmt: skip
    """Fill `target_labels.jsonl` for every finished record with step records (resumable)."""
    return records.fill(
        results_dir, FILE, methods,
        lambda rec: problem_labels(target, rec["question"], rec["step_records"]),
        wanted=lambda rec: bool(rec.get("question")), progress=progress,
    )  # fmt: skip


def load(results_dir: Path) -> dict[str, dict[str, Any]]:
    """{"method/id": {step index: annotations}} (empty when not annotated)."""
    return records.load(results_dir, FILE)
