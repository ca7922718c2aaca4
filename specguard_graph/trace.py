"""The JSON trace of one run, exactly as docs/design.md's contract names its keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STEP_KEYS = (
    "index", "text", "source", "grounding", "logprob", "score", "accepted", "candidates", "cut",
)  # fmt: skip
DETAIL_KEYS = ("reason", "draft_text", "selected", "candidate_signals", "detail", "spent",
               "time_s", "tau", "dropped", "fallback", "verified")  # fmt: skip
TIMING_KEYS = ("total_s", "draft_s", "verify_s", "target_s")
COUNT_KEYS = ("steps", "target_steps", "draft_tokens", "target_tokens")


def _step(s: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: s.get(k) for k in STEP_KEYS}
    if s.get("observation") is not None:  # a program step's real run (ProgramSteps)
        out["observation"] = s["observation"]
    return out


def to_trace(result: Mapping[str, Any]) -> dict[str, Any]:
    """The contract's object from a graph result (plus `status`, so a cut run says so)."""
    timing = result.get("timing") or {}
    counts = result.get("counts") or {}
    return {
        "question": result.get("question"),
        "answer": result.get("answer"),
        "text": result.get("text", ""),
        "status": result.get("status"),
        "steps": [_step(s) for s in result.get("steps") or []],
        "timing": {k: round(float(timing.get(k, 0.0)), 4) for k in TIMING_KEYS},
        # what the run view needs beyond the contract: per step, why and per token
        "detail": [{k: s.get(k) for k in DETAIL_KEYS} for s in result.get("steps") or []],
        "counts": {k: int(counts.get(k, 0)) for k in COUNT_KEYS},
    }
