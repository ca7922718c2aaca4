"""build_graph: wiring only. Every behaviour lives in a node module."""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph

from .config import SpecGuardConfig
from .errors import ConfigError
from .models import CallableStepModel, LocalCausalLM, StepModel
from .models.embedder import SentenceEmbedder
from .nodes.common import Deps
from .nodes.decide import DecideNode
from .nodes.draft import DraftNode
from .nodes.grounding import GroundingNode
from .nodes.logprob import LogprobNode
from .nodes.select import SelectNode
from .nodes.target import TargetNode
from .runtime import SessionStore
from .state import InputState, OutputState, SpecGuardState
from .steps import ReasoningSteps, StepSpec

NODES = (
    "draft_k",
    "select_consistent",
    "score_grounding",
    "score_logprob",
    "decide",
    "target_recompute",
)


def route_after_decide(state: SpecGuardState) -> Literal["target_recompute", "draft_k", "__end__"]:
    if state["decision"].get("widen"):
        return "draft_k"  # specguard-adaptive: draw the rest of the vote for this step
    if not state["decision"]["accepted"]:
        return "target_recompute"
    return END if state.get("status") else "draft_k"


def route_after_target(state: SpecGuardState) -> Literal["draft_k", "__end__"]:
    return END if state.get("status") else "draft_k"


def _check_signals(draft: StepModel, target: StepModel, config: SpecGuardConfig) -> None:
    """Refuse configs that weigh a signal the backend cannot produce."""
    if config.signal_model == "target" and not isinstance(target, LocalCausalLM):
        raise ConfigError('signal_model="target" needs a local Hugging Face target')
    if config.signal_model == "draft" and isinstance(draft, CallableStepModel):
        if not draft.has_logprobs and not draft.has_attentions:
            raise ConfigError(f"{draft.name} gives neither log-probs nor attentions: no signal")
        if not draft.has_logprobs and config.beta > 0:
            raise ConfigError(f"{draft.name} gives no log-probs: set beta=0 (grounding only)")
        if not draft.has_attentions and config.beta < 1:
            raise ConfigError(f"{draft.name} gives no attentions: set beta=1 (log-probs only)")


def build_graph(
    draft: StepModel,
    target: StepModel,
    *,
    embedder: SentenceEmbedder | None = None,
    steps: StepSpec | None = None,
    config: SpecGuardConfig | None = None,
) -> StateGraph:
    """The SpecGuard loop as an uncompiled StateGraph; compile it with your checkpointer."""
    config = config or SpecGuardConfig()
    spec = steps or ReasoningSteps()
    if not isinstance(spec, StepSpec):
        raise ConfigError(f"steps must implement the StepSpec protocol, got {type(spec).__name__}")
    if config.k > 1 and embedder is None:
        raise ConfigError("k > 1 needs an embedder for the consistency vote (or set k=1)")
    _check_signals(draft, target, config)
    deps = Deps(
        draft=draft,
        target=target,
        embedder=embedder,
        spec=spec,
        config=config,
        sessions=SessionStore(draft, target, spec),
        shared_vocab=isinstance(draft, LocalCausalLM)
        and isinstance(target, LocalCausalLM)
        and draft.tokenizer.get_vocab() == target.tokenizer.get_vocab(),
    )
    g = StateGraph(SpecGuardState, input_schema=InputState, output_schema=OutputState)
    g.add_node("draft_k", DraftNode(deps))
    g.add_node("select_consistent", SelectNode(deps))
    g.add_node("score_grounding", GroundingNode(deps))
    g.add_node("score_logprob", LogprobNode(deps))
    g.add_node("decide", DecideNode(deps))
    g.add_node("target_recompute", TargetNode(deps))
    g.add_edge(START, "draft_k")
    g.add_edge("draft_k", "select_consistent")
    g.add_edge("select_consistent", "score_grounding")
    g.add_edge("select_consistent", "score_logprob")
    g.add_edge(["score_grounding", "score_logprob"], "decide")
    g.add_conditional_edges("decide", route_after_decide)
    g.add_conditional_edges("target_recompute", route_after_target)
    return g
