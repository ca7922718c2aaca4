"""Step-level speculative decoding (SpecGuard) as a LangGraph state machine."""

from .config import SpecGuardConfig
from .errors import ConfigError, InputError, ModelLoadError, SpecGuardError
from .graph import NODES, build_graph
from .models.callable import CallableStepModel, StepOutput
from .models.embedder import SentenceEmbedder
from .models.hf import LocalCausalLM
from .steps import PlanSteps, ReasoningSteps, StepSpec, ToolCallSteps, get_step_spec

__all__ = [
    "NODES",
    "CallableStepModel",
    "ConfigError",
    "InputError",
    "LocalCausalLM",
    "ModelLoadError",
    "PlanSteps",
    "ReasoningSteps",
    "SentenceEmbedder",
    "SpecGuardConfig",
    "SpecGuardError",
    "StepOutput",
    "StepSpec",
    "ToolCallSteps",
    "build_graph",
    "get_step_spec",
]
