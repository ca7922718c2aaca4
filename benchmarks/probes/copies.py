"""What the kernel-copy probes share (`block_copies.py`, `attention_copies.py`): the kernel
loaded at a thread count, and each copy run on the same input, its output checked against the
others, then timed interleaved with them."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from specguard_graph.models.local import int8_kernel


def load_kernel(threads: int) -> ModuleType:
    torch.set_num_threads(threads)
    kernel = int8_kernel.load()
    if kernel is None:
        raise SystemExit("the project's CPU kernel is not built here")
    return kernel


def _tensors(out: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else list(out)


def median_ms(run: Callable[[int], Any], copies: Sequence[int], repeats: int, what: str,
              calls: int = 1, compare: bool = True) -> list[float]:  # fmt: skip
    """Per copy, the median ms of `run(copy)` over `repeats` interleaved rounds (each round
    `calls` calls, so that small calls add up to milliseconds), after checking that every
    copy returns the same tensors (`compare`; a caller that checked otherwise says False)."""
    outs = [_tensors(run(c)) for c in copies]  # also the warm-up
    if compare and not all(all(map(torch.equal, outs[0], o)) for o in outs):
        raise SystemExit(f"{what}: the copies differ")
    times: dict[int, list[float]] = {c: [] for c in copies}
    for _ in range(repeats):
        for c in copies:
            t0 = time.perf_counter()
            for _ in range(calls):
                run(c)
            times[c].append(1000 * (time.perf_counter() - t0) / calls)
    return [statistics.median(times[c]) for c in copies]
