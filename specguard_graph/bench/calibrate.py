"""Fit the normalisation ranges and τ to a target-compute budget on a dev split.

Run SpecGuard with τ = 0 (every draft step accepted, so every step's signals are observed
on the draft's own trajectory), set each signal's range to its 5th-95th percentile, and
put τ at the quantile of the combined score that sends `budget` of the steps to the target.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from ..config import SpecGuardConfig
from ..graph import build_graph
from ..scoring import decide_signals
from .data import Problem


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[
        max(0, min(998, round(q * 1000) - 1))
    ]


def _range(values: list[float], fallback: tuple[float, float], *, log: bool = False
           ) -> tuple[float, float]:  # fmt: skip
    """5th-95th percentile, widened when flat; `fallback` when the signal was not observed."""
    if not values:
        return fallback
    lo, hi = quantile(values, 0.05), quantile(values, 0.95)
    if log:
        hi = min(hi, 0.0)
    if hi - lo < 1e-6:
        lo, hi = (hi - 0.1, hi) if log else (max(0.0, lo - 0.01), min(1.0, hi + 0.01))
    return lo, hi


def fit(
    signals: list[tuple[float | None, float | None]], base: SpecGuardConfig, budget: float
) -> tuple[SpecGuardConfig, dict[str, Any]]:
    """New ranges and τ from observed (ABGV, LPBV) pairs.

    A signal with zero weight (β = 1: no grounding, as from a served engine; β = 0: no
    log-prob) may be missing (None); its range is left as it was.
    """
    need_g, need_lp = base.beta < 1.0, base.beta > 0.0
    used = [(g, lp) for g, lp in signals
            if (g is not None or not need_g) and (lp is not None or not need_lp)]  # fmt: skip
    if len(used) < 5:
        raise ValueError(f"calibration needs at least 5 scored steps, got {len(used)}")
    g_range = _range([g for g, _ in used if g is not None], base.grounding_range)
    l_range = _range([lp for _, lp in used if lp is not None], base.logprob_range, log=True)
    cfg = base.replace(grounding_range=g_range, logprob_range=l_range)
    scores = sorted(decide_signals(g, lp, cfg).score for g, lp in used)
    tau = min(1.0, quantile(scores, budget)) if budget > 0 else 0.0
    cfg = cfg.replace(tau=tau)
    rejected = sum(s < tau for s in scores) / len(scores)
    return cfg, {"steps": len(used), "tau": tau, "grounding_range": g_range,
                 "logprob_range": l_range, "dev_target_share": rejected}  # fmt: skip


def calibrate(
    draft, target, embedder, problems: list[Problem], base: SpecGuardConfig, budget: float,
    progress: Callable[[int, int], None] = lambda d, t: None,
) -> tuple[SpecGuardConfig, dict[str, Any]]:  # fmt: skip
    graph = build_graph(draft, target, embedder=embedder, config=base.replace(tau=0.0)).compile()
    signals: list[tuple[float | None, float | None]] = []
    for i, p in enumerate(problems):
        out = graph.invoke({"question": p["question"]})
        signals += [(s["grounding"], s["logprob"]) for s in out["steps"] if s["source"] == "draft"]
        progress(i + 1, len(problems))
    return fit(signals, base, budget)
