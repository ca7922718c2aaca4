"""select_consistent: keep the medoid of the k candidates in sentence-embedding space."""

from __future__ import annotations

import time
from typing import Any

import torch

from ..state import SpecGuardState
from .common import Deps, emit, step_index


def select_medoid(embeddings: torch.Tensor) -> int:
    """argmax_j mean_{m≠j} cos(e_j, e_m); the lowest index wins ties."""
    if embeddings.ndim != 2 or embeddings.shape[0] == 0:
        raise ValueError("embeddings must be a non-empty 2-D tensor")
    k = embeddings.shape[0]
    if k == 1:
        return 0
    e = torch.nn.functional.normalize(embeddings.double(), dim=-1)
    sims = e @ e.T
    mean_other = (sims.sum(dim=1) - sims.diagonal()) / (k - 1)
    best = mean_other.max()
    # exact ties (identical candidates) must go to the lowest index, float noise included
    return int(torch.nonzero(mean_other >= best - 1e-12)[0, 0])


class SelectNode:
    def __init__(self, deps: Deps):
        self.deps = deps

    def __call__(self, state: SpecGuardState) -> dict[str, Any]:
        t0 = time.perf_counter()
        texts = [c["text"] for c in state["candidates"]]
        if len(texts) == 1:
            selected = 0
        else:
            if self.deps.embedder is None:
                raise RuntimeError("k > 1 needs an embedder")
            selected = select_medoid(self.deps.embedder.embed(texts))
        elapsed = time.perf_counter() - t0
        emit("select", step=step_index(state), selected=selected, text=texts[selected])
        return {"selected": selected, "timing": {"verify_s": elapsed}}
