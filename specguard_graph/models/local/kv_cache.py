"""A KV cache whose layers grow in place instead of being copied at every token.

transformers' `DynamicLayer` concatenates each new token's keys and values onto the old ones,
so a decode copies the whole cache, every layer, every token (and allocates it anew): on the
1.5B target at a 400-token context that was ~7 % of a CPU decode step. `GrowingLayer` keeps
its keys and values as views of a buffer with room to spare and writes new rows into it; the
buffer doubles when full. What a forward computes is unchanged: the same rows, in the same
order (the fixed-order attention kernel reads the views' strides as they are).

Every other operation (crop, deepcopy for a fork, batch repeat and select) keeps its
`DynamicLayer` meaning: crop narrows the views; a deepcopy copies the buffer and its views
together (torch deep-copies a storage once per memo); repeat and select make new tensors,
which the next update moves into a new buffer.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

MIN_ROOM = 256  # positions a new buffer holds at least


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose `keys` and `values` are views of buffers with spare positions."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None

    def _room(self, k: torch.Tensor, new: int) -> bool:
        """Do the views still point at the buffer's start, with `new` positions to spare?"""
        buf = self._kbuf
        return (
            buf is not None
            and self.keys.numel() > 0
            and self.keys.data_ptr() == buf.data_ptr()
            and self.values.data_ptr() == self._vbuf.data_ptr()
            and buf.shape[:2] == k.shape[:2]
            and self.keys.shape[-2] + new <= buf.shape[-2]
        )

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, new = self.get_seq_length(), key_states.shape[-2]
        if not self._room(key_states, new):
            b, h, _, d = key_states.shape
            cap = max(MIN_ROOM, 2 * (n + new))
            kbuf = key_states.new_empty(b, h, cap, d)
            vbuf = value_states.new_empty(b, h, cap, value_states.shape[-1])
            if n:
                kbuf[:, :, :n] = self.keys
                vbuf[:, :, :n] = self.values
            self._kbuf, self._vbuf = kbuf, vbuf
        self._kbuf[:, :, n : n + new] = key_states
        self._vbuf[:, :, n : n + new] = value_states
        self.keys, self.values = self._kbuf[:, :, : n + new], self._vbuf[:, :, : n + new]
        return self.keys, self.values


def new_cache(config: Any) -> DynamicCache:
    """A `DynamicCache` for `config` whose full-attention layers grow in place."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(la) is DynamicLayer else la for la in cache.layers]
    return cache
