"""The graph LangGraph Studio serves (`langgraph dev`, see langgraph.json).

Imports are absolute: the server loads this file by path, not as part of the package.

Models load once, at import, from the configured paths or the embedded defaults:
  SPECGUARD_STUDIO_MODELS=tiny          the offline tiny models (tests, quick looks)
  SPECGUARD_DRAFT / SPECGUARD_TARGET / SPECGUARD_EMBEDDER   model paths (dirs or .gguf; the
      draft may be distilled:NAME, docs/models.md)
  SPECGUARD_CONFIG                      a SpecGuardConfig JSON file
  SPECGUARD_STEPS                       reasoning | program | plan
The exported graph has no checkpointer: the server brings its own. τ, β, k, the temperature
and the step limits can change per run: Studio shows them as the run's context (RunContext).
"""

from __future__ import annotations

import os

from specguard_graph.config import SpecGuardConfig
from specguard_graph.graph import build_graph
from specguard_graph.steps import get_step_spec


def _models():
    if os.environ.get("SPECGUARD_STUDIO_MODELS") == "tiny":
        from specguard_graph.testing import tiny_models

        m = tiny_models()
        return m.draft, m.target, m.embedder
    from specguard_graph.models.loading import load_embedder, load_lm

    return (
        load_lm("draft", os.environ.get("SPECGUARD_DRAFT")),
        load_lm("target", os.environ.get("SPECGUARD_TARGET")),
        load_embedder(os.environ.get("SPECGUARD_EMBEDDER")),
    )


_config = (
    SpecGuardConfig.from_file(os.environ["SPECGUARD_CONFIG"])
    if os.environ.get("SPECGUARD_CONFIG")
    else SpecGuardConfig()
)
_draft, _target, _embedder = _models()
graph = build_graph(
    _draft,
    _target,
    embedder=_embedder,
    steps=get_step_spec(os.environ.get("SPECGUARD_STEPS", "reasoning")),
    config=_config,
).compile(name="specguard")
