"""Fit the normalisation ranges and τ to a target-compute budget on a dev split.

Run SpecGuard with τ = 0 (every draft step accepted, so every step's signals are observed
on the draft's own trajectory), set each signal's range to its 5th-95th percentile, and
put τ at the quantile of the combined score that sends `budget` of the steps to the target.
The observed signals are kept beside the config, so a refit for another budget or β (same
draft, so the same steps) costs no model run.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
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


Signals = list[tuple[float | None, float | None]]


def observe(
    draft, target, embedder, problems: list[Problem], base: SpecGuardConfig,
    progress: Callable[[int, int], None] = lambda d, t: None,
) -> Signals:  # fmt: skip
    """(ABGV, LPBV) of every draft step, with τ = 0 so every step is the draft's own."""
    graph = build_graph(draft, target, embedder=embedder, config=base.replace(tau=0.0)).compile()
    signals: Signals = []
    for i, p in enumerate(problems):
        out = graph.invoke({"question": p["question"]})
        signals += [(s["grounding"], s["logprob"]) for s in out["steps"] if s["source"] == "draft"]
        progress(i + 1, len(problems))
    return signals


# what decides which steps the draft writes and how they are scored: a refit from saved
# signals is only valid under the same values (β, τ, ranges and the refusals are free)
OBSERVED_WITH = ("k", "temperature", "top_p", "signal_model", "grounding_layers", "sparsify",
                 "max_steps", "max_step_tokens", "max_total_tokens", "seed")  # fmt: skip


def save_signals(path: Path, signals: Signals, base: SpecGuardConfig, dev: dict[str, Any]
                 ) -> None:  # fmt: skip
    """Keep the observed signals, so another budget or β is a refit, not another model run."""
    observed = {f: getattr(base, f) for f in OBSERVED_WITH}
    path.write_text(json.dumps({"dev": dev, "observed_with": observed, "signals": signals}) + "\n")


def load_signals(path: Path, base: SpecGuardConfig) -> Signals:
    """The signals `save_signals` kept, checked against the base config they are refitted for."""
    from ..errors import InputError

    try:
        data = json.loads(path.read_text())
        signals = [(g, lp) for g, lp in data["signals"]]
        observed = data["observed_with"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"--signals {path}: not a file `specguard calibrate` wrote ({exc})"
        ) from None
    differ = [f for f in OBSERVED_WITH if observed.get(f) != getattr(base, f)]
    if differ:
        raise InputError(f"--signals {path}: observed with other " + ", ".join(
            f"{f}={observed.get(f)!r}" for f in differ) + " than the base config; run calibrate "
            "with models again")  # fmt: skip
    return signals
