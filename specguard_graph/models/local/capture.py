"""Attention that computes one model whatever the feeding, and captures its weights for free.

We register one attention implementation with transformers' `AttentionInterface`. torch's
float32 SDPA kernel rounds a query row differently depending on the call's shape (a block of
one or two query rows takes a small-matrix path; the key count changes the reduction's tail),
so a token decoded alone would not score what it scores inside a prefill or a verification
forward (up to 0.8 in a log-prob on the 1.5B target). On the CPU every layer therefore runs
the project's fixed-order kernel (`kernels/attention.cpp`, compiled with the int8 kernel): in
float32, each row's sums over its own keys in one order, so a row is the same bits in every
feeding, batch and thread count. Where that kernel cannot run (not x86-64 AVX2, or not float32)
attention runs in float64 and is rounded to float32, where the shape-dependent rounding stays
far below float32's last bit (`benchmarks/fidelity.py`, `tests/test_numerics.py`).

Layers whose weights are wanted copy softmax(QKᵀ) into the active `AttentionCapture`: on the
CPU these are the weights the output was computed with; elsewhere SDPA computes the output and
the weights are computed beside it. Memory for captured attention grows with the number of
captured layers only.
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

from . import int8_kernel

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


_COPY: contextvars.ContextVar[int] = contextvars.ContextVar("specguard_attention_copy", default=-1)


@contextmanager
def attention_copy(copy: int) -> Iterator[None]:
    """Run the fixed-order kernel's `copy` inside the block (0 plain, 1 AVX2, 2 AVX-512; -1 the
    best: `kernels/attention.cpp`). The copies give the same bits, so only a benchmark timing
    them, or a test comparing them, has a reason to choose."""
    if copy not in (-1, 0, 1, 2):
        raise ValueError(f"copy must be -1, 0, 1 or 2, got {copy!r}")
    token = _COPY.set(copy)
    try:
        yield
    finally:
        _COPY.reset(token)


def _weights(  # for SDPA's devices, which do not return them
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
    mask = _mask(attention_mask, q_len, kv_len, query.device)
    return torch.softmax(_masked(scores, mask, torch.finfo(scores.dtype).min), dim=-1)


Q_BLOCK = 256  # query rows per float64 block: bounds the score matrix's memory
_CAUSAL = torch.empty(0, dtype=torch.bool)  # the fixed-order kernel's "bottom-right causal"


def _mask(attention_mask: torch.Tensor | None, q_len: int, kv_len: int, device) -> torch.Tensor:
    """A boolean (or additive) mask over the keys; None means bottom-right causal."""
    if attention_mask is None:
        causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=device)
        return causal.tril(kv_len - q_len)[None, None]
    return attention_mask[..., :kv_len]


def _masked(scores: torch.Tensor, mask: torch.Tensor, fill: float) -> torch.Tensor:
    """Scores with masked-out keys at `fill` (boolean mask) or the mask added (additive)."""
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, fill)
    return scores + mask.to(scores.dtype)


def _attention64(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    want_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention in float64, rounded to the input dtype: a row's result does not depend on
    how many rows or keys the call carries (the float32 kernels' blocking and tails change
    the rounding; float64 sums differ only far below float32's last bit).

    Query heads that share a key/value head are stacked as rows of one product, so the cache
    is converted once per key/value head instead of being repeated per query head."""
    b, heads, q_len, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    k = key.double().transpose(2, 3)  # b, kv_heads, dim, kv
    v = value.double()
    scale = scaling if scaling is not None else dim**-0.5
    mask = _mask(attention_mask, q_len, kv_len, query.device).unsqueeze(2)  # b|1, 1, 1, q, kv
    q = query.reshape(b, kv_heads, groups, q_len, dim)
    outs, weights = [], []
    for lo in range(0, q_len, Q_BLOCK):
        hi = min(q_len, lo + Q_BLOCK)
        rows = q[:, :, :, lo:hi].double().reshape(b, kv_heads, groups * (hi - lo), dim)
        scores = (torch.matmul(rows, k) * scale).reshape(b, kv_heads, groups, hi - lo, kv_len)
        m = mask[..., lo:hi, :] if mask.shape[-2] > 1 else mask
        p = torch.softmax(_masked(scores, m, float("-inf")), dim=-1)
        out = torch.matmul(p.reshape(b, kv_heads, groups * (hi - lo), kv_len), v)
        outs.append(out.reshape(b, heads, hi - lo, dim))
        if want_weights:
            weights.append(p.reshape(b, heads, hi - lo, kv_len).float())
    out = torch.cat(outs, dim=2).to(query.dtype).transpose(1, 2).contiguous()
    return out, torch.cat(weights, dim=2) if want_weights else None


def _fixed_order(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None) -> Any:
    """The compiled fixed-order kernel, where it computes this call (CPU, float32, a boolean
    mask or none), else None."""
    if query.device.type != "cpu" or query.dtype != torch.float32 or key.dtype != torch.float32:
        return None
    if mask is not None and mask.dtype != torch.bool:
        return None
    return int8_kernel.load()


def _attention_fixed(
    kernel: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    want_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention in float32 summed in one fixed order per row (`kernels/attention.cpp`): the
    same bits whatever the call's rows and keys, without float64's conversions."""
    q_len, dim, kv_len = query.shape[2], query.shape[3], key.shape[2]
    if attention_mask is None:  # bottom-right causal: the kernel needs no mask tensor
        mask = _CAUSAL
    else:
        mask = _mask(attention_mask, q_len, kv_len, query.device)
        mask = mask.expand(mask.shape[0], 1, q_len, kv_len)[:, 0]
    scale = scaling if scaling is not None else dim**-0.5
    res = kernel.attention(query, key, value, mask, scale, want_weights, _COPY.get())
    return res[0], (res[1] if want_weights else None)


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
    captured = cap is not None and layer in cap.layers
    fixed = _fixed_order(query, key, attention_mask)
    if fixed is not None:
        out, weights = _attention_fixed(
            fixed, query, key, value, attention_mask, scaling, want_weights=captured
        )
    elif query.device.type == "cpu":
        out, weights = _attention64(
            module, query, key, value, attention_mask, scaling, want_weights=captured
        )
    else:
        out = sdpa_attention_forward(module, query, key, value, attention_mask,
                                     scaling=scaling, dropout=dropout, **kwargs)[0]  # fmt: skip
        weights = _weights(module, query, key, attention_mask, scaling) if captured else None
    if captured:
        cap.add(layer, weights)
    return out, weights


AttentionInterface.register(ATTN_IMPLEMENTATION, capture_attention_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, sdpa_mask)
