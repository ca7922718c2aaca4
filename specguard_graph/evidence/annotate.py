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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..results import ResultLog
from ..steps import ReasoningSteps, history, separator

FILE = "target_labels.jsonl"
SPEC = ReasoningSteps()


def problem_labels(target: Any, question: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """{step index: {target_logprob_min, target_logprob_mean, judge}} for one record."""
    from ..bench.rsd import digit_ids, judge, judge_prompt

    digits = digit_ids(target)
    pc = target.new_prefix(SPEC.render_prompt(question, target.tokenizer))
    out: dict[str, Any] = {}
    for i, s in enumerate(steps):
        cands = s.get("candidate_signals") or []
        sel = s.get("selected")
        if cands and sel is not None and sel < len(cands) and cands[sel].get("text"):
            text = cands[sel]["text"]
            lps, _ = target.score(pc, target.encode(text), frozenset())
            so_far = history(SPEC.delimiter, steps[:i]) + text
            rating = judge(target, pc, judge_prompt(target, question, so_far), digits)
            out[str(i)] = {"target_logprob_min": min(lps) if lps else None,
                           "target_logprob_mean": statistics.fmean(lps) if lps else None,
                           "judge": rating}  # fmt: skip
        pc.extend(target.encode(s["text"] + separator(SPEC.delimiter, s.get("ended", ""))))
    return out


def annotate(results_dir: Path, target: Any, methods: list[str] | None = None,
             progress: Callable[[int, int], None] = lambda done, total: None) -> Path:  # fmt: skip
    """Fill `target_labels.jsonl` for every finished record with step records (resumable)."""
    log = ResultLog(results_dir / FILE, key="key")
    done = log.done()
    todo = []
    for f in sorted(results_dir.glob("*.jsonl")):
        if f.name.endswith("_labels.jsonl") or (methods and f.stem not in methods):
            continue
        for rec in ResultLog(f, key="id").done().values():
            key = f"{f.stem}/{rec['id']}"
            if rec.get("step_records") and rec.get("question") and key not in done:
                todo.append((key, rec))
    for n, (key, rec) in enumerate(todo):
        log.append({"key": key, "steps": problem_labels(target, rec["question"],
                                                        rec["step_records"])})  # fmt: skip
        progress(n + 1, len(todo))
    return results_dir / FILE


def load(results_dir: Path) -> dict[str, dict[str, Any]]:
    """{"method/id": {step index: annotations}} (empty when not annotated)."""
    path = results_dir / FILE
    if not path.exists():
        return {}
    return {k: v.get("steps") or {} for k, v in ResultLog(path, key="key").done().items()}
