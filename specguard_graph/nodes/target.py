"""target_recompute: the target writes the whole step from the same accepted prefix.

By default it verifies rather than rewrites (`models/verify.py`): the rejected candidate is
checked a few tokens per forward, the prefix the target agrees with is kept, and the draft's
proposals carry the step on from the first disagreement. The text is the same either way (the
target's greedy step); only the forwards differ. A served target whose engine gives prompt
log-probs (vLLM) checks the candidate in one request (`models/served/verify.py`). Backends that
cannot verify (llama.cpp's server, user callables, float32 weights) rewrite, and each step
record says which was used."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from langgraph.runtime import Runtime

from ..context import RunContext
from ..models import tokens as streamed
from ..models.local.hf import LocalCausalLM
from ..models.local.verify import can_verify, verify_greedy
from ..models.served.client import ServedStepModel
from ..models.served.verify import verify_served
from ..state import SpecGuardState, add_numbers
from ..steps import separator
from .commit import finish_step
from .common import Deps, Update, emit, remaining_tokens, step_index, token_texts
from .messages import step_message
from .program import kept_tokens, trim_step

if TYPE_CHECKING:
    from ..models.base import Sample
    from ..models.local.verify import Verification
    from ..runtime import RunSession


def target_recompute(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    t0 = time.perf_counter()
    cfg = deps.run_config(runtime)
    session = deps.sessions.get(state)
    budget = min(cfg.max_step_tokens, remaining_tokens(state, cfg))
    verified = None
    # the target's tokens are the step's as it writes them: to a streaming chat model, and to
    # the custom stream as {"event": "target_text", "step": i, "text": the step so far}
    # and to LangGraph's `messages` stream as one message per step (`messages.py`)
    with (
        step_message(step_index(state), "target") as to_messages,
        streamed.final(),
        streamed.also(_text_events(deps, step_index(state), to_messages)),
    ):
        if cfg.fallback == "verify" and can_verify(deps.target):
            sample, stats = _verify(deps, state, session, budget)
            verified = stats.as_dict()
        else:
            sample = deps.target.sample(session.target, n=1, delimiter=deps.spec.delimiter,
                                        max_new_tokens=budget, temperature=0.0,
                                        seed=cfg.seed + step_index(state), fork=False)  # fmt: skip
    cand = sample.candidates[0]
    deps.target.adopt(session.target, sample, 0)
    text, ended, dropped, tokens = cand.text, cand.ended, None, cand.n_tokens
    cut = trim_step(deps, state, cand.text)
    if cut is not None:  # ProgramSteps: its own output after the program is dropped
        session.target.ids = session.target.ids[: len(session.target.ids) - len(cand.token_ids)]
        text, ended, dropped = cut, "delimiter", cand.text[len(cut) :]
        tokens = kept_tokens(cut, token_texts(cand, deps.target), deps.target)
        deps.target.append_text(session.target, text + deps.spec.delimiter)
    if deps.shared_vocab and cut is None:
        session.draft.extend(cand.token_ids)
    else:
        deps.draft.append_text(session.draft, text + separator(deps.spec.delimiter, ended))
    elapsed = time.perf_counter() - t0
    session.spent["target_s"] = elapsed
    update = finish_step(deps, runtime, state, session, text=text, source="target", ended=ended,
                         tokens=tokens, dropped=dropped, verified=verified)  # fmt: skip
    update["timing"] = add_numbers(update.get("timing"), {"target_s": elapsed})
    update["counts"] = add_numbers(update["counts"], {"target_tokens": cand.n_tokens})
    return update


def _text_events(deps: Deps, step: int, to_messages: Callable[[str], None]
                 ) -> Callable[[list[int]], None]:  # fmt: skip
    written: list[int] = []
    decode = getattr(deps.target, "decode", None)

    def send(ids: list[int]) -> None:
        written.extend(ids)
        if decode is not None:
            text = decode(written).rstrip("\ufffd")
            emit("target_text", step=step, text=text)
            to_messages(text)

    return send


def _verify(deps: Deps, state: SpecGuardState, session: RunSession, budget: int
            ) -> tuple[Sample, Verification]:  # fmt: skip
    """The target's step, verified against the rejected candidate (its token ids where the
    vocabularies match, else its text re-encoded) and then against the draft's proposals."""
    sample, index = session.sample, step_index(state)
    candidate: list[int] = []
    text = ""
    if sample is not None and session.sample_step == index and "selected" in state:
        chosen = sample.candidates[state["selected"]]
        text = chosen.text
        candidate = chosen.token_ids if deps.shared_vocab else deps.target.encode(chosen.text)
    if isinstance(deps.target, ServedStepModel):  # one echo request checks the candidate
        return verify_served(deps.target, session.target, candidate=text,
                             delimiter=deps.spec.delimiter, max_new_tokens=budget)  # fmt: skip
    local = isinstance(deps.draft, LocalCausalLM) and deps.shared_vocab
    return verify_greedy(deps.target, session.target, candidate=candidate,  # type: ignore[arg-type]
                         delimiter=deps.spec.delimiter, max_new_tokens=budget,
                         draft=deps.draft if local else None,  # type: ignore[arg-type]
                         draft_pc=session.draft if local else None)  # fmt: skip
