"""The signal math as pure functions: the nodes, calibration and the benchmarks share them.

See docs/design.md, "Signal math": ABGV (attention-rollout grounding), LPBV (the step's least
likely token), both normalised on fixed ranges and mixed with β, accepted at τ; the medoid
picks the most consistent of k candidates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .config import SpecGuardConfig


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


def doomed_below(config: SpecGuardConfig) -> Callable[[float], bool] | None:
    """A test on one scored token's log-prob: true when it leaves the step no way to reach τ,
    even with perfect grounding (the step's LPBV is a minimum, so it only falls as tokens
    come). None where no log-prob can doom a step (τ ≤ 1 − β: grounding alone can pass it).
    Asked of `decide_step` itself, so a step it dooms is one `decide` rejects."""
    if decide_step(math.inf, -math.inf, config).accepted:
        return None

    def doomed(logprob: float) -> bool:
        return not math.isnan(logprob) and not decide_step(math.inf, logprob, config).accepted

    return doomed


def decide_signals(
    grounding: float | None, logprob: float | None, config: SpecGuardConfig
) -> Decision:
    """`decide_step` where a signal with zero weight (β = 1: grounding, β = 0: log-prob) is not
    read, so it may be None (a served draft gives no attention)."""
    g = grounding if config.beta < 1.0 else 0.0
    lp = logprob if config.beta > 0.0 else -math.inf
    if g is None or lp is None:
        raise ValueError(f"beta={config.beta} weighs a signal this step does not have")
    return decide_step(g, lp, config)


def grounding_score(
    attentions: Sequence[Any], prefix_len: int, *, sparsify: float = 0.01
) -> tuple[float, list[float]]:
    """Return (ABGV, per-token grounded mass) for one step.

    `attentions` holds one array per used layer (a CPU tensor or anything numpy reads),
    oldest first, each heads x S x N with N = prefix_len + S: the attention rows of the step
    tokens over every key. Prefix rows attend only to the prefix, so mass that reaches the
    prefix stays there and rollout reduces to a recursion over the S x S block of the step.

    The math is numpy's, on one thread, not torch's: LangGraph runs this node beside the
    log-prob node on an executor thread, and a torch op there starts a second OpenMP team,
    after which the decode's worker sleeps between kernels instead of spinning (an accepted
    step then cost 1.3x a bare draft decode; docs/numerics.md, "One OpenMP team").
    """
    if len(attentions) == 0:
        raise ValueError("grounding_score needs at least one layer of attention")
    if prefix_len < 0:
        raise ValueError("prefix_len must be >= 0")
    mass: np.ndarray | None = None
    for layer, att in enumerate(attentions):
        a = np.array(att, dtype=np.float64)  # a copy: sparsify writes in place
        if a.ndim != 3:
            raise ValueError(f"layer {layer}: expected heads x S x N, got shape {tuple(a.shape)}")
        _, steps, keys = a.shape
        if steps == 0:
            raise ValueError("grounding_score needs at least one step token")
        if keys != prefix_len + steps:
            raise ValueError(f"layer {layer}: N={keys} but prefix_len + S = {prefix_len} + {steps}")
        if not np.isfinite(a).all():
            raise ValueError(f"layer {layer}: attention contains NaN or inf")
        if mass is not None and steps != mass.size:
            raise ValueError("all layers must have the same number of step tokens")
        if sparsify > 0:
            a[a < sparsify] = 0.0
        rows = 0.5 * a.mean(axis=0)
        idx = np.arange(steps)
        rows[idx, prefix_len + idx] += 0.5
        rows /= rows.sum(axis=-1, keepdims=True)
        prev = np.zeros(steps) if mass is None else mass
        # einsum's own loop, not BLAS: OpenBLAS would start threads of its own
        mass = rows[:, :prefix_len].sum(axis=-1) + np.einsum("ij,j->i", rows[:, prefix_len:], prev)
    assert mass is not None
    return float(mass.min()), mass.tolist()


def logprob_score(token_logprobs: Sequence[float] | torch.Tensor) -> float:
    """min_t log p(y_t | prefix, y_<t) over the scored tokens of one step: one guessed number
    in a confident-looking step is not rescued by its easy tokens."""
    values = np.asarray(token_logprobs, dtype=np.float64).ravel()  # numpy: see grounding_score
    if values.size == 0:
        raise ValueError("logprob_score needs at least one token log-probability")
    if np.isnan(values).any():
        raise ValueError("token log-probabilities contain NaN")
    lp = float(values.min())
    if lp > 0.0 and not math.isclose(lp, 0.0, abs_tol=1e-6):
        raise ValueError(f"log-probabilities must be <= 0, got {lp}")
    return min(lp, 0.0)


def consistency(embeddings: torch.Tensor) -> torch.Tensor:
    """Each candidate's vote: mean_{m≠j} cos(e_j, e_m) (1 for a single candidate)."""
    if embeddings.ndim != 2 or embeddings.shape[0] == 0:
        raise ValueError("embeddings must be a non-empty 2-D tensor")
    k = embeddings.shape[0]
    if k == 1:
        return torch.ones(1, dtype=torch.float64)
    e = torch.nn.functional.normalize(embeddings.double(), dim=-1)
    sims = e @ e.T
    return (sims.sum(dim=1) - sims.diagonal()) / (k - 1)


def medoid(votes: Sequence[float]) -> int:
    """The candidate with the highest vote; exact ties (identical candidates) go to the lowest
    index, float noise included."""
    best = max(votes)
    return next(i for i, v in enumerate(votes) if v >= best - 1e-12)


def select_medoid(embeddings: torch.Tensor) -> int:
    """argmax_j mean_{m≠j} cos(e_j, e_m); the lowest index wins ties."""
    return medoid(consistency(embeddings).tolist())
