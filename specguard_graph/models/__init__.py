"""Model backends: local Hugging Face LMs and user callables behind one protocol."""

from .base import Candidate, PrefixCache, Sample, StepModel, shared_vocab
from .callable import CallableStepModel, StepOutput
from .local.hf import LocalCausalLM

__all__ = [
    "CallableStepModel",
    "Candidate",
    "LocalCausalLM",
    "PrefixCache",
    "Sample",
    "StepModel",
    "StepOutput",
    "shared_vocab",
]
