"""Per-run sessions: the models' prefix caches and the current step's captured signals.

A session is an accelerator of the state, never the truth: when it is missing (a new
process resumed a checkpoint) or out of step with the state (time travel), it is rebuilt
from the question and the accepted steps, costing one prefill per model.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import InputError
from .models import PrefixCache, Sample, StepModel
from .steps import StepSpec, history

Signals = tuple[list[float], list[torch.Tensor], int]  # token log-probs, attentions, prefix len


def validate_question(question: Any) -> str:
    if not isinstance(question, str):
        raise InputError(f"question must be text, got {type(question).__name__}")
    if not question.strip():
        raise InputError("question is empty")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: undecodable bytes of a command line
        raise InputError("question is not valid UTF-8 text") from None
    return question


@dataclass
class RunSession:
    run_id: str
    draft: PrefixCache
    target: PrefixCache
    n_steps: int = 0
    sample: Sample | None = None
    sample_step: int = -1
    counters_at_step: dict[str, int] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)  # this step's seconds per model
    prefill_at_step: dict[str, float] = field(default_factory=dict)
    step_started: float = 0.0
    _signals: dict[tuple[str, int, int], Signals] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def counters(self) -> dict[str, int]:
        return {
            "draft_prefill": self.draft.prefill_tokens,
            "draft_decode": self.draft.decode_tokens,
            "target_prefill": self.target.prefill_tokens,
            "target_decode": self.target.decode_tokens,
            "draft_reused": self.draft.reused_tokens,  # KV kept from an earlier run
            "target_reused": self.target.reused_tokens,
        }

    def prefill_seconds(self) -> dict[str, float]:
        """Seconds each model spent in catch-up prefills so far (`PrefixCache.prefill_s`)."""
        return {"draft_prefill_s": self.draft.prefill_s, "target_prefill_s": self.target.prefill_s}

    def step_spent(self, time_s: float) -> dict[str, float]:
        """This step's seconds per model, `verify_s` the rest of its `time_s`, and of each
        model's seconds those of its catch-up prefills."""
        spent = {"draft_s": 0.0, "target_s": 0.0, **self.spent}
        spent["verify_s"] = max(0.0, time_s - spent["draft_s"] - spent["target_s"])
        at = self.prefill_at_step
        return {**spent, **{k: v - at.get(k, 0.0) for k, v in self.prefill_seconds().items()}}

    def fed_since_step_start(self) -> dict[str, int]:
        now = self.counters()
        return {k: now[k] - self.counters_at_step.get(k, 0) for k in now}

    def signals(self, key: tuple[str, int, int], compute: Callable[[], Signals]) -> Signals:
        """Compute a step's signals once even when both scorers ask at the same time."""
        with self._lock:
            if key not in self._signals:
                self._signals.clear()
                self._signals[key] = compute()
            return self._signals[key]


class SessionStore:
    """Sessions by run id, bounded (LRU) so abandoned runs cannot leak memory."""

    def __init__(self, draft: StepModel, target: StepModel, spec: StepSpec, max_sessions: int = 32):
        self.draft, self.target, self.spec = draft, target, spec
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, RunSession] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, state: Mapping[str, Any]) -> RunSession:
        run_id = state.get("run_id") or uuid.uuid4().hex
        steps = state.get("steps") or []
        with self._lock:
            session = self._sessions.get(run_id)
            if session is not None and session.n_steps == len(steps):
                self._sessions.move_to_end(run_id)
                return session
        session = self._build(run_id, validate_question(state.get("question")), steps)
        with self._lock:
            self._sessions[run_id] = session
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return session

    def drop(self, run_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(run_id or "", None)

    def _build(self, run_id: str, question: str, steps: list[Mapping[str, Any]]) -> RunSession:
        done = history(self.spec.delimiter, steps)
        caches = []
        for model in (self.draft, self.target):
            pc = model.new_prefix(self.spec.render_prompt(question, model.tokenizer))
            if done:
                model.append_text(pc, done)
            if len(pc.ids) >= model.context_window:
                raise InputError(
                    f"prompt of {len(pc.ids)} tokens does not fit {model.name}'s window "
                    f"of {model.context_window}"
                )
            caches.append(pc)
        return RunSession(run_id=run_id, draft=caches[0], target=caches[1], n_steps=len(steps))
