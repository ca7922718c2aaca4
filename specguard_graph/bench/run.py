"""The resumable benchmark loop: one JSONL per method, fsynced per problem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..results import ResultLog
from .data import Problem
from .grade import grade

Report = Callable[[str, int, int], None]  # (method, done, total)


def run(
    problems: list[Problem],
    solvers: dict[str, Callable[[str], dict[str, Any]]],
    out_dir: Path,
    progress: Report = lambda m, d, t: None,
) -> None:
    """Solve every problem with every method; finished ones are skipped on a rerun."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for method, solve in solvers.items():
        log = ResultLog(out_dir / f"{method}.jsonl", key="id")
        done = log.done()
        todo = [p for p in problems if p["id"] not in done]
        progress(method, len(problems) - len(todo), len(problems))
        for p in todo:
            result = solve(p["question"])
            result.update(
                id=p["id"], gold=p["answer"], correct=grade(result["answer"], p["answer"])
            )
            log.append(result)
            done[p["id"]] = result
            progress(method, len(done), len(problems))
