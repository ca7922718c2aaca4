"""Answer grading with math-verify (symbolic and numeric equivalence), not string matching."""

from __future__ import annotations

from math_verify import parse, verify


def grade(predicted: str | None, gold: str) -> bool:
    if predicted is None or not predicted.strip():
        return False
    try:
        return bool(verify(parse(f"${gold}$"), parse(f"${predicted}$")))
    except Exception:  # math-verify raises on unparsable LaTeX: that answer is wrong
        return False
