"""`specguard view TRACES.jsonl -o run.html`: the run page from saved traces or bench records."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import InputError, SpecGuardError
from ..view import as_trace
from .common import err, fail


def write_page(traces: list[dict[str, Any]], out: Path) -> None:
    from ..view import page

    try:
        out.write_text(page(traces), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None


def view(
    traces: Annotated[Path, typer.Argument(help="JSONL from `solve --out` or a bench method")],
    out: Annotated[Path, typer.Option("-o", "--out", help="the HTML page to write")] = Path(
        "run.html"
    ),
    index: Annotated[int | None, typer.Option(help="only the N-th run (0-based)")] = None,
) -> None:
    """Write one self-contained HTML page showing why each step was accepted or recomputed."""
    from .. import jsonl

    try:
        runs = [as_trace(obj) for _, obj in jsonl.objects(traces, ())]
        if not runs:
            raise InputError(f"{traces}: no runs")
        if index is not None:
            if not 0 <= index < len(runs):
                raise InputError(f"--index {index}: {traces} holds {len(runs)} runs")
            runs = [runs[index]]
        write_page(runs, out)
        err.print(f"wrote {out} ({len(runs)} run{'s' if len(runs) != 1 else ''})", markup=False)
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
