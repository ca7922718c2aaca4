"""Attention capture that costs no extra forward pass.

We register one attention implementation with transformers' `AttentionInterface`. Every
layer computes its output with the fused SDPA kernel; layers whose weights are wanted also
compute softmax(QKᵀ) (the only form that exposes the weights) and copy their rows into the
active `AttentionCapture`. So memory for captured attention grows with the number of captured
layers only, and the model computes exactly the same with capture on or off.

SDPA on the CPU rounds a query row differently depending on the call's shape: a block of one
or two query rows takes a small-matrix path, and the last key block's length changes the
reduction (up to 0.3 in a log-prob after a few layers). A token decoded alone would not
score what it scores inside a prefill or a verification forward. `_sdpa` pads both so that
every row meets the same kernel shapes; the padding costs attention work only, which is small
beside the weights, and makes a token's output independent of how its tokens were fed
(`benchmarks/fidelity.py`, `tests/test_numerics.py`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

ATTN_IMPLEMENTATION = "specguard_capture"


@dataclass
class AttentionCapture:
    """Rows captured during one call, per layer index, in call order: (batch, heads, q, kv)."""

    layers: frozenset[int]
    rows: dict[int, list[torch.Tensor]] = field(default_factory=dict)

    def add(self, layer: int, weights: torch.Tensor) -> None:
        self.rows.setdefault(layer, []).append(weights.detach())

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for ts in self.rows.values() for t in ts)


_ACTIVE: contextvars.ContextVar[AttentionCapture | None] = contextvars.ContextVar(
    "specguard_attention_capture", default=None
)


@contextmanager
def capture_attention(layers: frozenset[int]) -> Iterator[AttentionCapture]:
    """Capture the attention rows of `layers` for every forward inside the block.

    A context variable (not a module attribute) holds the target, so concurrent runs in
    other threads never see each other's rows.
    """
    cap = AttentionCapture(layers)
    token = _ACTIVE.set(cap)
    try:
        yield cap
    finally:
        _ACTIVE.reset(token)


def _weights(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
) -> torch.Tensor:
    """softmax(QKᵀ·scale + mask) in float32: the attention weights SDPA does not return."""
    key = repeat_kv(key, getattr(module, "num_key_value_groups", 1))
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)).float() * scale
    q_len, kv_len = scores.shape[-2], scores.shape[-1]
    if attention_mask is None:
        if q_len > 1:  # SDPA's mask may be skipped in favour of is_causal: rebuild it
            causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=scores.device).tril(
                kv_len - q_len
            )
            scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
    elif attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask[..., :kv_len], torch.finfo(scores.dtype).min)
    else:
        scores = scores + attention_mask[..., :kv_len].float()
    return torch.softmax(scores, dim=-1)


KV_BLOCK = 512  # torch's CPU flash attention splits keys in blocks of this many


def _query_rows(q: int) -> int:
    """Rows to run so that no query block of the CPU kernel has 1 or 2 rows (its small-matrix
    path rounds differently). The kernel splits queries in 32s, 64s from 192, 256s from 768."""
    r = max(q, 4)
    while r % (256 if r >= 768 else 64 if r >= 192 else 32) in (1, 2):
        r += 1
    return r


def _sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> torch.Tensor:
    """SDPA whose result for a query row does not depend on how many rows or keys the call has.

    On the CPU, queries are padded (copies of the last row, sliced off after) and keys padded
    to whole blocks (masked out), so every row meets the same kernel shapes whichever way its
    tokens were fed; elsewhere this is plain SDPA."""
    if query.device.type != "cpu":
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)[0]
    q_len, kv_len = query.shape[2], key.shape[2]
    if attention_mask is None:  # bottom-right causal: each row sees the cache and itself
        mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device)
        mask = mask.tril(kv_len - q_len)[None, None]
    else:
        mask = attention_mask[..., :kv_len]
    rows = _query_rows(q_len)
    if rows > q_len:
        query = torch.cat([query, query[:, :, -1:].expand(-1, -1, rows - q_len, -1)], dim=2)
        mask = torch.cat([mask, mask[:, :, -1:].expand(-1, -1, rows - q_len, -1)], dim=2)
    keys = -(-kv_len // KV_BLOCK) * KV_BLOCK
    if keys > kv_len:
        pad = key.new_zeros(*key.shape[:2], keys - kv_len, key.shape[3])
        key, value = torch.cat([key, pad], dim=2), torch.cat([value, pad], dim=2)
        off = torch.zeros if mask.dtype == torch.bool else torch.full
        fill = () if mask.dtype == torch.bool else (torch.finfo(mask.dtype).min,)
        shape = (*mask.shape[:3], keys - kv_len)
        mask = torch.cat([mask, off(shape, *fill, dtype=mask.dtype, device=mask.device)], dim=3)
    out = sdpa_attention_forward(module, query, key, value, mask, **kwargs)[0]
    return out[:, :q_len]  # (batch, q, heads, dim)


def capture_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    out = _sdpa(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                **kwargs)  # fmt: skip
    cap = _ACTIVE.get()
    layer = getattr(module, "layer_idx", None)
    if cap is not None and layer in cap.layers:
        weights = _weights(module, query, key, attention_mask, scaling)
        cap.add(layer, weights)
        return out, weights
    return out, None


AttentionInterface.register(ATTN_IMPLEMENTATION, capture_attention_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, sdpa_mask)
