"""draft_k: k candidate steps from the draft in one batched call, signals captured on the way."""

from __future__ import annotations

import time
from collections.abc import Callable

from langgraph.runtime import Runtime

from ..config import SpecGuardConfig
from ..context import RunContext
from ..models import LocalCausalLM
from ..scoring import doomed_below
from ..state import SpecGuardState
from .common import Deps, Update, emit, remaining_tokens, step_index, token_texts
from .program import trim_candidate


def stop_if(deps: Deps, cfg: SpecGuardConfig) -> Callable[[float], bool] | None:
    """Where a draft token can doom its step (`scoring.doomed_below`) and nothing reads the
    rest of it: a local draft's own log-probs decide, no vote of other candidates needs the
    whole text, and no person is asked to accept the step as it is."""
    if not cfg.stop_doomed or cfg.signal_model != "draft" or cfg.interrupt_on_reject:
        return None
    if cfg.adaptive_band is not None or not isinstance(deps.draft, LocalCausalLM):
        return None
    return doomed_below(cfg)


def draft_k(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    t0 = time.perf_counter()
    cfg = deps.run_config(runtime)
    session = deps.sessions.get(state)
    index = step_index(state)
    decision = state.get("decision") or {}
    widen = bool(decision.get("widen")) and decision.get("step") == index
    if not widen:
        session.counters_at_step = session.counters()
        session.prefill_at_step = session.prefill_seconds()
        session.step_started = t0
        session.spent = {}
    # adaptive: one candidate first; the other k - 1 only if decide asks to widen
    n = cfg.k - 1 if widen else (1 if cfg.adaptive_band is not None else cfg.k)
    # attention is captured only where grounding counts: beta = 1 scores on log-probs alone
    needed = cfg.signal_model == "draft" and cfg.beta < 1.0
    capture = deps.draft.capture_layers(cfg.grounding_layers) if needed else None
    stop = {"stop_if": doomed} if n == cfg.k == 1 and (doomed := stop_if(deps, cfg)) else {}
    sample = deps.draft.sample(
        session.draft,
        n=n,
        delimiter=deps.spec.delimiter,
        max_new_tokens=min(cfg.max_step_tokens, remaining_tokens(state, cfg)),
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seed=cfg.seed + index + (1_000_003 if widen else 0),
        capture_layers=capture,
        **stop,
    )
    if widen and session.sample is not None and session.sample_step == index:
        sample = session.sample.merge(sample)
    session.sample, session.sample_step = sample, index
    candidates = [
        {"text": c.text, "tokens": c.n_tokens, "ended": c.ended,
         "token_logprobs": c.token_logprobs,
         "pieces": token_texts(c, deps.draft)}
        for c in sample.candidates
    ]  # fmt: skip
    candidates = [trim_candidate(deps, state, c) for c in candidates]
    elapsed = time.perf_counter() - t0
    session.spent["draft_s"] = session.spent.get("draft_s", 0.0) + elapsed
    emit("draft", step=index, candidates=[c["text"] for c in candidates], time_s=elapsed)
    update: Update = {
        "run_id": session.run_id,
        "candidates": candidates,
        "grounding": None,
        "grounding_tokens": None,
        "candidate_grounding": None,
        "votes": None,
        "program": None,
        "logprob": None,
        "grounding_error": None,
        "logprob_error": None,
        "timing": {"draft_s": elapsed},
        "counts": {"draft_tokens": sum(c.n_tokens for c in sample.candidates[-n:])},
    }
    if "started_at" not in state:
        update["started_at"] = time.time() - elapsed
    return update
