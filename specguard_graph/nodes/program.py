"""Program steps (`ProgramSteps`): check_program runs the code a draft step closes, beside the
two scorers, so a program that fails is a reason to recompute; run_program appends the real
output after a committed step that closes a program (docs/design.md, "Program steps")."""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from ..context import RunContext
from ..models import StepModel
from ..state import SpecGuardState, StepRecord
from ..steps import history
from .commit import end_if_done
from .common import Deps, Update, emit, step_index, timed


def _done(deps: Deps, state: SpecGuardState) -> str:
    return history(deps.spec.delimiter, state.get("steps") or [])


def trim_step(deps: Deps, state: SpecGuardState, text: str) -> str | None:
    """Where this step must end (`ProgramSteps.trim`: at the fence that closes its program), or
    None when it is whole. Either model may go on past the fence with an output of its own."""
    trim = getattr(deps.spec, "trim", None)
    cut = None if trim is None else trim(_done(deps, state), text)
    return None if cut is None or cut == text else cut


def kept_tokens(cut: str, pieces: list[str] | None, model: StepModel) -> int:
    """How many of the step's generated tokens hold the kept text (its length in the model's
    own tokens, or in `encode`'s where the backend gives no token texts)."""
    if not pieces:
        return len(model.encode(cut))
    n, length = 0, 0
    while n < len(pieces) and length < len(cut):
        length += len(pieces[n])
        n += 1
    return n


def trim_candidate(deps: Deps, state: SpecGuardState, cand: dict[str, Any]) -> dict[str, Any]:
    """A draft candidate ending at its program's closing fence: its tokens and log-probs are
    those of the kept text (the signals then judge the program, not the made-up output)."""
    cut = trim_step(deps, state, cand["text"])
    if cut is None:
        return cand
    pieces = cand.get("pieces")
    n = kept_tokens(cut, pieces, deps.draft)
    return {**cand, "text": cut, "ended": "delimiter", "tokens": n,
            "token_logprobs": cand["token_logprobs"][:n], "pieces": pieces and pieces[:n],
            "dropped": cand["text"][len(cut):]}  # fmt: skip


@timed("verify_s")
def check_program(state: SpecGuardState, *, deps: Deps) -> Update:
    """The selected candidate's program, run: its observation, or why it must not be accepted."""
    cand = state["candidates"][state["selected"]]["text"]
    if deps.spec.fabricated(cand):  # type: ignore[attr-defined]
        program = {"code": None, "observation": None, "refused": "writes its own program output"}
        emit("program", step=step_index(state), **program)
        return {"program": program}
    code = deps.spec.program(_done(deps, state), cand)  # type: ignore[attr-defined]
    if code is None:
        return {"program": None}
    obs = deps.executor(code)
    refused = None
    if not obs.ok:
        refused = f"program failed: {obs.error}"
    elif not obs.stdout.strip():
        refused = "program printed nothing"
    program = {"code": code, "observation": obs.as_dict(), "refused": refused}
    emit("program", step=step_index(state), **program)
    return {"program": program}


def run_program(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    """After a step that closes a program: its real output, as a `tool` step both models read."""
    t0 = time.perf_counter()
    steps = state.get("steps") or []
    last = steps[-1]
    code = deps.spec.program(history(deps.spec.delimiter, steps[:-1]), last["text"])  # type: ignore[attr-defined]
    checked = state.get("program") or {}
    if checked.get("code") == code and checked.get("observation") is not None:
        obs = checked["observation"]  # the draft's program, run once already
    else:
        obs = deps.executor(code).as_dict()
    shown = obs["stdout"].rstrip("\n") if obs["error"] is None else f"{obs['stdout']}{obs['error']}"
    text = f"```output\n{shown.strip()}\n```"
    session = deps.sessions.get(state)
    piece = text + deps.spec.delimiter
    deps.draft.append_text(session.draft, piece)
    deps.target.append_text(session.target, piece)
    session.n_steps = len(steps) + 1
    record: StepRecord = {
        "index": len(steps), "text": text, "source": "tool", "accepted": True,  # type: ignore[typeddict-item]
        "ended": "delimiter", "cut": False, "tokens": len(deps.draft.encode(piece)),
        "candidates": [], "grounding": None, "logprob": None, "score": None,
        "observation": obs, "time_s": time.perf_counter() - t0,
    }  # fmt: skip
    emit("step", **record)
    update: Update = {"steps": [record], "program": None, "counts": {"tool_steps": 1},
                      "timing": {"tool_s": time.perf_counter() - t0}}  # fmt: skip
    return end_if_done(deps, runtime, state, session, [*steps, record], update)
