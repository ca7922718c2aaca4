"""Feed the same tokens to a model in different ways: the check behind "faithful numerics".

A model computes one function only if a token's scores do not depend on how it was fed:
alone after a cache (decode), inside a chunk (a catch-up prefill, a verification forward),
or as one row of a batch (k-sampling). `benchmarks/fidelity.py` measures this on the real
pair, and a test asserts it on the tiny models for every CPU weight format but dynamic int8.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache

from .kv_cache import new_cache

FEEDINGS = ("one forward", "token by token", "chunks of 16", "row of 4")


def batch_of_4(row: list[int], others: list[list[int]]) -> list[list[int]]:
    """`row` first, then three other texts cut or cycled to its length (no padding needed)."""
    n = len(row)
    return [row] + [(o * (n // len(o) + 1))[:n] for o in others[:3]]


@torch.inference_mode()
def feed(
    model: Any, rows: list[list[int]], feeding: str, start: int = 0
) -> tuple[torch.Tensor, DynamicCache]:
    """Float32 log-probs (rows x T x V) after every position of `rows` fed in `feeding`
    ("row of 4" means the caller batched the rows), and the cache they leave. The first
    `start` positions (a prompt) are fed as one forward whatever `feeding` says."""
    if feeding not in FEEDINGS:
        raise ValueError(f"feeding must be one of {', '.join(FEEDINGS)}")
    x = torch.tensor(rows, device=next(model.parameters()).device)
    step = {"token by token": 1, "chunks of 16": 16}.get(feeding, x.shape[1])
    cache = new_cache(model.config)
    cuts = sorted({0, *range(start, x.shape[1], step)})  # 0..start is one forward
    outs = []
    for lo, hi in zip(cuts, [*cuts[1:], x.shape[1]], strict=True):
        out = model(input_ids=x[:, lo:hi], cache=cache, use_cache=True)
        outs.append(torch.log_softmax(out.logits.float(), dim=-1))
    return torch.cat(outs, dim=1), cache


@torch.inference_mode()
def greedy(model: Any, rows: list[list[int]], feeding: str, new_tokens: int) -> list[int]:
    """Row 0's greedy continuation after its prompt is fed in `feeding`, decoding all rows."""
    lp, cache = feed(model, rows, feeding)
    nxt = lp[:, -1].argmax(-1, keepdim=True)
    out = [int(nxt[0, 0])]
    for _ in range(new_tokens - 1):
        logits = model(input_ids=nxt, cache=cache, use_cache=True).logits[:, -1]
        nxt = logits.float().argmax(-1, keepdim=True)
        out.append(int(nxt[0, 0]))
    return out
