"""Run configuration: one validated, JSON-serialisable object shared by every node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import ConfigError


class SpecGuardConfig(BaseModel):
    """Knobs of the SpecGuard loop.

    Defaults follow docs/design.md (k = 4, β = 0.3, last 3 layers, 0.01 sparsification).
    The normalisation ranges are fixed per model pair (fit them with a calibration run),
    never min-max over the k candidates: that would let the best of k bad steps pass.
    """

    # strict: `{"max_steps": true}` or `{"tau": "0.5"}` is an error, not 1 or 0.5
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    k: int = Field(4, ge=1, le=64, description="draft candidates sampled per step")
    temperature: float = Field(
        0.7, ge=0.0, le=5.0, description="draft sampling temperature; 0 means greedy"
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="draft nucleus sampling mass")
    beta: float = Field(0.3, ge=0.0, le=1.0, description="weight of the log-prob signal")
    tau: float = Field(
        0.5,
        ge=0.0,
        description="accept threshold on the combined score, which lies in [0, 1]; above 1 no "
        "step passes: every step is the target's (verified, lossless with fallback=verify)",
    )
    grounding_layers: int = Field(3, ge=1, le=256, description="last decoder layers used")
    sparsify: float = Field(0.01, ge=0.0, lt=1.0, description="attention below this is zeroed")
    grounding_range: tuple[float, float] = Field(
        (0.0, 0.875), description="ABGV values mapped to 0 and 1 (0.875 = 1 - 0.5^3)"
    )
    logprob_range: tuple[float, float] = Field(
        (-10.0, 0.0), description="LPBV values mapped to 0 and 1"
    )
    signal_model: Literal["draft", "target"] = Field(
        "draft", description="whose attention and log-probs score the step"
    )
    max_steps: int = Field(48, ge=1, description="stop after this many steps")
    max_step_tokens: int = Field(160, ge=2, description="a step is cut after this many tokens")
    max_total_tokens: int = Field(
        2048, ge=2, description="stop once the models wrote this many tokens (not program output)"
    )
    seed: int = Field(0, ge=0, description="base seed; step i samples with seed + i")
    adaptive_band: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="draw one candidate first; draw the other k - 1 for the vote only when "
        "its score is within this distance of tau (None: always draw k at once)",
    )
    reject_failed_programs: bool = Field(
        True,
        description="program steps: a draft step whose program raises, times out or prints "
        "nothing (or that writes its own output) is recomputed by the target, whatever its score",
    )
    reject_fabricated_output: bool = Field(
        False,
        description="any steps: a draft step that writes a program's output block itself (a "
        "result nothing executed) is recomputed by the target, whatever its score",
    )
    reject_false_arithmetic: bool = Field(
        False,
        description="any steps: a draft step that states an equation that does not hold "
        "(`48 / 2 = 25`, LaTeX included) is recomputed by the target, whatever its score",
    )
    fallback: Literal["verify", "rewrite"] = Field(
        "verify",
        description="a rejected step: the target verifies the draft's candidate and goes on as "
        "speculative decoding (the same text, fewer target forwards; a local row-invariant "
        "target) or rewrites it token by token (any backend; used where verify cannot run)",
    )
    interrupt_on_reject: bool = Field(
        False,
        description="pause on a rejected draft step; resume with accept, recompute or an edit",
    )
    stop_doomed: bool = Field(
        True,
        description="stop drafting a step at the token whose log-prob leaves it no way to reach "
        "tau (τ > 1 - β; one greedy-scored candidate, draft signals): the target verifies what "
        "was drafted. Off: rejected steps are drafted whole, their signals complete",
    )

    @model_validator(mode="after")
    def _check_ranges(self) -> SpecGuardConfig:
        g_lo, g_hi = self.grounding_range
        if not 0.0 <= g_lo < g_hi <= 1.0:
            raise ValueError(f"grounding_range must satisfy 0 <= lo < hi <= 1, got {g_lo, g_hi}")
        l_lo, l_hi = self.logprob_range
        if not l_lo < l_hi <= 0.0:
            raise ValueError(f"logprob_range must satisfy lo < hi <= 0, got {l_lo, l_hi}")
        if self.max_step_tokens > self.max_total_tokens:
            raise ValueError("max_step_tokens must not exceed max_total_tokens")
        return self

    @classmethod
    def make(cls, **values: object) -> SpecGuardConfig:
        """Build a config, turning pydantic's multi-line report into one-line ConfigErrors."""
        for name in ("grounding_range", "logprob_range"):  # JSON has lists, not tuples
            if isinstance(values.get(name), list):
                values[name] = tuple(values[name])
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValidationError as exc:
            raise ConfigError(_one_line(exc)) from None

    @classmethod
    def from_file(cls, path: str | Path) -> SpecGuardConfig:
        """Read a config written by `to_file` (or by hand) as JSON."""
        try:
            data = json.loads(Path(path).read_bytes().decode("utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"config {path} is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config {path} is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} must hold a JSON object, got {type(data).__name__}")
        return cls.make(**data)

    def to_file(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2) + "\n")

    def replace(self, **changes: object) -> SpecGuardConfig:
        """A validated copy with some fields changed (model_copy skips validation)."""
        return self.make(**{**self.model_dump(), **changes})


def _one_line(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        parts.append(f"{loc}: {err['msg']}")
    return "invalid config: " + "; ".join(parts)
