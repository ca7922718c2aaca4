"""`specguard distill problems | evaluate`: the draft learns the target (issue 74; training and
install are not built yet)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from ..errors import SpecGuardError
from .common import err, fail, out

distill_app = typer.Typer(
    no_args_is_help=True, help="Data and measurements for a draft that learns the target."
)


@distill_app.command("problems")
def distill_problems(
    out_file: Annotated[Path, typer.Option("--out", help="JSONL to write")],
    count: Annotated[int, typer.Option(min=1, help="how many problems")] = 1400,
    seed: Annotated[int, typer.Option(help="generator seed")] = 1,
) -> None:
    """Write training problems disjoint from every evaluation set (distill/data.py); the target
    answers them with `specguard bench --data OUT --methods target` (resumable)."""
    try:
        from ..bench.data import gsm8k_100
        from ..distill.data import fresh_problems, overlap, write_problems

        problems = fresh_problems(count, seed)
        if clash := overlap(problems, gsm8k_100()):
            raise fail(f"{len(clash)} problems are gsm8k-100 questions: {clash[:3]}")
        write_problems(problems, out_file)
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
    err.print(f"wrote {count} problems to {out_file}", markup=False)


@distill_app.command("evaluate")
def distill_evaluate(
    records: Annotated[Path, typer.Option(help="the target's answers: a bench JSONL")],
    model: Annotated[str, typer.Option(help="draft | target | a model dir or .gguf")] = "draft",
    limit: Annotated[int | None, typer.Option(min=1, help="first N records")] = None,
) -> None:
    """Teacher-forced on the target's answers: the share of positions where MODEL's argmax is
    the target's token, of whole steps it writes as the target did, and its mean agreeing run."""
    try:
        from .. import jsonl
        from ..distill.agreement import agreement
        from ..models.loading import load_lm

        rows = [r for _, r in jsonl.objects(records, ("question", "text"))][:limit]
        lm = load_lm(model) if model in ("draft", "target") else load_lm("draft", model)
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("scoring answers", total=len(rows))

            def counted():
                for r in rows:
                    yield r
                    progress.advance(task)

            result = agreement(lm, counted())
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
    out.print(json.dumps({"records": str(records), "model": model, "answers": len(rows),
                          **result}), markup=False, soft_wrap=True)  # fmt: skip
