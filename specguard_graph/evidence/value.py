"""The value label: does a draft step help the target reach the gold answer?

For step i of a record, the target continues greedily (to EOS or the token budget) from the
prompt plus the steps accepted before it, once with the scored draft candidate appended and
once without; each continuation is graded against the gold answer. The step's value is
`reached(with) - reached(without)`: +1 it helped, -1 it hurt, 0 it changed nothing. The
continuation without step i+1 is the one with step i whenever step i was accepted as drafted,
so a problem costs about one target continuation per step, not two. Continuations decode
through prompt lookup (`models/lookup.py`) where that gives the plain loop's tokens: the
problem's other records and its earlier continuations propose the next tokens.

Any target that generates works, a served one included (it needs no scores). Written to
`value_labels.jsonl`, one line per record, resumable; it depends only on the records' text,
not on the numerics that produced them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..bench.grade import grade
from ..models.base import PrefixCache
from ..models.local import lookup
from ..models.local.lookup import NgramIndex
from ..steps import ReasoningSteps, separator
from . import records

FILE = "value_labels.jsonl"
SPEC = ReasoningSteps()


def continuation_reaches(target: Any, prompt: str, prefix: str, gold: str, budget: int,
                         index: NgramIndex | None = None) -> bool:  # fmt: skip
    """Does the target's greedy continuation of `prompt + prefix` reach `gold`?"""
    pc = target.new_prefix(prompt)
    if prefix:
        target.append_text(pc, prefix)
    return grade(SPEC.extract_answer(prefix + continuation(target, pc, budget, index)), gold)


def continuation(target: Any, pc: PrefixCache, budget: int, index: NgramIndex | None) -> str:
    """The target's greedy text after `pc`, through prompt lookup where that gives the same
    tokens (a local model on a row-invariant format) and the plain loop elsewhere."""
    exact = index is not None and lookup.is_exact(target)
    return lookup.greedy_candidate(target, pc, max_new_tokens=budget, lookup=exact,
                                   index=index)[0].text  # fmt: skip


def problem_values(target: Any, question: str, gold: str, steps: list[dict[str, Any]],
                   budget: int, corpus: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """{step index: {value_with, value_without}} for every step with a scored draft candidate.

    `corpus` (the problem's other records' texts) seeds the prompt-lookup proposals."""
    prompt = SPEC.render_prompt(question, target.tokenizer)
    seen: dict[str, bool] = {}
    index = lookup.NgramIndex()
    for text in corpus:
        index.add(target.encode(text))

    def reaches(prefix: str) -> bool:
        if prefix not in seen:
            seen[prefix] = continuation_reaches(target, prompt, prefix, gold, budget, index)
        return seen[prefix]

    out: dict[str, Any] = {}
    prefix = ""
    for i, s in enumerate(steps):
        cand = records.scored_candidate(s)
        if cand is not None and cand.get("text"):
            step = cand["text"] + separator(SPEC.delimiter, cand.get("ended", ""))
            out[str(i)] = {"value_with": reaches(prefix + step), "value_without": reaches(prefix)}
        prefix += s["text"] + separator(SPEC.delimiter, s.get("ended", ""))
    return out


def label_values(results_dir: Path, target: Any, *, methods: list[str] | None = None,
                 problems: int = 60, budget: int = 512,
                 progress: records.Progress = lambda done, total: None) -> Path:  # fmt: skip
    """Fill `value_labels.jsonl` for the first `problems` problems of every SpecGuard method's
    records (resumable)."""
    from ..models.served.client import repeatable

    target = repeatable(target)
    corpus = records.texts_by_problem(results_dir)
    return records.fill(
        results_dir, FILE, methods,
        lambda rec: problem_values(target, rec["question"], str(rec["gold"]),
                                   rec["step_records"], budget, corpus.get(rec["id"], [])),
        wanted=lambda rec: bool(rec.get("question")) and rec.get("gold") is not None,
        limit=problems, progress=progress,
    )  # fmt: skip


def load(results_dir: Path) -> dict[str, dict[str, Any]]:
    """{"method/id": {step index: {value_with, value_without}}} (empty when not labelled)."""
    return records.load(results_dir, FILE)
