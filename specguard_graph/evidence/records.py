"""What the evidence reads from a results directory, and the label files it writes beside the
records: which JSONL files hold a method's records, which candidate of a step was scored, and
one resumable fill-and-load for every per-step label file (`annotate.py`, `value.py`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..results import ResultLog

LABELS = "_labels.jsonl"  # label files end so; every other JSONL there is a method's records
Progress = Callable[[int, int], None]
Record = dict[str, Any]


def result_files(results_dir: Path, methods: list[str] | None) -> list[Path]:
    return [f for f in sorted(results_dir.glob("*.jsonl"))
            if not f.name.endswith(LABELS) and (not methods or f.stem in methods)]  # fmt: skip


def scored_candidate(step: Record) -> Record | None:
    """The selected draft candidate of a step, whatever replaced it (None: none was scored)."""
    cands, sel = step.get("candidate_signals") or [], step.get("selected")
    return cands[sel] if cands and sel is not None and sel < len(cands) else None


def texts_by_problem(results_dir: Path) -> dict[str, list[str]]:
    """Every finished record's final text, by problem id, across all methods."""
    out: dict[str, list[str]] = {}
    for f in result_files(results_dir, None):
        for rec in ResultLog(f, key="id").done().values():
            if rec.get("text"):
                out.setdefault(str(rec["id"]), []).append(str(rec["text"]))
    return out


def fill(results_dir: Path, file: str, methods: list[str] | None,
         label: Callable[[Record], dict[str, Any]], *, wanted: Callable[[Record], bool],
         limit: int | None = None,
         progress: Progress = lambda done, total: None) -> Path:  # fmt: skip
    """Append `label(record)` to `file` for every finished record with step records (the first
    `limit` per method) that `wanted` accepts and `file` does not hold yet."""
    log = ResultLog(results_dir / file, key="key")
    done = log.done()
    todo = []
    for f in result_files(results_dir, methods):
        recs = [r for r in ResultLog(f, key="id").done().values() if r.get("step_records")]
        for rec in recs[:limit]:
            key = f"{f.stem}/{rec['id']}"
            if wanted(rec) and key not in done:
                todo.append((key, rec))
    for n, (key, rec) in enumerate(todo):
        log.append({"key": key, "steps": label(rec)})
        progress(n + 1, len(todo))
    return results_dir / file


def load(results_dir: Path, file: str) -> dict[str, dict[str, Any]]:
    """{"method/id": {step index: labels}} (empty when the file is not there)."""
    path = results_dir / file
    if not path.exists():
        return {}
    return {k: v.get("steps") or {} for k, v in ResultLog(path, key="key").done().items()}
