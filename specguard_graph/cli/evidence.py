"""`specguard evidence RESULTS_DIR`: how well each signal separates good steps from bad ones."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..errors import SpecGuardError
from .common import Quantize, QuantizeOpt, TargetPath, err, fail

AnnotateOpt = Annotated[
    bool,
    typer.Option(
        "--annotate",
        help="first compute the target's log-probs and 0–9 rating of every draft step "
        "(loads the target; resumable)",
    ),
]
ValueOpt = Annotated[
    int,
    typer.Option(
        "--value",
        help="first label the steps of this many problems per method with the target's "
        "greedy continuation with and without each step (a served target works; resumable)",
        min=0,
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        help="the report's path (default RESULTS/evidence.md), so that reports on other "
        "methods do not overwrite it; the ROC plot goes beside it as <name>_roc.png",
        dir_okay=False,
    ),
]


def _annotate(results: Path, names: list[str] | None, target: str | None,
              quantize: Quantize) -> None:  # fmt: skip
    from rich.progress import MofNCompleteColumn, Progress, TimeRemainingColumn

    from ..evidence.annotate import annotate
    from ..models.loading import load_lm

    with err.status("loading the target…"):
        lm = load_lm("target", target, quantize=quantize.value)  # type: ignore[arg-type]
    if not getattr(lm, "can_score", False):
        raise SpecGuardError("--annotate needs a local target that scores text, not a server")
    with Progress(*Progress.get_default_columns()[:2], MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err) as progress:  # fmt: skip
        task = progress.add_task("annotating problems", total=None)
        annotate(results, lm, names, lambda d, t: progress.update(task, completed=d, total=t))


def _value(results: Path, names: list[str] | None, target: str | None, quantize: Quantize,
           problems: int) -> None:  # fmt: skip
    from rich.progress import MofNCompleteColumn, Progress, TimeRemainingColumn

    from ..evidence.value import label_values
    from ..models.loading import load_lm

    with err.status("loading the target…"):
        lm = load_lm("target", target, quantize=quantize.value)  # type: ignore[arg-type]
    with Progress(*Progress.get_default_columns()[:2], MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err) as progress:  # fmt: skip
        task = progress.add_task("value labels", total=None)
        label_values(results, lm, methods=names, problems=problems,
                     progress=lambda d, t: progress.update(task, completed=d, total=t))  # fmt: skip


def evidence(
    results: Annotated[Path, typer.Argument(help="a `specguard bench --out` directory")],
    methods: Annotated[
        str | None, typer.Option(help="comma-separated methods (default: every JSONL there)")
    ] = None,
    draws: Annotated[int, typer.Option(help="bootstrap resamples of problems", min=100)] = 1000,
    annotate: AnnotateOpt = False,
    value: ValueOpt = 0,
    target: TargetPath = None,
    quantize: QuantizeOpt = Quantize.auto,
    out: OutOpt = None,
) -> None:
    """AUROC [95 % CI] of every signal against every step label; writes evidence.md and
    evidence_roc.png into RESULTS, or where --out says."""
    from ..evidence.report import plot, table, units

    try:
        if not results.is_dir():
            raise SpecGuardError(f"{results} is not a results directory")
        names = [m.strip() for m in methods.split(",")] if methods else None
        if annotate:
            _annotate(results, names, target, quantize)
        if value:
            _value(results, names, target, quantize, value)
        problems = units(results, names)
        md, curves = table(problems, draws=draws)
        steps = sum(len(rows) for _, rows in problems)
        text = (
            f"Reproduce: `specguard evidence {results}"
            f"{f' --methods {methods}' if methods else ''}{f' --out {out}' if out else ''}`\n\n"
            f"{steps} scored draft steps from {len(problems)} (method, problem) runs; cell: AUROC "
            "[95 % bootstrap CI over problems] (good / bad steps); 0.5 is chance.\n\n" + md
        )
        from ..evidence import rules
        from ..evidence.report import LABELS, SIGNALS

        fitted = rules.held_out_scores(problems, SIGNALS, LABELS)
        if fitted:
            text += (
                "\nDecision rules scored on problems they were not fitted on (5-fold "
                "cross-validation over problems, held-out scores pooled): AUROC [95 % bootstrap "
                "CI, resampling problems of the held-out scores; the fit is not repeated, so a "
                "fitted rule's interval leaves out the fit's own variance].\n\n"
                + rules.markdown(fitted, draws=draws)
            )
        from ..evidence import gate

        cost = gate.markdown(problems, SIGNALS)
        text += f"\n{cost}" if cost else ""
        md_path = out or results / "evidence.md"
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(text)
        plot(curves, md_path.with_name(f"{md_path.stem}_roc.png"))
        Console().print(text, markup=False, highlight=False)
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
