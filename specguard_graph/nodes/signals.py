"""Where a step's signals come from when they were not captured while sampling:
`signal_model="target"`, or a resumed run whose draft sample died with its process.
Either way one forward of the scoring model over the selected step gives both signals,
and the session memoises it so the two parallel scorers share that one forward."""

from __future__ import annotations

from ..config import SpecGuardConfig
from ..models import Sample
from ..runtime import RunSession, Signals
from ..state import SpecGuardState
from .common import Deps, step_index


def captured_sample(
    cfg: SpecGuardConfig, state: SpecGuardState, session: RunSession
) -> Sample | None:
    """The draft's sample for this step if it is still in memory and signals come from it."""
    if cfg.signal_model != "draft":
        return None
    if session.sample is None or session.sample_step != step_index(state):
        return None
    return session.sample


def scored_signals(
    deps: Deps, cfg: SpecGuardConfig, state: SpecGuardState, session: RunSession
) -> Signals:
    """One forward of the signal model over the selected step (memoised per step)."""
    index, sel = step_index(state), state["selected"]
    use_target = cfg.signal_model == "target"
    model = deps.target if use_target else deps.draft
    pc = session.target if use_target else session.draft
    cand = state["candidates"][sel]

    def compute() -> Signals:
        sample = session.sample if session.sample_step == index else None
        whole = cand.get("dropped") is None  # else ProgramSteps.trim kept a part: its text
        if sample is not None and whole and (deps.shared_vocab or not use_target):
            c = sample.candidates[sel]
            ids = c.token_ids[: c.n_scored]
        else:
            ids = model.encode(cand["text"])
        if not ids:
            return [], [], len(pc.ids)
        prefix = len(pc.ids)
        try:
            # attention only where grounding counts: beta = 1 scores on log-probs alone
            layers = model.capture_layers(cfg.grounding_layers) if cfg.beta < 1.0 else frozenset()
            lps, atts = model.score(pc, ids, layers)
        except NotImplementedError:  # a callable backend cannot re-score a lost sample
            return [], [], prefix
        return lps, atts, prefix

    return session.signals((model.name + str(id(model)), index, sel), compute)


def missing(signal: str, state: SpecGuardState, deps: Deps) -> str:
    """Why a signal has no values: the step has no scored token, or nothing produced it."""
    cand = state["candidates"][state["selected"]]
    if not cand["text"].strip() or cand["tokens"] <= 1:  # the token that ends it is not scored
        return "empty step"
    return f"no {signal} for this step from the signal model ({deps.draft.name} or re-scoring)"
