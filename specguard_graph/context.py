"""Per-run settings: LangGraph's runtime context (`invoke(..., context={"tau": 0.3})`).

The graph is compiled once with a build-time `SpecGuardConfig` (the defaults); a run may
change the knobs below without rebuilding it, and LangGraph Studio shows them as the run's
configuration. Every per-run config is validated like a built one, including the checks that
the models can produce what it asks for.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .config import SpecGuardConfig
from .errors import ConfigError
from .models import StepModel
from .models.embedder import SentenceEmbedder

_DEFAULT = " (unset: the graph's build-time config)"


class RunContext(BaseModel):
    """What one run may change; None keeps the value the graph was built with."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    k: int | None = Field(None, description="draft candidates sampled per step" + _DEFAULT)
    tau: float | None = Field(None, description="accept threshold on the score" + _DEFAULT)
    beta: float | None = Field(None, description="weight of the log-prob signal" + _DEFAULT)
    temperature: float | None = Field(None, description="draft temperature" + _DEFAULT)
    top_p: float | None = Field(None, description="draft nucleus mass" + _DEFAULT)
    seed: int | None = Field(None, description="base seed; step i uses seed + i" + _DEFAULT)
    max_steps: int | None = Field(None, description="stop after this many steps" + _DEFAULT)
    max_step_tokens: int | None = Field(None, description="cut a step here" + _DEFAULT)
    max_total_tokens: int | None = Field(None, description="stop at this length" + _DEFAULT)


def check_models(
    draft: StepModel,
    target: StepModel,
    embedder: SentenceEmbedder | None,
    cfg: SpecGuardConfig,
    *,
    exact_vote: bool = False,
) -> None:
    """Refuse a config that needs what the models cannot give (before anything runs).
    `exact_vote`: the steps vote on an exact form (tool calls), so k > 1 needs no embedder."""
    if cfg.k > 1 and embedder is None and not exact_vote:
        raise ConfigError("k > 1 needs an embedder for the consistency vote (or set k=1)")
    if cfg.signal_model == "target" and not target.can_score:
        raise ConfigError(
            f'signal_model="target" needs a target that scores given steps, such as a local '
            f"Hugging Face target or a vLLM-served one ({target.name} cannot)"
        )
    if cfg.signal_model == "target" and not target.has_attentions and cfg.beta < 1:
        raise ConfigError(f"{target.name} gives no attentions: set beta=1 (log-probs only)")
    if cfg.signal_model != "draft":
        return
    if not draft.has_logprobs and not draft.has_attentions:
        raise ConfigError(f"{draft.name} gives neither log-probs nor attentions: no signal")
    if not draft.has_logprobs and cfg.beta > 0:
        raise ConfigError(f"{draft.name} gives no log-probs: set beta=0 (grounding only)")
    if not draft.has_attentions and cfg.beta < 1:
        raise ConfigError(f"{draft.name} gives no attentions: set beta=1 (log-probs only)")


def for_run(
    base: SpecGuardConfig,
    context: RunContext | None,
    models: tuple[StepModel, StepModel, SentenceEmbedder | None],
    *,
    exact_vote: bool = False,
) -> SpecGuardConfig:
    """The build-time config with this run's settings applied, validated and checked."""
    if context is None:
        return base
    if not isinstance(context, RunContext):
        raise ConfigError(f"context must be a RunContext or a dict, got {type(context).__name__}")
    changes = context.model_dump(exclude_none=True)
    if not changes:
        return base
    cfg = base.replace(**changes)
    check_models(*models, cfg, exact_vote=exact_vote)
    return cfg
