"""Answer grading with math-verify (symbolic and numeric equivalence), not string matching."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from math_verify import parse, verify


def grade(predicted: str | None, gold: str) -> bool:
    if predicted is None or not predicted.strip():
        return False
    try:
        return bool(verify(parse(f"${gold}$"), parse(f"${predicted}$")))
    except Exception:  # math-verify raises on unparsable LaTeX: that answer is wrong
        return False


def grade_problem(problem: Mapping[str, Any], result: dict[str, Any]) -> bool:
    """A problem's own grader: BFCL's checker for function calls (its verdict is kept in the
    record as `bfcl`), math-verify for everything else."""
    if problem.get("grader") == "bfcl":
        from .bfcl import grade as bfcl_grade

        verdict = bfcl_grade(problem["answer"], problem["question"], result.get("text") or "")
        result["bfcl"] = verdict
        return bool(verdict["valid"])
    if problem.get("grader") == "bfcl-multi":
        from .bfcl.multi_turn import grade as multi_grade

        result["bfcl"] = multi_grade(problem["answer"], problem["question"], result)
        return bool(result["bfcl"]["valid"])
    return grade(result["answer"], problem["answer"])
