"""ask_person: pause the run on a rejected draft step (`interrupt_on_reject`).

The caller resumes with "accept", "recompute", or the step text to use instead (a string, or
{"edit": text}). Nothing is emitted before the interrupt, so resuming (which re-runs this
node from its start) repeats no event.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from ..context import RunContext
from ..errors import InputError
from ..state import SpecGuardState
from .commit import commit_text
from .common import Deps, Update, timed


@timed("verify_s")
def ask_person(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    decision = dict(state["decision"])
    reply = interrupt(
        {
            "step": decision["step"],
            "candidate": state["candidates"][state["selected"]]["text"],
            "grounding": state.get("grounding"),
            "logprob": state.get("logprob"),
            "score": decision["score"],
            "reason": decision["reason"],
            "resume_with": ["accept", "recompute", {"edit": "<step text>"}],
        }
    )
    decision.pop("ask", None)
    if reply == "accept":
        decision.update(accepted=True, reason="accepted by the caller")
        return {"decision": decision}  # routed to commit_step
    if reply == "recompute":
        return {"decision": decision}  # routed to target_recompute
    text = reply.get("edit") if isinstance(reply, dict) else reply
    if not isinstance(text, str):
        raise InputError(
            'resume with "accept", "recompute" or {"edit": "<step text>"}, got ' + repr(reply)
        )
    decision.update(accepted=True, reason="edited by the caller")
    update = commit_text(deps, runtime, {**state, "decision": decision}, text)
    return {**update, "decision": decision}
