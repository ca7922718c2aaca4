"""Training and scoring examples: a record's prompt and answer as the draft sees them in a run.

Why step by step: the graph decodes one step at a time and feeds each accepted step's text as
its own tokens, so token boundaries fall at step delimiters. Encoding the answer as one string
would train (and score) the draft on tokenizations it never meets in a run.

A record is any JSONL object with `question` and `text` whose text is the target's: a target
bench run on fresh problems (`specguard distill problems`), or the records of a lossless run
(`sd-verify`, SpecGuard at tau > 1) on the user's own workload, whose text equals the target's.
A chat question (`chat_question` JSON: a BFCL item, an agent's call) is one message per step, in
the chat template, as the chat model runs it; any other question is reasoning steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agents.spec import ChatSteps, read_question
from ..errors import InputError
from ..steps import ReasoningSteps

SPEC, CHAT = ReasoningSteps(), ChatSteps()


def spec_for(question: str) -> ReasoningSteps | ChatSteps:
    """The step format a run gives `question`: chat messages for a chat question."""
    try:
        read_question(question)
    except InputError:
        return SPEC
    return CHAT


@dataclass(frozen=True)
class Example:
    """Token ids of a prompt and of the answer after it; `ends` are the answer's step ends."""

    prompt: list[int]
    answer: list[int]
    ends: list[int]


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def example(tokenizer: Any, question: str, answer: str) -> Example:
    """`answer` in the graph's prompt format for `question`, tokenized step by step."""
    spec = spec_for(question)
    prompt = encode(tokenizer, spec.render_prompt(question, tokenizer))
    steps = answer.split(spec.delimiter)
    ids: list[int] = []
    ends: list[int] = []
    for i, step in enumerate(steps):
        piece = step + (spec.delimiter if i + 1 < len(steps) else "")
        ids += encode(tokenizer, piece) if piece else []
        ends.append(len(ids))
    if not ids:
        raise InputError(f"the answer to {question[:60]!r} has no text to learn or score")
    return Example(prompt, ids, ends)


def examples(tokenizer: Any, records: Iterable[Mapping[str, Any]]) -> list[Example]:
    return [example(tokenizer, r["question"], r["text"]) for r in records if r.get("text")]


def read_records(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The {question, text} records of bench JSONL files; an unreadable, empty or text-less
    file gets one line naming it."""
    from .. import jsonl

    rows: list[dict[str, Any]] = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: no such records file")
        found = [r for _, r in jsonl.objects(path, ("question", "text")) if r.get("text")]
        if not found:
            raise InputError(f"{path}: no records with a question and the target's text")
        rows += found
    if not rows:
        raise InputError("no records given: name at least one bench JSONL")
    return rows
