"""What the nodes share: their bound dependencies and the bookkeeping of a finished step."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from langgraph.config import get_stream_writer

from ..config import SpecGuardConfig
from ..models import StepModel
from ..models.embedder import SentenceEmbedder
from ..runtime import RunSession, SessionStore, step_separator
from ..state import SpecGuardState, StepRecord
from ..steps import StepSpec


@dataclass(frozen=True)
class Deps:
    """Everything heavy a node needs, bound once when the graph is built."""

    draft: StepModel
    target: StepModel
    embedder: SentenceEmbedder | None
    spec: StepSpec
    config: SpecGuardConfig
    sessions: SessionStore
    shared_vocab: bool


def emit(event: str, **data: Any) -> None:
    """Send a custom stream event (a no-op when the caller is not streaming 'custom')."""
    get_stream_writer()({"event": event, **data})


def step_index(state: SpecGuardState) -> int:
    return len(state.get("steps") or [])


def remaining_tokens(state: SpecGuardState, config: SpecGuardConfig) -> int:
    used = sum(int(s.get("tokens", 0)) for s in state.get("steps") or [])
    return config.max_total_tokens - used


def finish_step(
    deps: Deps,
    state: SpecGuardState,
    session: RunSession,
    *,
    text: str,
    source: str,
    accepted: bool,
    ended: str,
    tokens: int,
    decision: dict[str, Any],
) -> dict[str, Any]:
    """Record a step (with the selected draft candidate's signals) and append it; when it
    ends the run, also the text, answer and status."""
    sel = state["selected"]
    record: StepRecord = {
        "index": step_index(state),
        "text": text,
        "source": source,  # type: ignore[typeddict-item]
        "grounding": state.get("grounding"),
        "logprob": state.get("logprob"),
        "score": decision.get("score"),
        "accepted": accepted,
        "candidates": [c["text"] for c in state["candidates"]],
        "selected": sel,
        "reason": decision.get("reason"),
        "ended": ended,  # type: ignore[typeddict-item]
        "cut": ended == "length",
        "tokens": tokens,
    }
    if source != "draft":  # the draft candidate the step replaced
        record["draft_text"] = state["candidates"][sel]["text"]
    record["fed"] = session.fed_since_step_start()
    record["time_s"] = time.perf_counter() - session.step_started
    steps = [*(state.get("steps") or []), record]
    session.n_steps = len(steps)
    session.sample = None
    update: dict[str, Any] = {
        "steps": [record],
        "counts": {"steps": 1, "target_steps": int(record["source"] == "target")},
    }
    status = None
    if deps.spec.is_final(record["text"], eos=record.get("ended") == "eos"):
        status = "final"
    elif len(steps) >= deps.config.max_steps:
        status = "max_steps"
    elif remaining_tokens({"steps": steps}, deps.config) < 2:  # type: ignore[typeddict-item]
        status = "max_total_tokens"
    emit("step", **record)
    if status is not None:
        text = "".join(s["text"] + step_separator(deps.spec, s.get("ended", "")) for s in steps)
        update.update(
            status=status,
            text=text,
            answer=deps.spec.extract_answer(text),
            timing={"total_s": time.time() - state.get("started_at", time.time())},
        )
        deps.sessions.drop(session.run_id)
        emit("done", status=status, answer=update["answer"], steps=len(steps))
    return update
