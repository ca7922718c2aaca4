"""Normalise both signals to [0, 1] on fixed ranges and compare the mix with τ."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from langgraph.types import interrupt

from ..config import SpecGuardConfig
from ..errors import InputError
from ..runtime import step_separator
from ..state import SpecGuardState, add_numbers
from .common import Deps, emit, finish_step, step_index


def normalise(value: float, lo: float, hi: float) -> float:
    """Map [lo, hi] linearly onto [0, 1] and clip; -inf maps to 0, +inf to 1."""
    if hi <= lo:
        raise ValueError(f"normalisation range must have lo < hi, got {lo, hi}")
    if math.isnan(value):
        raise ValueError("cannot normalise NaN")
    return min(1.0, max(0.0, (value - lo) / (hi - lo)))


@dataclass(frozen=True)
class Decision:
    grounding_norm: float
    logprob_norm: float
    score: float
    accepted: bool


def decide_step(grounding: float, logprob: float, config: SpecGuardConfig) -> Decision:
    """score = β·lp_norm + (1 − β)·g_norm; accept when score ≥ τ."""
    g = normalise(grounding, *config.grounding_range)
    lp = normalise(logprob, *config.logprob_range)
    score = config.beta * lp + (1.0 - config.beta) * g
    return Decision(g, lp, score, score >= config.tau)


class DecideNode:
    """decide: accept the selected draft step (and commit it) or hand over to the target."""

    def __init__(self, deps: Deps):
        self.deps = deps

    def __call__(self, state: SpecGuardState) -> dict[str, Any]:
        t0 = time.perf_counter()
        deps = self.deps
        index, sel = step_index(state), state["selected"]
        g, lp = state.get("grounding"), state.get("logprob")
        # a signal with zero weight (beta = 0 or 1) is not needed, so its absence is no error
        need_g, need_lp = deps.config.beta < 1.0, deps.config.beta > 0.0
        errors = [
            e
            for needed, e in ((need_g, state.get("grounding_error")),
                              (need_lp, state.get("logprob_error")))
            if needed and e
        ]  # fmt: skip
        if errors or (need_g and g is None) or (need_lp and lp is None):
            decision: dict[str, Any] = {
                "step": index,
                "accepted": False,
                "score": None,
                "grounding_norm": None,
                "logprob_norm": None,
                "reason": "; ".join(errors) or "missing signal",
            }
        else:
            d = decide_step(g if need_g else 0.0, lp if need_lp else -math.inf, deps.config)
            decision = {
                "step": index,
                "accepted": d.accepted,
                "score": d.score,
                "grounding_norm": d.grounding_norm,
                "logprob_norm": d.logprob_norm,
                "reason": None if d.accepted else f"score {d.score:.3f} < tau {deps.config.tau}",
            }
        cfg = deps.config
        if (
            cfg.adaptive_band is not None
            and cfg.k > 1
            and len(state["candidates"]) == 1
            and decision["score"] is not None
            and abs(decision["score"] - cfg.tau) < cfg.adaptive_band
        ):
            decision.update(accepted=False, widen=True, reason="uncertain: drawing the vote")
            emit("decision", **decision)
            return {"decision": decision, "timing": {"verify_s": time.perf_counter() - t0}}
        emit("decision", **decision)
        update: dict[str, Any] = {"decision": decision}
        edited = None
        if not decision["accepted"] and deps.config.interrupt_on_reject:
            edited = self._ask(state, sel, decision)
        if edited is not None:
            update |= self._commit_text(state, edited, decision)
        elif decision["accepted"]:
            update |= self._commit(state, sel, decision)
        update["timing"] = add_numbers(update.get("timing"), {"verify_s": time.perf_counter() - t0})
        return update

    def _ask(self, state: SpecGuardState, sel: int, decision: dict[str, Any]) -> str | None:
        """Pause the run on a rejected step. The caller resumes with "accept", "recompute",
        or the step text to use instead (a string, or {"edit": text}); returns that text."""
        cand = state["candidates"][sel]
        reply = interrupt(
            {
                "step": decision["step"],
                "candidate": cand["text"],
                "grounding": state.get("grounding"),
                "logprob": state.get("logprob"),
                "score": decision["score"],
                "reason": decision["reason"],
                "resume_with": ["accept", "recompute", {"edit": "<step text>"}],
            }
        )
        if reply == "accept":
            decision.update(accepted=True, reason="accepted by the caller")
            return None
        if reply == "recompute":
            return None
        text = reply.get("edit") if isinstance(reply, dict) else reply
        if not isinstance(text, str):
            raise InputError(
                'resume with "accept", "recompute" or {"edit": "<step text>"}, got ' + repr(reply)
            )
        decision.update(accepted=True, reason="edited by the caller")
        return text

    def _commit_text(
        self, state: SpecGuardState, text: str, decision: dict[str, Any]
    ) -> dict[str, Any]:
        """Commit a step neither model wrote (a caller's edit): both models are fed it."""
        deps = self.deps
        session = deps.sessions.get(state)
        piece = text + deps.spec.delimiter
        deps.draft.append_text(session.draft, piece)
        deps.target.append_text(session.target, piece)
        return finish_step(
            deps, state, session, text=text, source="human", accepted=True,
            ended="delimiter", tokens=len(deps.draft.encode(piece)), decision=decision,
        )  # fmt: skip

    def _commit(self, state: SpecGuardState, sel: int, decision: dict[str, Any]) -> dict[str, Any]:
        deps = self.deps
        session = deps.sessions.get(state)
        cand = state["candidates"][sel]
        sample = session.sample if session.sample_step == step_index(state) else None
        sep = step_separator(deps.spec, cand["ended"])
        if sample is not None:
            if deps.shared_vocab:  # the draft's exact tokens: no re-tokenisation drift
                session.target.extend(sample.candidates[sel].token_ids)
            else:
                deps.target.append_text(session.target, cand["text"] + sep)
            deps.draft.adopt(session.draft, sample, sel)
        else:
            deps.draft.append_text(session.draft, cand["text"] + sep)
            deps.target.append_text(session.target, cand["text"] + sep)
        return finish_step(
            deps, state, session, text=cand["text"], source="draft", accepted=True,
            ended=cand["ended"], tokens=cand["tokens"], decision=decision,
        )  # fmt: skip
