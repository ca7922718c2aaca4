"""The prefix store's tier on disk: a prompt prefilled by one process is there for the next.

Why: an agent app restarts. A LangGraph server worker, a CLI run or a notebook kernel prefills
the same system prompt and tool schemas again, and on a CPU that first call is most of a task
(issue 73: 58-61 % of a BFCL multi-turn task on a 2-core AVX2 machine). The in-memory store
(`__init__.py`) dies with its process; this tier does not.

Layout: one folder per model fingerprint (`fingerprint`: the weights' bytes as the kernels
read them, each layer's activation format, the kernels' sources and torch's version), so an
entry is only ever read by a model that computes the same bits. In it, per entry:

* `<sha of the ids>.kv`: a header line (JSON: the payload's sha256 and length, the token
  count), then the KV cache as `torch.save` bytes;
* `<sha of the ids>.ids`: the token ids (int32), written after the `.kv`, so an entry is
  listed only once whole.

Both are written to a temporary name and renamed, so two processes storing the same prompt
each rename a whole file over the other's identical one: nothing is lost or torn. A reader
checks the payload's sha256; a corrupt or truncated entry is skipped with one warning,
deleted, and the prompt recomputed. Entries are read only on a hit (`lookup` scans the small
`.ids` files). The folder is bounded in bytes: after a store, the least recently used entries
(a hit touches its files) go until it fits.

Exactness: reuse is exact where the model is row-invariant (the only models that get a
store): the cache after a hit holds the same bits a cold prefill of those tokens computes.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..kv_cache import new_cache

DEFAULT_DISK_BYTES = 8 << 30
MIN_NEW = 256  # tokens a prompt must add to the longest stored prefix to be written
_FORMAT = 1  # of an entry's bytes
_OFF = ("0", "off", "false", "no")


def disk_tier(model: torch.nn.Module) -> DiskPrefixes | None:
    """The disk tier for a row-invariant `model`, as the environment sets it:
    $SPECGUARD_PREFIX_DISK off (0, off, false, no), or the folder (default: `prefix-cache` in
    the model cache); $SPECGUARD_PREFIX_DISK_BYTES its bound (default 8 GiB)."""
    where = os.environ.get("SPECGUARD_PREFIX_DISK", "").strip()
    if where.lower() in _OFF:
        return None
    raw = os.environ.get("SPECGUARD_PREFIX_DISK_BYTES", "").strip()
    try:
        limit = int(raw) if raw else DEFAULT_DISK_BYTES
        if limit < 0:
            raise ValueError
    except ValueError:
        from ....errors import ConfigError

        raise ConfigError(f"SPECGUARD_PREFIX_DISK_BYTES must be a non-negative integer (bytes), "
                          f"got {raw!r}") from None  # fmt: skip
    if where:
        root = Path(where).expanduser()
    else:
        from ...install.registry import home

        root = home() / "prefix-cache"
    return DiskPrefixes(root, lambda: fingerprint(model), model.config, limit)


def fingerprint(model: torch.nn.Module) -> str:
    """What a cached KV depends on besides the prompt: the model's parameters and buffers as
    stored (a quantised model's blocks and scales), each block layer's activation bits, the
    kernels' sources and flags, and torch's version."""
    from .. import int8_kernel

    h = hashlib.sha256(f"specguard-kv-{_FORMAT}|{torch.__version__}".encode())
    h.update(hashlib.sha256(int8_kernel.build_key()).digest())
    seen: set[int] = set()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.data_ptr() in seen or t.device.type != "cpu":  # a tied or stacked tensor once
            continue
        seen.add(t.data_ptr())
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(memoryview(t.detach().contiguous().view(torch.uint8).numpy()))
    for name, m in model.named_modules():
        if (bits := getattr(m, "act", None)) is not None:
            h.update(f"{name}|act{bits}".encode())
    return h.hexdigest()[:32]


def _ids_key(ids: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(ids, dtype=np.int32).tobytes()).hexdigest()[:40]


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class DiskPrefixes:
    """One model's folder of cached prompts (see the module doc)."""

    def __init__(self, root: Path, key: str | Callable[[], str], config: Any,
                 max_bytes: int = DEFAULT_DISK_BYTES):  # fmt: skip
        """`key`: the model's fingerprint, or a function computing it when first needed (it
        reads every weight: about a second for the 1.5B target)."""
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative integer, got {max_bytes!r}")
        self.root, self._key = Path(root), key
        self.config, self.max_bytes = config, max_bytes
        self.hits = self.misses = self.corrupt = 0

    @functools.cached_property
    def dir(self) -> Path:
        return self.root / (self._key if isinstance(self._key, str) else self._key())

    def _entries(self) -> list[tuple[Path, np.ndarray]]:
        out = []
        for p in self.dir.glob("*.ids") if self.dir.is_dir() else []:
            try:
                out.append((p, np.fromfile(p, dtype=np.int32)))
            except OSError:  # removed by another process meanwhile
                continue
        return out

    def _longest(self, ids: Sequence[int], at_least: int = 0) -> tuple[Path | None, int]:
        """The entry sharing the longest prefix with `ids` (if longer than `at_least`), and
        that prefix's length."""
        best, keep = None, at_least
        want = np.asarray(ids, dtype=np.int32)
        for path, stored in self._entries():
            n = min(len(stored), len(want))
            differ = np.flatnonzero(stored[:n] != want[:n])
            n = int(differ[0]) if len(differ) else n
            if n > keep:
                best, keep = path, n
        return best, keep

    def lookup(self, ids: Sequence[int], at_least: int) -> tuple[Any, list[int]] | None:
        """A cache over the longest stored prefix of `ids` longer than `at_least` tokens, and
        the ids it covers; None if there is none (or it was corrupt: then it is deleted)."""
        best, keep = self._longest(ids, at_least)
        if best is None:
            self.misses += 1
            return None
        cache = self._read(best.with_suffix(".kv"), keep)
        if cache is None:
            return None
        for p in (best, best.with_suffix(".kv")):  # recently used
            try:
                os.utime(p)
            except OSError:
                pass
        self.hits += 1
        return cache, [int(t) for t in ids[:keep]]

    def _read(self, path: Path, keep: int | None = None) -> Any | None:
        """The entry's cache (its first `keep` positions), or None if it is gone or corrupt."""
        try:
            raw = path.read_bytes()
            head, _, payload = raw.partition(b"\n")
            meta = json.loads(head)
            if meta.get("format") != _FORMAT or len(payload) != meta["bytes"]:
                raise ValueError(f"{len(payload)} payload bytes, the header says {meta['bytes']}")
            if hashlib.sha256(payload).hexdigest() != meta["sha256"]:
                raise ValueError("checksum mismatch")
            layers = torch.load(io.BytesIO(payload), weights_only=True)
        except FileNotFoundError:
            return None
        except Exception as exc:  # corrupt, truncated, unreadable: recompute, never trust it
            self.corrupt += 1
            warnings.warn(f"prefix cache entry {path} is corrupt ({exc}); ignored, deleted and "
                          "recomputed", stacklevel=3)  # fmt: skip
            for p in (path, path.with_suffix(".ids")):
                p.unlink(missing_ok=True)
            return None
        cache = new_cache(self.config)
        for dst, kv in zip(cache.layers, layers, strict=False):
            if kv is not None:
                k, v = (t[..., :keep, :].clone() if keep is not None else t for t in kv)
                dst.lazy_initialization(k, v)
                dst.keys, dst.values = k, v
        return cache

    def store(self, ids: Sequence[int], cache: Any) -> None:
        """Write `cache` (covering exactly `ids`) unless an entry already covers nine tenths of
        them and all but fewer than `MIN_NEW`: an agent's next call adds a tool result to the
        conversation, and writing the whole prompt again for a few tokens that a new process
        recomputes in a moment would fill the folder with near copies."""
        covered = self._longest(ids)[1]
        if self.max_bytes == 0 or (covered >= 0.9 * len(ids) and len(ids) - covered < MIN_NEW):
            return
        key = _ids_key(ids)
        kv_path = self.dir / f"{key}.kv"
        layers = [
            (la.keys.contiguous(), la.values.contiguous())
            if getattr(la, "keys", None) is not None and la.keys.numel()
            else None
            for la in cache.layers
        ]
        buf = io.BytesIO()
        torch.save(layers, buf)
        payload = buf.getvalue()
        if len(payload) > self.max_bytes:
            return
        meta = {"format": _FORMAT, "tokens": len(ids), "bytes": len(payload),
                "sha256": hashlib.sha256(payload).hexdigest()}  # fmt: skip
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(kv_path, json.dumps(meta).encode() + b"\n" + payload)
        _write_atomic(kv_path.with_suffix(".ids"), np.asarray(ids, dtype=np.int32).tobytes())
        self._evict()

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.dir.glob("*.kv")) if self.dir.is_dir() else 0

    def _evict(self) -> None:
        """Least recently used entries out until the folder fits `max_bytes`."""
        files = []
        for p in self.dir.glob("*.kv"):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in files)
        for _, size, p in sorted(files):
            if total <= self.max_bytes:
                break
            p.with_suffix(".ids").unlink(missing_ok=True)  # unlisted first, then gone
            p.unlink(missing_ok=True)
            total -= size
