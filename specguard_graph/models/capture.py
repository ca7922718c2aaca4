"""Attention capture that costs no extra forward pass.

We register one attention implementation with transformers' `AttentionInterface`. Layers
whose weights are wanted run eager attention (softmax(QKᵀ)V, the only form that exposes
the weights) and copy their rows into the active `AttentionCapture`; every other layer
keeps the fused SDPA kernel. So memory for captured attention grows with the number of
captured layers only, and speed is SDPA's except on those few layers.
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
        self.rows.setdefault(layer, []).append(weights.detach().to(torch.float32).clone())

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


def _eager(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    groups = getattr(module, "num_key_value_groups", 1)
    key = repeat_kv(key, groups)
    value = repeat_kv(value, groups)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scale
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
        scores = scores + attention_mask[..., :kv_len]
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


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
    cap = _ACTIVE.get()
    layer = getattr(module, "layer_idx", None)
    if cap is not None and layer in cap.layers:
        out, weights = _eager(module, query, key, value, attention_mask, scaling)
        cap.add(layer, weights)
        return out, weights
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
    )


AttentionInterface.register(ATTN_IMPLEMENTATION, capture_attention_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, sdpa_mask)
