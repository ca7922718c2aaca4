"""KV caches kept across calls, so a prompt that starts like an earlier one feeds only its new
tokens: an agent's next call (the conversation so far plus a tool result), a resumed or
repeated question.

One store per model, bounded in bytes, least recently used out first. A run's prompt is
stored once, after its first prefill (`remember`); a new run takes a private copy of the
entry sharing the longest prefix with its ids (`recall`), cropped to that prefix. Reuse is
exact where the model is row-invariant (the gguf and int8 formats): a row's logits do not depend on
which rows were fed with it, so a cached prefix plus the new tokens computes the same bits
as a cold prefill of the whole prompt (tests/test_prefix_store.py). A model without that
contract (float32 through torch's kernels, CUDA) starts with the store off.

Under the memory sits a tier on disk (`disk.py`), shared by every process on the
machine: a recall that the memory cannot serve (or serves with a shorter prefix) looks there,
and every remembered prompt is written there too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..kv_cache import new_cache

DEFAULT_BYTES = 1 << 30  # per model: a 1.5B target's ~4k-token prompt takes ~0.24 GB
MIN_TOKENS = 16  # a shorter shared prefix is not worth a copy


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def _layers(cache: Any) -> list[Any]:
    return [la for la in cache.layers if getattr(la, "keys", None) is not None]


def compact_copy(cache: Any, config: Any, length: int) -> Any:
    """The first `length` positions of `cache`, in a new cache with tight buffers."""
    out = new_cache(config)
    for src, dst in zip(cache.layers, out.layers, strict=True):
        if getattr(src, "keys", None) is None or src.keys.numel() == 0:
            continue
        k = src.keys[..., :length, :].clone()
        v = src.values[..., :length, :].clone()
        dst.lazy_initialization(k, v)
        dst.keys, dst.values = k, v
    return out


def nbytes(cache: Any) -> int:
    return sum(la.keys.nbytes + la.values.nbytes for la in _layers(cache))


@dataclass
class _Entry:
    ids: tuple[int, ...]
    cache: Any
    size: int


class PrefixStore:
    """A model's cached prompts (see module doc). Safe under concurrent calls: entries are
    never handed out, only copied under the store's lock."""

    def __init__(self, config: Any, max_bytes: int = DEFAULT_BYTES, disk: Any = None):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative integer, got {max_bytes!r}")
        self.config = config
        self.max_bytes = max_bytes
        self.disk = disk  # a `disk.DiskPrefixes`, or None
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.reused_tokens = 0

    @classmethod
    def for_model(cls, model: Any) -> PrefixStore:
        """The store a loaded model starts with: on, over the disk tier, where reuse is exact
        (`numerics.row_invariant`); off elsewhere."""
        from ..numerics import row_invariant
        from .disk import disk_tier

        exact = row_invariant(model)
        return cls(model.config, DEFAULT_BYTES if exact else 0, disk_tier(model) if exact else None)

    @property
    def size(self) -> int:
        return sum(e.size for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry (a benchmark starts each method cold)."""
        with self._lock:
            self._entries.clear()

    def start(self, ids: Sequence[int]) -> tuple[Any, list[int]]:
        """A run's first cache: the longest stored prefix of `ids`, or an empty cache."""
        found = self.recall(ids) if self.max_bytes else None
        return found or (new_cache(self.config), [])

    @torch.inference_mode()
    def recall(self, ids: Sequence[int]) -> tuple[Any, list[int]] | None:
        """A private cache over the longest stored prefix of `ids` and the ids it covers."""
        with self._lock:
            best, keep = None, 0
            for entry in self._entries.values():
                n = common_prefix(entry.ids, ids)
                if n > keep:
                    best, keep = entry, n
            if best is not None and keep >= MIN_TOKENS:
                self._entries.move_to_end(best.ids)
                found = compact_copy(best.cache, self.config, keep), list(ids[:keep])
            else:
                found, keep = None, MIN_TOKENS - 1
        # the disk is read only where it could hold more than memory does (a call whose whole
        # prompt is in memory scans no entry files)
        on_disk = self.disk is not None and keep < len(ids)
        if on_disk and (longer := self.disk.lookup(ids, at_least=keep)):
            found = longer  # and a copy of its own for this process's next recall
            self._keep(longer[1], compact_copy(longer[0], self.config, len(longer[1])))
        with self._lock:
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            self.reused_tokens += len(found[1])
        return found

    @torch.inference_mode()
    def remember(self, ids: Sequence[int], cache: Any) -> bool:
        """Keep a copy of `cache`, which covers exactly `ids` (True: nothing more to do)."""
        if self.max_bytes == 0 or len(ids) < MIN_TOKENS:
            return True
        key = tuple(ids)
        with self._lock:
            longer = next((k for k in self._entries if k[: len(key)] == key), None)
            if longer is not None:  # already covered by a longer entry
                self._entries.move_to_end(longer)
                return True
        copy = compact_copy(cache, self.config, len(key))
        if self.disk is not None:
            self.disk.store(key, copy)
        self._keep(key, copy)
        return True

    def _keep(self, ids: Sequence[int], copy: Any) -> None:
        """Hold `copy` (a private cache over exactly `ids`) in memory."""
        key = tuple(ids)
        size = nbytes(copy)
        if size > self.max_bytes:
            return
        with self._lock:
            for old in [k for k in self._entries if k == key[: len(k)]]:
                del self._entries[old]  # a stored prefix of this one is now redundant
            self._entries[key] = _Entry(key, copy, size)
            while self.size > self.max_bytes:
                self._entries.popitem(last=False)
