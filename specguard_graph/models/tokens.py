"""Tokens as they become final, for whoever streams them (`agents/stream.py`), and a long
prefill's progress (`prefill_progress`).

Why a context variable, not a callback argument: the tokens are final deep inside the engine's
loops (a greedy decode, prompt lookup, the target's verification), under the graph's nodes,
which take no callbacks. A streaming caller sets a sink (`sink`); a writer whose text is the
answer as it is written marks its loop final (`final`: the one-model chat model's decode, the
target's rewrite or verification); the loops call `emit` with each token they keep. The draft's
candidates are never marked, so they never reach a stream. Without both, `emit` does nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

_SINK: contextvars.ContextVar[Callable[[list[int]], None] | None] = contextvars.ContextVar(
    "token_sink", default=None
)
_FINAL: contextvars.ContextVar[bool] = contextvars.ContextVar("tokens_final", default=False)


@contextmanager
def sink(fn: Callable[[list[int]], None]) -> Iterator[None]:
    """Final tokens written inside this block go to `fn`, in order."""
    token = _SINK.set(fn)
    try:
        yield
    finally:
        _SINK.reset(token)


@contextmanager
def final() -> Iterator[None]:
    """The tokens the engine keeps inside this block are the answer's, as written."""
    token = _FINAL.set(True)
    try:
        yield
    finally:
        _FINAL.reset(token)


@contextmanager
def also(fn: Callable[[list[int]], None]) -> Iterator[None]:
    """Like `sink`, but the sink already set (a streaming chat model's) gets the tokens too."""
    outer = _SINK.get()

    def both(ids: list[int]) -> None:
        fn(ids)
        if outer is not None:
            outer(ids)

    with sink(both):
        yield


def emit(ids: Sequence[int], eos: Sequence[int] | set[int] = ()) -> None:
    """Send `ids` (less any EOS) to the sink, where a final writer streams."""
    fn = _SINK.get()
    if fn is None or not _FINAL.get():
        return
    kept = [int(t) for t in ids if t not in eos]
    if kept:
        fn(kept)


_PROGRESS: contextvars.ContextVar[Callable[[int, int], None] | None] = contextvars.ContextVar(
    "prefill_progress", default=None
)


@contextmanager
def on_prefill(fn: Callable[[int, int], None]) -> Iterator[None]:
    """`fn(fed, total)` after each chunk of a long prompt's prefill inside this block."""
    token = _PROGRESS.set(fn)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def prefill_progress(fed: int, total: int) -> None:
    """A long prefill has fed `fed` of its `total` prompt tokens: tell the `on_prefill` callback,
    and LangGraph's custom stream where a graph (the SpecGuard graph, or an agent whose model
    this is) runs the call: `{"event": "prefill", "fed": ..., "total": ...}`."""
    if (fn := _PROGRESS.get()) is not None:
        fn(fed, total)
    from langgraph.config import get_stream_writer

    try:
        writer = get_stream_writer()
    except RuntimeError:  # not inside a graph run
        return
    writer({"event": "prefill", "fed": fed, "total": total})
