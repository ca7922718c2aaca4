"""commit_step: append the accepted draft step to both models' contexts and to the trace.

`finish_step` is the bookkeeping every way of ending a step shares (a draft step accepted, a
target recompute, a person's edit): the trace record, the counters, and the run's end.
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from ..context import RunContext
from ..runtime import RunSession
from ..state import SpecGuardState, StepRecord
from ..steps import history, separator
from .common import Deps, Update, emit, remaining_tokens, step_index, timed
from .messages import whole_step


def finish_step(
    deps: Deps,
    runtime: Runtime[RunContext] | None,
    state: SpecGuardState,
    session: RunSession,
    *,
    text: str,
    source: str,
    ended: str,
    tokens: int,
    dropped: str | None = None,
    verified: dict[str, int] | None = None,
) -> Update:
    """Record a step (with the selected draft candidate's signals) and append it; when it
    ends the run, also the text, answer and status."""
    decision = state.get("decision") or {}
    sel = state["selected"]
    record: StepRecord = {
        "index": step_index(state),
        "text": text,
        "source": source,  # type: ignore[typeddict-item]
        "grounding": state.get("grounding"),
        "logprob": state.get("logprob"),
        "score": decision.get("score"),
        "accepted": source != "target",
        "candidates": [c["text"] for c in state["candidates"]],
        "selected": sel,
        "reason": decision.get("reason"),
        "ended": ended,  # type: ignore[typeddict-item]
        "cut": ended == "length",
        "tokens": tokens,
    }
    if source != "draft":  # the draft candidate the step replaced
        record["draft_text"] = state["candidates"][sel]["text"]
    if dropped is not None:  # ProgramSteps.trim: never shown to either model
        record["dropped"] = dropped
    if source == "target":  # how the target wrote it: verified the candidate, or rewrote it
        record.update({"fallback": "verify", "verified": verified} if verified else
                      {"fallback": "rewrite"})  # fmt: skip
    if "checked" in decision:  # the spec's check of the draft candidate (tool-call schemas)
        record["checked"] = decision["checked"]
    record["fed"] = session.fed_since_step_start()
    record["time_s"] = time.perf_counter() - session.step_started
    record["spent"] = session.step_spent(record["time_s"])
    record["tau"] = deps.run_config(runtime).tau
    record["candidate_signals"] = candidate_signals(state)
    chosen = state["candidates"][sel]
    record["detail"] = {"pieces": chosen.get("pieces"), "logprobs": chosen.get("token_logprobs"),
                        "grounding": state.get("grounding_tokens")}  # fmt: skip
    steps = [*(state.get("steps") or []), record]
    session.n_steps = len(steps)
    session.sample = None
    update: Update = {
        "steps": [record],
        "counts": {"steps": 1, "target_steps": int(source == "target")},
    }
    emit("step", **record)
    return end_if_done(deps, runtime, state, session, steps, update)


def end_if_done(deps: Deps, runtime: Runtime[RunContext] | None, state: SpecGuardState,
                session: RunSession, steps: list[Any], update: Update) -> Update:  # fmt: skip
    """When the last step ends the run: the status, the full text and the answer."""
    status = _status(deps, runtime, steps)
    if status is not None:
        full = history(deps.spec.delimiter, steps)
        answer = deps.spec.extract_answer(full)
        total = time.time() - state.get("started_at", time.time())
        update.update(status=status, text=full, answer=answer, timing={"total_s": total})
        deps.sessions.drop(session.run_id)
        emit("done", status=status, answer=answer, steps=len(steps))
    return update


def candidate_signals(state: SpecGuardState) -> list[dict[str, Any]]:
    """Every candidate with its own signals and vote, for the evidence study (the decision
    used only the selected one's)."""
    votes = state.get("votes") or [None] * len(state["candidates"])
    ground = state.get("candidate_grounding") or [None] * len(state["candidates"])
    ground = [state.get("grounding") if i == state["selected"] else g for i, g in enumerate(ground)]
    out = []
    for c, vote, g in zip(state["candidates"], votes, ground, strict=True):
        lps = c.get("token_logprobs") or []
        out.append({
            "text": c["text"], "tokens": c["tokens"], "ended": c["ended"], "vote": vote,
            "grounding": g, "logprob": min(lps) if lps else None,
            "logprob_mean": sum(lps) / len(lps) if lps else None,
        })  # fmt: skip
    return out


def _status(deps: Deps, runtime: Runtime[RunContext] | None, steps: list[Any]) -> str | None:
    cfg = deps.run_config(runtime)
    if deps.spec.is_final(steps[-1]["text"], eos=steps[-1].get("ended") == "eos"):
        return "final"
    if len(steps) >= cfg.max_steps:
        return "max_steps"
    if remaining_tokens({"steps": steps}, cfg) < 2:  # type: ignore[typeddict-item]
        return "max_total_tokens"
    return None


@timed("verify_s")
def commit_step(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    """The selected draft candidate becomes the step: its own KV rows are adopted by the draft,
    and the target gets its exact tokens (or its text, across vocabularies; or both models its
    text, when `ProgramSteps.trim` cut it short of what was sampled)."""
    session = deps.sessions.get(state)
    sel = state["selected"]
    cand = state["candidates"][sel]
    sample = session.sample if session.sample_step == step_index(state) else None
    sep = separator(deps.spec.delimiter, cand["ended"])
    if sample is not None and cand.get("dropped") is None:
        if deps.shared_vocab:  # the draft's exact tokens: no re-tokenisation drift
            session.target.extend(sample.candidates[sel].token_ids)
        else:
            deps.target.append_text(session.target, cand["text"] + sep)
        deps.draft.adopt(session.draft, sample, sel)
    else:
        deps.draft.append_text(session.draft, cand["text"] + sep)
        deps.target.append_text(session.target, cand["text"] + sep)
    whole_step(step_index(state), "draft", cand["text"])  # LangGraph's `messages` stream
    return finish_step(deps, runtime, state, session, text=cand["text"], source="draft",
                       ended=cand["ended"], tokens=cand["tokens"],
                       dropped=cand.get("dropped"))  # fmt: skip


def commit_text(
    deps: Deps, runtime: Runtime[RunContext] | None, state: SpecGuardState, text: str
) -> Update:
    """Commit a step neither model wrote (a person's edit): both models are fed it."""
    session = deps.sessions.get(state)
    piece = text + deps.spec.delimiter
    deps.draft.append_text(session.draft, piece)
    deps.target.append_text(session.target, piece)
    return finish_step(deps, runtime, state, session, text=text, source="human",
                       ended="delimiter", tokens=len(deps.draft.encode(piece)))  # fmt: skip
