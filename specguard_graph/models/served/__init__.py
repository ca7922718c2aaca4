"""Served models behind an OpenAI-compatible endpoint (llama.cpp, vLLM, SGLang): the client,
its log-prob parsing, chat templates, verification by prompt log-probs, and the child servers
the project starts itself."""

from .client import ServedStepModel, is_served

__all__ = ["ServedStepModel", "is_served"]
