"""Step-level speculative decoding (SpecGuard) as a LangGraph state machine.

The public names are imported lazily (PEP 562), so the model layer
(`specguard_graph.models.local.hf`) works with torch and transformers alone: a GPU box that has
no LangGraph or pydantic can still run `benchmarks/decode_speed.py`, and `import
specguard_graph` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import SpecGuardConfig
    from .context import RunContext
    from .errors import ConfigError, InputError, ModelLoadError, SpecGuardError
    from .graph import NODES, build_graph
    from .models.base import StepModel
    from .models.callable import CallableStepModel, StepOutput
    from .models.embedder import SentenceEmbedder
    from .models.local.hf import LocalCausalLM
    from .steps import (
        PlanSteps,
        ProgramSteps,
        ReasoningSteps,
        StepSpec,
        get_step_spec,
    )

_WHERE = {
    "SpecGuardConfig": ".config",
    "RunContext": ".context",
    "StepModel": ".models.base",
    "ConfigError": ".errors",
    "InputError": ".errors",
    "ModelLoadError": ".errors",
    "SpecGuardError": ".errors",
    "ChatSteps": ".agents.spec",
    "SpecGuardChatModel": ".agents.chat_model",
    "PlainChatModel": ".agents.plain",
    "chat_config": ".agents.chat_model",
    "chat_question": ".agents.spec",
    "NODES": ".graph",
    "build_graph": ".graph",
    "CallableStepModel": ".models.callable",
    "StepOutput": ".models.callable",
    "SentenceEmbedder": ".models.embedder",
    "LocalCausalLM": ".models.local.hf",
    "PlanSteps": ".steps",
    "ProgramSteps": ".steps",
    "ReasoningSteps": ".steps",
    "StepSpec": ".steps",
    "get_step_spec": ".steps",
}

__all__ = [
    "NODES",
    "CallableStepModel",
    "ChatSteps",
    "ConfigError",
    "InputError",
    "LocalCausalLM",
    "ModelLoadError",
    "PlainChatModel",
    "PlanSteps",
    "ProgramSteps",
    "ReasoningSteps",
    "RunContext",
    "SentenceEmbedder",
    "SpecGuardChatModel",
    "SpecGuardConfig",
    "SpecGuardError",
    "StepModel",
    "StepOutput",
    "StepSpec",
    "build_graph",
    "chat_config",
    "chat_question",
    "get_step_spec",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
