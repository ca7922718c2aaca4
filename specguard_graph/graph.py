"""build_graph: checks first, wiring last. Every behaviour lives in a node module
(docs/design.md, "The graph")."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Literal

from langgraph.graph import END, START, StateGraph

from .config import SpecGuardConfig
from .context import RunContext, check_models
from .errors import ConfigError
from .models import StepModel, shared_vocab
from .models.embedder import SentenceEmbedder
from .nodes.ask import ask_person
from .nodes.commit import commit_step
from .nodes.common import Deps
from .nodes.decide import decide
from .nodes.draft import draft_k
from .nodes.grounding import score_grounding
from .nodes.logprob import score_logprob
from .nodes.program import check_program, run_program
from .nodes.select import select_consistent
from .nodes.target import target_recompute
from .program.executor import Observation, PythonExecutor
from .runtime import SessionStore
from .state import InputState, OutputState, SpecGuardState
from .steps import ReasoningSteps, StepSpec, history

NODES = (
    "draft_k",
    "select_consistent",
    "score_grounding",
    "score_logprob",
    "decide",
    "commit_step",
    "ask_person",
    "target_recompute",
)
_MODEL_METHODS = ("sample", "new_prefix", "append_text", "adopt", "encode", "score", "vocab")


def route_after_decide(
    state: SpecGuardState,
) -> Literal["draft_k", "commit_step", "ask_person", "target_recompute"]:
    decision = state["decision"]
    if decision.get("widen"):
        return "draft_k"  # specguard-adaptive: draw the rest of the vote for this step
    if decision["accepted"]:
        return "commit_step"
    return "ask_person" if decision.get("ask") else "target_recompute"


def route_after_step(
    state: SpecGuardState, programs: StepSpec | None = None
) -> Literal["draft_k", "run_program", "__end__"]:
    if state.get("status"):
        return END
    steps = state.get("steps") or []
    if programs is not None and steps and steps[-1].get("source") != "tool":
        done = history(programs.delimiter, steps[:-1])
        if programs.program(done, steps[-1]["text"]) is not None:  # type: ignore[attr-defined]
            return "run_program"
    return "draft_k"


def route_after_ask(
    state: SpecGuardState,
) -> Literal["commit_step", "target_recompute", "draft_k", "__end__"]:
    if len(state.get("steps") or []) > state["decision"]["step"]:  # the person's edit is in
        return route_after_step(state)
    return "commit_step" if state["decision"]["accepted"] else "target_recompute"


def _check_model(role: str, model: object) -> None:
    missing = [m for m in _MODEL_METHODS if not callable(getattr(model, m, None))]
    if missing:
        raise ConfigError(
            f"{role} must be a step model (LocalCausalLM, CallableStepModel or the StepModel "
            f"protocol), got {type(model).__name__} without {', '.join(missing)}"
        )


def build_graph(
    draft: StepModel,
    target: StepModel,
    *,
    embedder: SentenceEmbedder | None = None,
    steps: StepSpec | None = None,
    config: SpecGuardConfig | None = None,
    executor: Callable[[str], Observation] | None = None,
) -> StateGraph:
    """The SpecGuard loop as an uncompiled StateGraph; compile it with your checkpointer.

    `config` is the default of every run; a run changes τ, β, k, the temperature or the step
    limits through its context: `graph.invoke(inputs, context={"tau": 0.3})`. With program
    steps (`steps=ProgramSteps()`) the graph gains check_program and run_program, and
    `executor` (default: a limited local `PythonExecutor`) runs the programs."""
    config = config or SpecGuardConfig()
    if not isinstance(config, SpecGuardConfig):
        raise ConfigError(f"config must be a SpecGuardConfig, got {type(config).__name__}")
    spec = steps or ReasoningSteps()
    if not isinstance(spec, StepSpec):
        raise ConfigError(f"steps must implement the StepSpec protocol, got {type(spec).__name__}")
    if not isinstance(spec.delimiter, str) or not spec.delimiter:
        raise ConfigError(f"steps.delimiter must be a non-empty string, got {spec.delimiter!r}")
    _check_model("draft", draft)
    _check_model("target", target)
    check_models(draft, target, embedder, config, exact_vote=hasattr(spec, "vote_key"))
    programs = spec if callable(getattr(spec, "program", None)) else None
    if programs is not None and executor is None:
        executor = PythonExecutor()
    deps = Deps(draft=draft, target=target, embedder=embedder, spec=spec, config=config,
                sessions=SessionStore(draft, target, spec),
                shared_vocab=shared_vocab(draft, target), executor=executor)  # fmt: skip
    g = StateGraph(
        SpecGuardState, context_schema=RunContext, input_schema=InputState,
        output_schema=OutputState,
    )  # fmt: skip
    for fn in (draft_k, select_consistent, score_grounding, score_logprob, decide, commit_step,
               ask_person, target_recompute):  # fmt: skip
        g.add_node(fn.__name__, partial(fn, deps=deps))
    g.add_edge(START, "draft_k")
    g.add_edge("draft_k", "select_consistent")
    g.add_edge("select_consistent", "score_grounding")
    g.add_edge("select_consistent", "score_logprob")
    verifiers = ["score_grounding", "score_logprob"]
    after_step = partial(route_after_step, programs=programs)
    if programs is not None:
        g.add_node("check_program", partial(check_program, deps=deps))
        g.add_node("run_program", partial(run_program, deps=deps))
        g.add_edge("select_consistent", "check_program")
        g.add_conditional_edges("run_program", route_after_step)
        verifiers.append("check_program")
    g.add_edge(verifiers, "decide")
    g.add_conditional_edges("decide", route_after_decide)
    g.add_conditional_edges("ask_person", route_after_ask)
    g.add_conditional_edges("commit_step", after_step, ["draft_k", "run_program", END]
                            if programs is not None else ["draft_k", END])  # fmt: skip
    g.add_conditional_edges("target_recompute", after_step, ["draft_k", "run_program", END]
                            if programs is not None else ["draft_k", END])  # fmt: skip
    return g
