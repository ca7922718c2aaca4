"""ABGV: attention rollout restricted to the step's rows.

Only the step tokens' rows are needed: prefix rows attend only to the prefix, so
mass that reaches the prefix stays there, and rollout reduces to a recursion over
the S x S block of the step (see DESIGN.md, "Signal math").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from ..state import SpecGuardState
from .common import Deps, emit, step_index
from .signals import captured_sample, scored_signals


def grounding_score(
    attentions: Sequence[torch.Tensor], prefix_len: int, *, sparsify: float = 0.01
) -> tuple[float, list[float]]:
    """Return (ABGV, per-token grounded mass) for one step.

    `attentions` holds one tensor per used layer, oldest first, each heads x S x N with
    N = prefix_len + S: the attention rows of the step tokens over every key.
    """
    if len(attentions) == 0:
        raise ValueError("grounding_score needs at least one layer of attention")
    if prefix_len < 0:
        raise ValueError("prefix_len must be >= 0")
    mass: torch.Tensor | None = None
    for layer, att in enumerate(attentions):
        a = torch.as_tensor(att, dtype=torch.float64)
        if a.ndim != 3:
            raise ValueError(f"layer {layer}: expected heads x S x N, got shape {tuple(a.shape)}")
        _, steps, keys = a.shape
        if steps == 0:
            raise ValueError("grounding_score needs at least one step token")
        if keys != prefix_len + steps:
            raise ValueError(f"layer {layer}: N={keys} but prefix_len + S = {prefix_len} + {steps}")
        if not torch.isfinite(a).all():
            raise ValueError(f"layer {layer}: attention contains NaN or inf")
        if mass is not None and steps != mass.numel():
            raise ValueError("all layers must have the same number of step tokens")
        if sparsify > 0:
            a = torch.where(a < sparsify, torch.zeros_like(a), a)
        rows = 0.5 * a.mean(dim=0)
        idx = torch.arange(steps)
        rows[idx, prefix_len + idx] += 0.5
        rows = rows / rows.sum(dim=-1, keepdim=True)
        prev = torch.zeros(steps, dtype=torch.float64) if mass is None else mass
        mass = rows[:, :prefix_len].sum(dim=-1) + rows[:, prefix_len:] @ prev
    assert mass is not None
    return float(mass.min()), mass.tolist()


class GroundingNode:
    """score_grounding: ABGV of the selected candidate."""

    def __init__(self, deps: Deps):
        self.deps = deps

    def __call__(self, state: SpecGuardState) -> dict[str, Any]:
        t0 = time.perf_counter()
        deps = self.deps
        session = deps.sessions.get(state)
        sel = state["selected"]
        sample = captured_sample(deps, state, session)
        update: dict[str, Any] = {"grounding": None}
        try:
            if sample is not None:
                prefix = sample.prefix_len
                atts = sample.attentions(sel) if sample.candidates[sel].n_scored else []
            else:
                _, atts, prefix = scored_signals(deps, state, session)
            if not atts:
                update["grounding_error"] = "empty step"
            else:
                g, per_token = grounding_score(atts, prefix, sparsify=deps.config.sparsify)
                update.update(grounding=g, grounding_tokens=per_token, grounding_error=None)
        except (ValueError, NotImplementedError) as exc:
            update["grounding_error"] = f"grounding unavailable: {exc}"
        elapsed = time.perf_counter() - t0
        emit("grounding", step=step_index(state), grounding=update["grounding"])
        update["timing"] = {"verify_s": elapsed}
        return update
