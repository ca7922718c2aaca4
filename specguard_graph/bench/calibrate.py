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
from ..scoring import decide_step
from .data import Problem


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[
        max(0, min(998, round(q * 1000) - 1))
    ]


def fit(
    signals: list[tuple[float, float]], base: SpecGuardConfig, budget: float
) -> tuple[SpecGuardConfig, dict[str, Any]]:
    """New ranges and τ from observed (ABGV, LPBV) pairs."""
    if len(signals) < 5:
        raise ValueError(f"calibration needs at least 5 scored steps, got {len(signals)}")
    gs = [g for g, _ in signals]
    lps = [lp for _, lp in signals]
    g_lo, g_hi = quantile(gs, 0.05), quantile(gs, 0.95)
    l_lo, l_hi = quantile(lps, 0.05), min(quantile(lps, 0.95), 0.0)
    if g_hi - g_lo < 1e-6:
        g_lo, g_hi = max(0.0, g_lo - 0.01), min(1.0, g_hi + 0.01)
    if l_hi - l_lo < 1e-6:
        l_lo = l_hi - 0.1
    cfg = base.replace(grounding_range=(g_lo, g_hi), logprob_range=(l_lo, l_hi))
    scores = sorted(decide_step(g, lp, cfg).score for g, lp in signals)
    tau = min(1.0, quantile(scores, budget)) if budget > 0 else 0.0
    cfg = cfg.replace(tau=tau)
    rejected = sum(s < tau for s in scores) / len(scores)
    return cfg, {"steps": len(signals), "tau": tau, "grounding_range": (g_lo, g_hi),
                 "logprob_range": (l_lo, l_hi), "dev_target_share": rejected}  # fmt: skip


def calibrate(
    draft, target, embedder, problems: list[Problem], base: SpecGuardConfig, budget: float,
    progress: Callable[[int, int], None] = lambda d, t: None,
) -> tuple[SpecGuardConfig, dict[str, Any]]:  # fmt: skip
    graph = build_graph(draft, target, embedder=embedder, config=base.replace(tau=0.0)).compile()
    signals: list[tuple[float, float]] = []
    for i, p in enumerate(problems):
        out = graph.invoke({"question": p["question"]})
        for s in out["steps"]:
            if s["grounding"] is not None and s["logprob"] is not None:
                signals.append((s["grounding"], s["logprob"]))
        progress(i + 1, len(problems))
    return fit(signals, base, budget)
