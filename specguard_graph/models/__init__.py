"""Model backends: local Hugging Face LMs and user callables behind one interface."""

from .callable import CallableStepModel, StepOutput
from .hf import LocalCausalLM

StepModel = LocalCausalLM | CallableStepModel

__all__ = ["CallableStepModel", "LocalCausalLM", "StepModel", "StepOutput"]
