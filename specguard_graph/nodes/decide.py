"""decide: normalise both signals on fixed ranges, mix them with β and compare with τ.

It only decides; what follows is the graph's routing: commit_step (accepted), draft_k
(specguard-adaptive widens an uncertain single draw to the full vote), ask_person (rejected,
with `interrupt_on_reject`) or target_recompute (rejected).
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ..config import SpecGuardConfig
from ..context import RunContext
from ..refusals import refusal
from ..scoring import decide_signals
from ..state import Decision, SpecGuardState
from .common import Deps, Update, emit, step_index, timed


def _decision(state: SpecGuardState, cfg: SpecGuardConfig) -> Decision:
    index = step_index(state)
    g, lp = state.get("grounding"), state.get("logprob")
    # a signal with zero weight (beta = 0 or 1) is not needed, so its absence is no error
    need_g, need_lp = cfg.beta < 1.0, cfg.beta > 0.0
    errors = [
        e
        for needed, e in ((need_g, state.get("grounding_error")),
                          (need_lp, state.get("logprob_error")))
        if needed and e
    ]  # fmt: skip
    if errors or (need_g and g is None) or (need_lp and lp is None):
        return {"step": index, "accepted": False, "score": None, "grounding_norm": None,
                "logprob_norm": None, "reason": "; ".join(errors) or "missing signal"}  # fmt: skip
    d = decide_signals(g, lp, cfg)
    return {
        "step": index,
        "accepted": d.accepted,
        "score": d.score,
        "grounding_norm": d.grounding_norm,
        "logprob_norm": d.logprob_norm,
        "reason": None if d.accepted else f"score {d.score:.3f} < tau {cfg.tau}",
    }


@timed("verify_s")
def decide(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    cfg = deps.run_config(runtime)
    decision = _decision(state, cfg)
    refused = (state.get("program") or {}).get("refused")
    if refused and cfg.reject_failed_programs and decision["accepted"]:
        decision.update(accepted=False, reason=refused)  # the score stays for the record
    elif decision["accepted"] and (why := refusal(cfg, state["candidates"][state["selected"]])):
        decision.update(accepted=False, reason=why)
    check = getattr(deps.spec, "check", None)  # e.g. tool calls against their schemas
    if check is not None:
        chosen = state["candidates"][state["selected"]]
        why = check(state["question"], chosen["text"], ended=chosen.get("ended"))
        decision["checked"] = why or "ok"
        if why:
            decision.update(accepted=False, reason=why)
    if (
        cfg.adaptive_band is not None
        and cfg.k > 1
        and len(state["candidates"]) == 1
        and decision["score"] is not None
        and abs(decision["score"] - cfg.tau) < cfg.adaptive_band
    ):
        decision.update(accepted=False, widen=True, reason="uncertain: drawing the vote")
    elif not decision["accepted"] and cfg.interrupt_on_reject:
        decision["ask"] = True
    emit("decision", **{k: v for k, v in decision.items() if k != "ask"})
    return {"decision": decision}
