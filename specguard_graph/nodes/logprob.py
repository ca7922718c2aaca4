"""LPBV: the least likely token of the step, so one confident-looking step with a single
guessed number is not rescued by its easy tokens."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from ..state import SpecGuardState
from .common import Deps, emit, step_index
from .signals import captured_sample, scored_signals


def logprob_score(token_logprobs: Sequence[float] | torch.Tensor) -> float:
    """min_t log p(y_t | prefix, y_<t) over the scored tokens of one step."""
    values = torch.as_tensor(token_logprobs, dtype=torch.float64).flatten()
    if values.numel() == 0:
        raise ValueError("logprob_score needs at least one token log-probability")
    if torch.isnan(values).any():
        raise ValueError("token log-probabilities contain NaN")
    lp = float(values.min())
    if lp > 0.0 and not math.isclose(lp, 0.0, abs_tol=1e-6):
        raise ValueError(f"log-probabilities must be <= 0, got {lp}")
    return min(lp, 0.0)


class LogprobNode:
    """score_logprob: LPBV of the selected candidate."""

    def __init__(self, deps: Deps):
        self.deps = deps

    def __call__(self, state: SpecGuardState) -> dict[str, Any]:
        t0 = time.perf_counter()
        deps = self.deps
        session = deps.sessions.get(state)
        if captured_sample(deps, state, session) is not None:
            lps = state["candidates"][state["selected"]]["token_logprobs"]
        else:
            lps, _, _ = scored_signals(deps, state, session)
        update: dict[str, Any] = {"logprob": None, "logprob_error": None}
        try:
            lp = logprob_score(lps)
            if math.isfinite(lp):
                update["logprob"] = lp
            else:
                update["logprob_error"] = "log-probability is not finite"
        except ValueError as exc:
            update["logprob_error"] = "empty step" if not len(lps) else str(exc)
        elapsed = time.perf_counter() - t0
        emit("logprob", step=step_index(state), logprob=update["logprob"])
        update["timing"] = {"verify_s": elapsed}
        return update
