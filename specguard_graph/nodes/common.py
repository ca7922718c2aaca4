"""What the nodes share: their bound dependencies, this run's config, events and timing."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime

from ..config import SpecGuardConfig
from ..context import RunContext, for_run
from ..models import Candidate, StepModel
from ..models.embedder import SentenceEmbedder
from ..runtime import SessionStore
from ..state import SpecGuardState, add_numbers
from ..steps import StepSpec

Update = dict[str, Any]


@dataclass(frozen=True)
class Deps:
    """Everything heavy a node needs, bound once when the graph is built."""

    draft: StepModel
    target: StepModel
    embedder: SentenceEmbedder | None
    spec: StepSpec
    config: SpecGuardConfig  # the build-time default; a run's context may change it
    sessions: SessionStore
    shared_vocab: bool
    executor: Callable[[str], Any] | None = None  # runs program steps (`ProgramSteps`)

    def run_config(self, runtime: Runtime[RunContext] | None) -> SpecGuardConfig:
        context = None if runtime is None else runtime.context
        return for_run(self.config, context, (self.draft, self.target, self.embedder),
                       exact_vote=hasattr(self.spec, "vote_key"))  # fmt: skip


def emit(event: str, **data: Any) -> None:
    """Send a custom stream event (a no-op when the caller is not streaming 'custom')."""
    get_stream_writer()({"event": event, **data})


def step_index(state: SpecGuardState) -> int:
    return len(state.get("steps") or [])


def token_texts(cand: Candidate, model: StepModel) -> list[str] | None:
    """The text of each token the model generated for this step: the server's own tokens, or
    the local model's pieces (None when the backend gives neither)."""
    if cand.pieces is not None:
        return cand.pieces
    piece = getattr(model, "piece", None)
    return [piece(t) for t in cand.token_ids] if piece else None


def remaining_tokens(state: SpecGuardState, config: SpecGuardConfig) -> int:
    # what the models wrote: a program's output (a `tool` step) is read, not written
    used = sum(
        int(s.get("tokens", 0)) for s in state.get("steps") or [] if s.get("source") != "tool"
    )
    return config.max_total_tokens - used


Node = Callable[..., Any]


def timed(key: str) -> Callable[[Node], Node]:
    """Add the node's wall time to `timing[key]` of the update it returns."""

    def wrap(fn: Node) -> Node:
        @functools.wraps(fn)
        def node(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            out["timing"] = add_numbers(out.get("timing"), {key: time.perf_counter() - t0})
            return out

        return node

    return wrap
