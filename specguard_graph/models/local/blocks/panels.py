"""GGUF blocks rearranged for the kernel: eight outputs side by side, the same bytes.

Why: the file stores each output's row of blocks. A kernel that reads it that way sums each output
in its own vector and pays the per-group float work once per output and row, so four rows cost
about three times one (issue 58). Here the blocks of eight consecutive outputs are interleaved
per group of 32 weights, so one vector holds one pair of weights of each of the eight outputs
(`kernels/block_gemm.cpp` says how it is read): the float work is shared by eight outputs, every
row count runs the same per-output sums, and the bytes are the file's, only reordered.

`codes` reads a file's blocks into integer codes and scales, `to_panels` and `from_panels` convert
between codes and the kernel's layout (exact inverses), `weights` dequantises codes with the same
float32 formula as the `gguf` package."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LANES = 8  # outputs per panel
GROUP = 32  # weights per activation scale


@dataclass
class Codes:
    """One tensor's blocks as arrays: `q` the unsigned (Q8_0: two's complement) code of each
    weight, [N, K] uint8; `d` (and Q4_K's `dmin`) [N, blocks] float16; `sc` (and Q4_K's `m`) the
    sub-block scales, [N, blocks, 8] uint8 for Q4_K and [N, blocks, 16] int8 for Q6_K."""

    fmt: int
    q: np.ndarray
    d: np.ndarray
    dmin: np.ndarray | None = None
    sc: np.ndarray | None = None
    m: np.ndarray | None = None

    def take(self, ids: np.ndarray) -> Codes:
        pick = [None if a is None else a[ids] for a in (self.dmin, self.sc, self.m)]
        return Codes(self.fmt, self.q[ids], self.d[ids], *pick)


def _block_bytes(fmt: int) -> int:
    """Bytes per block in the file, and per output in a panel's block (the `gguf` package's)."""
    import gguf

    return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(fmt)][1]


def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16)[..., 0]


def codes(fmt: int, blocks: np.ndarray) -> Codes:
    """The file's rows of blocks ([N, row bytes] uint8) as codes, by ggml's bit layouts."""
    n = blocks.shape[0]
    raw = blocks.reshape(n, -1, _block_bytes(fmt))
    if fmt == 8:
        return Codes(fmt, raw[..., 2:].reshape(n, -1).copy(), _f16(raw[..., :2]))
    if fmt == 6:
        qh = np.ascontiguousarray(raw[..., 2:6]).view(np.uint32)  # [n, nb, 1]
        qs = raw[..., 6:]
        low = np.concatenate([qs & 15, qs >> 4], axis=-1)
        high = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
        return Codes(fmt, (low | high << 4).reshape(n, -1), _f16(raw[..., :2]))
    if fmt == 12:
        s = raw[..., 4:16].reshape(n, -1, 3, 4)
        lo, mid, top = s[..., 0, :], s[..., 1, :], s[..., 2, :]
        sc = np.concatenate([lo & 0x3F, (top & 0x0F) | ((lo >> 2) & 0x30)], axis=-1)
        m = np.concatenate([mid & 0x3F, (top >> 4) | ((mid >> 2) & 0x30)], axis=-1)
        qs = raw[..., 16:].reshape(n, -1, 4, 1, 32) >> np.array([0, 4], np.uint8)[:, None]
        q = (qs & 15).reshape(n, -1)
        return Codes(fmt, q, _f16(raw[..., :2]), _f16(raw[..., 2:4]), sc, m)
    ql = raw[..., :128].reshape(n, -1, 2, 1, 64) >> np.array([0, 4], np.uint8)[:, None]
    qh = raw[..., 128:192].reshape(n, -1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8)[:, None]
    q = ((ql & 15).reshape(n, -1, 8, 32) | (qh & 3).reshape(n, -1, 8, 32) << 4).reshape(n, -1)
    sc = np.ascontiguousarray(raw[..., 192:208]).view(np.int8)
    return Codes(fmt, q, _f16(raw[..., 208:]), sc=sc)


def weights(c: Codes) -> np.ndarray:
    """The float32 weight [N, K], by the same formula (and rounding) as `gguf.quants`."""
    n = c.q.shape[0]
    d = c.d.astype(np.float32)[..., None]
    if c.fmt == 8:
        return (d * c.q.view(np.int8).reshape(n, -1, 32).astype(np.float32)).reshape(n, -1)
    if c.fmt == 6:
        q = c.q.reshape(n, -1, 32).astype(np.int8) - np.int8(16)
        return (d * q.astype(np.float32)).reshape(n, -1)
    if c.fmt == 12:
        scale = (d * c.sc.astype(np.float32))[..., None]
        mins = (c.dmin.astype(np.float32)[..., None] * c.m.astype(np.float32))[..., None]
        return (scale * c.q.reshape(n, -1, 8, 32).astype(np.float32) - mins).reshape(n, -1)
    scale = (d * c.sc.astype(np.float32))[..., None]
    q = c.q.reshape(n, -1, 16, 16).astype(np.int8) - np.int8(32)
    return (scale * q.astype(np.float32)).reshape(n, -1)


def _pairs(q: np.ndarray) -> np.ndarray:
    """[P*8, K] -> [P, K/32, 16, 16]: per group, pair j of weights of each of the 8 outputs."""
    p, k = q.shape[0] // LANES, q.shape[1]
    return q.reshape(p, LANES, k // GROUP, 16, 2).transpose(0, 2, 3, 1, 4).reshape(p, -1, 16, 16)


def _unpairs(pv: np.ndarray) -> np.ndarray:
    p, g = pv.shape[:2]
    return pv.reshape(p, g, 16, LANES, 2).transpose(0, 3, 1, 2, 4).reshape(p * LANES, g * GROUP)


def _lanes(a: np.ndarray) -> np.ndarray:
    """[P*8, blocks, ...] -> [P, blocks, ..., 8]: a per-output value as one vector of 8 lanes."""
    a = a.reshape(-1, LANES, *a.shape[1:])
    return np.moveaxis(a, 1, -1)


def _unlanes(a: np.ndarray) -> np.ndarray:
    return np.moveaxis(a, -1, 1).reshape(-1, *a.shape[1:-1])


def _bytes(*parts: np.ndarray) -> np.ndarray:
    """Concatenate per-block parts ([P, blocks, ...] each) as bytes: [P, blocks, bytes]."""
    p, nb = parts[0].shape[:2]
    return np.concatenate([np.ascontiguousarray(x).view(np.uint8).reshape(p, nb, -1)
                           for x in parts], axis=-1)  # fmt: skip


def to_panels(c: Codes) -> np.ndarray:
    """Codes -> the kernel's layout, [ceil(N/8), blocks * 8 * bytes per block] uint8; outputs
    past N are zero weights."""
    n = c.q.shape[0]
    pad = -n % LANES
    if pad:
        c = c.take(np.r_[np.arange(n), np.full(pad, n - 1)])
        for scale in (c.d, c.dmin):  # zero scales: the padding outputs are zero weights
            if scale is not None:
                scale[n:] = 0
    pv = _pairs(c.q)  # [P, G, 16, 16]
    p, g = pv.shape[:2]
    nib = (pv[:, :, :8] & 15) | (pv[:, :, 8:] & 15) << 4  # [P, G, 8, 16]
    if c.fmt == 8:
        out = _bytes(_lanes(c.d), pv)
    elif c.fmt == 6:  # the fifth bit, inverted: lane i of word j is set where q < 16
        low = ((pv >> 4) & 1) ^ 1
        qh = (low.astype(np.uint16) << np.arange(16, dtype=np.uint16)[:, None]).sum(2)
        out = _bytes(_lanes(c.d), qh.astype(np.uint16), nib)
    elif c.fmt == 12:
        sc, m = c.sc.astype(np.uint32), c.m.astype(np.uint32)
        at = np.arange(8, dtype=np.uint32)
        w0 = ((sc & 15) << 4 * at).sum(-1, dtype=np.uint32)
        w1 = ((m & 15) << 4 * at).sum(-1, dtype=np.uint32)
        w2 = ((sc >> 4) << 2 * at).sum(-1, dtype=np.uint32)
        w2 = w2 | ((m >> 4) << (16 + 2 * at)).sum(-1, dtype=np.uint32)
        words = np.stack([_lanes(w) for w in (w0, w1, w2)], axis=2)  # [P, nb, 3, 8]
        out = _bytes(_lanes(c.d), _lanes(c.dmin), words, nib.reshape(p, -1, 8, 8, 16))
    else:
        top = (pv >> 4).reshape(p, g, 4, 4, 16)  # pair 4t+u at bits 2u of chunk t
        qh = (top << (2 * np.arange(4, dtype=np.uint8))[:, None]).sum(3, dtype=np.uint8)
        group = np.concatenate([nib.reshape(p, g, -1), qh.reshape(p, g, -1)], axis=-1)
        out = _bytes(_lanes(c.d), _lanes(c.sc), group.reshape(p, -1, 8, 192))
    return out.reshape(p, -1)


def from_panels(fmt: int, panels: np.ndarray, n: int) -> Codes:
    """The kernel's layout -> the codes of its first `n` outputs (`to_panels`' inverse)."""
    p = panels.shape[0]
    raw = panels.reshape(p, -1, LANES * _block_bytes(fmt))
    nb = raw.shape[1]

    def split(at: int, size: int, dtype) -> np.ndarray:
        return np.ascontiguousarray(raw[..., at : at + size]).view(dtype)

    def from_nibbles(nib: np.ndarray, high: np.ndarray | None = None) -> np.ndarray:
        """nibbles [P, G, 8, 16] and the bits above them [P, G, 16, 16] -> codes [P*8, K]."""
        pv = np.concatenate([nib & 15, nib >> 4], axis=2)
        return _unpairs(pv if high is None else pv | high << 4)

    d = _unlanes(split(0, 16, np.float16))
    if fmt == 8:
        q = _unpairs(split(16, 256, np.uint8).reshape(p, nb, 16, 16))
        c = Codes(fmt, q, d)
    elif fmt == 6:
        qh = split(16, 32, np.uint16)  # [P, G, 16]
        high = ((qh[:, :, None, :] >> np.arange(16, dtype=np.uint16)[:, None]) & 1) ^ 1
        c = Codes(fmt, from_nibbles(split(48, 128, np.uint8).reshape(p, nb, 8, 16),
                                    high.astype(np.uint8)), d)  # fmt: skip
    elif fmt == 12:
        words = split(32, 96, np.uint32).reshape(p, nb, 3, LANES)
        at = np.arange(8, dtype=np.uint32)[:, None]
        w0, w1, w2 = (words[:, :, i, None, :] for i in range(3))  # [P, nb, 1, 8]
        sc = ((w0 >> 4 * at) & 15) | ((w2 >> 2 * at) & 3) << 4
        m = ((w1 >> 4 * at) & 15) | ((w2 >> (16 + 2 * at)) & 3) << 4
        nib = split(128, 1024, np.uint8).reshape(p, nb * 8, 8, 16)
        c = Codes(fmt, from_nibbles(nib), d,
                  _unlanes(split(16, 16, np.float16)), _unlanes(sc).astype(np.uint8),
                  _unlanes(m).astype(np.uint8))  # fmt: skip
    else:
        sc = _unlanes(split(16, 128, np.int8).reshape(p, nb, 16, LANES))
        group = split(144, 8 * 192, np.uint8).reshape(p, nb * 8, 192)
        qh = group[..., 128:].reshape(p, nb * 8, 4, 1, 16)
        high = (qh >> (2 * np.arange(4, dtype=np.uint8))[:, None]) & 3
        nib = group[..., :128].reshape(p, nb * 8, 8, 16)
        c = Codes(fmt, from_nibbles(nib, high.reshape(p, nb * 8, 16, 16)), d, sc=sc)
    return c.take(np.arange(n))
