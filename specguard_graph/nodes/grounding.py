"""score_grounding: ABGV of the selected candidate (`scoring.grounding_score`)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from ..context import RunContext
from ..models import Sample
from ..scoring import grounding_score
from ..state import SpecGuardState
from .common import Deps, Update, emit, step_index, timed
from .signals import captured_sample, missing, scored_signals


def kept(atts: list[Any], prefix: int, cand: dict[str, Any]) -> list[Any]:
    """The attention rows of a candidate's kept tokens. A step cut at its program's closing
    fence (`ProgramSteps.trim`) is judged on what it keeps; the rows of the output it went on
    to make up were captured while sampling, but no model ever reads that output."""
    if cand.get("dropped") is None:
        return atts
    n = cand["tokens"]
    return [a[:, :n, : prefix + n] for a in atts]


def _grounding(sample: Sample, row: int, cand: dict[str, Any], sparsify: float) -> float | None:
    try:
        if not sample.candidates[row].n_scored:
            return None
        atts = kept(sample.attentions(row), sample.prefix_len, cand)
        return grounding_score(atts, sample.prefix_len, sparsify=sparsify)[0]
    except ValueError:
        return None


@timed("verify_s")
def score_grounding(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    cfg = deps.run_config(runtime)
    if cfg.beta >= 1.0:  # grounding has no weight: nothing was captured, nothing is scored
        emit("grounding", step=step_index(state), grounding=None)
        return {"grounding": None, "grounding_error": None}
    session = deps.sessions.get(state)
    sel = state["selected"]
    sample = captured_sample(cfg, state, session)
    update: Update = {"grounding": None}
    try:
        if sample is not None:
            prefix = sample.prefix_len
            atts = sample.attentions(sel) if sample.candidates[sel].n_scored else []
            atts = kept(atts, prefix, state["candidates"][sel])
        else:
            _, atts, prefix = scored_signals(deps, cfg, state, session)
        if not atts:
            update["grounding_error"] = missing("attentions", state, deps)
        else:
            g, per_token = grounding_score(atts, prefix, sparsify=cfg.sparsify)
            update.update(grounding=g, grounding_tokens=per_token, grounding_error=None)
    except (ValueError, NotImplementedError) as exc:
        update["grounding_error"] = f"grounding unavailable: {exc}"
    if sample is not None and len(sample.candidates) > 1:  # evidence: every candidate's ABGV
        update["candidate_grounding"] = [
            update["grounding"] if i == sel else _grounding(sample, i, cand, cfg.sparsify)
            for i, cand in enumerate(state["candidates"])
        ]
    emit("grounding", step=step_index(state), grounding=update["grounding"])
    return update
