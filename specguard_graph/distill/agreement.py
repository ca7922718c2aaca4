"""How well a draft already writes the target's text: teacher-forced on the target's answers.

Why these two numbers (issue 74): lossless speed-up grows with the share of positions where
the draft's most likely token is the target's; the accept decision needs the draft's whole
step right. Both come from one forward per answer: the draft reads the prompt (in the graph's
format) and the target's answer, and at each answer position its argmax is compared with the
target's next token. A step counts as equal when every position of it, its delimiter included,
agrees: exactly when the draft's greedy decode from the same prefix writes the target's step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from ..errors import InputError
from .examples import example


@torch.inference_mode()
def answer_agreement(lm: Any, question: str, answer: str) -> tuple[list[bool], list[int]]:
    """Per answer token: does `lm`'s argmax equal it; and the token index where each step ends
    (after its delimiter), from the answer's own text."""
    ex = example(lm.tokenizer, question, answer)
    x = torch.tensor([ex.prompt + ex.answer])
    logits = lm.model(input_ids=x, logits_to_keep=len(ex.answer) + 1).logits[0, :-1]
    return (logits.argmax(-1) == torch.tensor(ex.answer)).tolist(), ex.ends


def answer_counts(lm: Any, question: str, answer: str) -> dict[str, int]:
    """One answer's tallies: positions, agreeing positions, steps, equal steps, and agreeing
    runs (each miss ends one; the answer's end ends the last)."""
    hits, ends = answer_agreement(lm, question, answer)
    steps = equal = start = 0
    for end in ends:
        if end > start:
            steps, equal = steps + 1, equal + all(hits[start:end])
        start = end
    agree = sum(hits)
    return {"positions": len(hits), "agree": agree, "steps": steps, "equal": equal,
            "runs": len(hits) - agree + 1}  # fmt: skip


def summary(counts: Iterable[Mapping[str, int]]) -> dict[str, Any]:
    """Tallies summed into the shares `agreement` reports."""
    total = {"positions": 0, "agree": 0, "steps": 0, "equal": 0, "runs": 0}
    for c in counts:
        for k in total:
            total[k] += c[k]
    if not total["positions"]:
        raise InputError("no answer text to score: the records are empty")
    return {"positions": total["positions"], "top1": total["agree"] / total["positions"],
            "steps": total["steps"], "steps_equal": total["equal"] / max(total["steps"], 1),
            "mean_run": total["agree"] / max(total["runs"], 1)}  # fmt: skip


def agreement(lm: Any, records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Over `records` ({"question", "text"}: the target's answers): the share of positions and
    of whole steps the draft writes as the target did, and the mean run of agreeing tokens."""
    return summary(answer_counts(lm, r["question"], r["text"]) for r in records)
