"""Cheap checks on a draft step's text that send it to the target whatever its score.

One table, read by the `decide` node (the live `reject_*` options) and by the evidence rules
(scored offline on the bench records), so the rule benched is the rule measured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .arithmetic import false_equation
from .config import SpecGuardConfig
from .steps import writes_output

Check = Callable[[Mapping[str, Any]], str | None]  # a candidate -> why it is refused, or None


def _fabricated_output(cand: Mapping[str, Any]) -> str | None:
    if writes_output(cand.get("text", "")):
        return "writes a program output nothing executed"
    return None


def _false_arithmetic(cand: Mapping[str, Any]) -> str | None:
    eq = false_equation(cand.get("text", ""), cut=cand.get("ended") == "length")
    return f"states a false equation: {eq}" if eq else None


# config option -> its check, in the order `refusal` applies them
REFUSALS: dict[str, Check] = {
    "reject_fabricated_output": _fabricated_output,
    "reject_false_arithmetic": _false_arithmetic,
}


def refusal(config: SpecGuardConfig, cand: Mapping[str, Any]) -> str | None:
    """Why the candidate is refused under the options `config` turns on (None: it is not)."""
    return next((why for option, check in REFUSALS.items()
                 if getattr(config, option) and (why := check(cand))), None)  # fmt: skip
