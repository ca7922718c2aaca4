"""Graph state: JSON-like data only, so any checkpointer can persist a run.

Models, KV caches and captured attention live in the run's session (see runtime.py),
keyed by `run_id`; the state holds what is needed to rebuild that session from scratch.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

Status = Literal["final", "max_steps", "max_total_tokens"]


def add_numbers(left: dict[str, float] | None, right: dict[str, float] | None) -> dict[str, float]:
    """Reducer: sum per key, so parallel nodes can each add their share of time or tokens."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0) + value
    return out


class CandidateRecord(TypedDict, total=False):
    text: str
    tokens: int
    ended: Literal["delimiter", "eos", "length", "doomed"]
    token_logprobs: list[float]
    pieces: list[str] | None  # each token's text, where the backend has tokens (for the view)


class StepRecord(TypedDict, total=False):
    """One step of the trace (docs/design.md's JSON contract plus diagnostics)."""

    index: int
    text: str
    source: Literal["draft", "target", "human", "tool"]
    grounding: float | None
    logprob: float | None
    score: float | None
    accepted: bool
    candidates: list[str]
    selected: int
    draft_text: str
    reason: str | None
    ended: Literal["delimiter", "eos", "length"]
    cut: bool
    tokens: int
    fed: dict[str, int]
    time_s: float
    spent: dict[str, float]  # seconds this step spent drafting, verifying, in the target
    candidate_signals: list[dict[str, Any]]  # per candidate: grounding, log-probs, vote
    tau: float  # the threshold this step was decided against
    detail: dict[str, Any]  # the scored candidate per token: pieces, log-probs, grounding mass
    observation: dict[str, Any]  # a `tool` step: the program's real stdout, error, status, time
    dropped: str | None  # what the step wrote after closing its program (`ProgramSteps.trim`)
    checked: str  # the spec's check of the selected draft candidate: "ok" or why it failed
    fallback: Literal["verify", "rewrite"]  # a target step: how the target wrote it
    verified: dict[str, int]  # verify: candidate tokens kept, draft tokens accepted, forwards


class Decision(TypedDict, total=False):
    step: int
    accepted: bool
    score: float | None
    grounding_norm: float | None
    logprob_norm: float | None
    reason: str | None
    widen: bool  # specguard-adaptive: draw the rest of the vote for this step
    ask: bool  # interrupt_on_reject: a person decides (not part of the decision event)
    checked: str  # the spec's own check of the selected candidate (tool calls): "ok" or why not


class InputState(TypedDict):
    question: str


class OutputState(TypedDict, total=False):
    question: str
    answer: str | None
    text: str
    steps: Annotated[list[StepRecord], operator.add]
    status: Status
    timing: Annotated[dict[str, float], add_numbers]
    counts: Annotated[dict[str, float], add_numbers]


class SpecGuardState(InputState, OutputState, total=False):
    run_id: str
    started_at: float
    candidates: list[CandidateRecord]
    selected: int
    votes: list[float]  # each candidate's mean cosine similarity to the others
    candidate_grounding: list[float | None]  # each candidate's ABGV, where it was captured
    grounding: float | None
    grounding_tokens: list[float] | None
    logprob: float | None
    grounding_error: str | None
    logprob_error: str | None
    decision: Decision
    program: dict[str, Any] | None  # check_program: the candidate's program and its run
