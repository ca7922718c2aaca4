"""score_logprob: LPBV of the selected candidate (`scoring.logprob_score`)."""

from __future__ import annotations

import math

from langgraph.runtime import Runtime

from ..context import RunContext
from ..scoring import logprob_score
from ..state import SpecGuardState
from .common import Deps, Update, emit, step_index, timed
from .signals import captured_sample, missing, scored_signals


@timed("verify_s")
def score_logprob(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    cfg = deps.run_config(runtime)
    session = deps.sessions.get(state)
    if captured_sample(cfg, state, session) is not None:
        lps = state["candidates"][state["selected"]]["token_logprobs"]
    else:
        lps, _, _ = scored_signals(deps, cfg, state, session)
    update: Update = {"logprob": None, "logprob_error": None}
    try:
        lp = logprob_score(lps)
        if math.isfinite(lp):
            update["logprob"] = lp
        else:
            update["logprob_error"] = "log-probability is not finite"
    except ValueError as exc:
        update["logprob_error"] = missing("log-probs", state, deps) if not len(lps) else str(exc)
    emit("logprob", step=step_index(state), logprob=update["logprob"])
    return update
