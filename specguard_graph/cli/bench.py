"""`specguard bench`: methods side by side on one problem set, resumable."""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..errors import ConfigError, SpecGuardError
from .common import (
    DraftModel,
    DraftPath,
    EmbedderPath,
    Quantize,
    QuantizeOpt,
    TargetModel,
    TargetPath,
    err,
    fail,
    load_config,
    load_models,
)


class Dataset(StrEnum):  # the named problem sets (`bench` also takes bfcl:CATEGORIES)
    gsm8k = "gsm8k"
    gsm_symbolic = "gsm-symbolic"
    champ = "champ"


SdTarget = Annotated[
    str | None,
    typer.Option(
        help="served target with its engine's own draft-model SD, for `sd` "
        "(`specguard models serve target --speculative`)"
    ),
]
ReportOnly = Annotated[
    bool, typer.Option("--report-only", help="summarise what --out holds, run nothing")
]
KeepPrompts = Annotated[
    bool,
    typer.Option(
        help="each method keeps its models' prompts from problem to problem (a deployed "
        "agent's cached system prompt and tools); default: every problem starts cold"
    ),
]
HtmlDir = Annotated[
    Path | None,
    typer.Option(help="also write a run page per problem and method, and an index.html"),
]


def _check_outputs(out: Path, names: list[str], html_dir: Path | None) -> None:
    """Everything the run will write can be written: checked before hours of solving."""
    from ..bench.run import check_out

    check_out(out, names)
    if html_dir is not None:
        from ..bench.pages import check_html_dir

        check_html_dir(html_dir)


def bench(
    dataset: Annotated[
        str,
        typer.Option(
            help="gsm8k (the 100 original test problems) | gsm-symbolic | champ | "
            "bfcl[-fc][-dev]:CATEGORY[,...] (function calls, graded by BFCL) | "
            "bfcl-multi[-dev] (an agent over BFCL's multi-turn tasks)"
        ),
    ] = "gsm8k",
    data: Annotated[Path | None, typer.Option(help="JSONL of {question, answer} instead")] = None,
    limit: Annotated[int | None, typer.Option(help="first N problems")] = None,
    offset: Annotated[int, typer.Option(help="skip the first N problems")] = 0,
    seed: Annotated[int, typer.Option(help="seed of generated problems (gsm-symbolic)")] = 0,
    methods: Annotated[
        str, typer.Option(help="comma-separated methods; SpecGuard ones take @field=value")
    ] = "target,sd,specguard-greedy,specguard",
    taus: Annotated[
        str | None,
        typer.Option(help="comma-separated τ values: run each SpecGuard method at each"),
    ] = None,
    out: Annotated[Path, typer.Option(help="results directory (resumable)")] = Path(
        "benchmarks/results"
    ),
    config: Annotated[Path | None, typer.Option(help="SpecGuardConfig JSON")] = None,
    max_tokens: Annotated[int, typer.Option(help="token budget per problem")] = 512,
    draft: DraftPath = None,
    target: TargetPath = None,
    embedder: EmbedderPath = None,
    draft_model: DraftModel = None,
    target_model: TargetModel = None,
    sd_target: SdTarget = None,
    quantize: QuantizeOpt = Quantize.auto,
    report_only: ReportOnly = False,
    html_dir: HtmlDir = None,
    keep_prompts: KeepPrompts = False,
) -> None:
    """Run methods side by side on the same problems; write JSONL, summary.md and a plot."""
    try:
        names = _methods(methods, taus, dataset)
        _check_outputs(out, names, html_dir)
        if not report_only:
            models = {"paths": (draft, target, embedder), "names": (draft_model, target_model),
                      "sd_target": sd_target, "quantize": quantize,
                      "keep_prompts": keep_prompts}  # fmt: skip
            _run(names, dataset, data, limit, offset, seed, config, max_tokens, out, models)
        summary = _summary(out, names, taus, config, dataset)
        Console().print(summary, markup=False, highlight=False, soft_wrap=True)
        if html_dir is not None:
            from ..bench.pages import write_pages

            err.print(f"wrote {write_pages(out, names, html_dir)}", markup=False)
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise fail(f"interrupted: finished results are kept in {out}", 130) from None


def _summary(out: Path, names: list[str], taus: str | None, config: Path | None,
             dataset: str | None) -> str:  # fmt: skip
    """summary.md (and a multi-turn run's own report, multi-turn.md): the text to print."""
    from ..bench.bfcl import multi_report
    from ..bench.bfcl.multi_turn import is_multi_turn
    from ..bench.report import write_summary

    # the command as typed: `specguard bench ...`, or the one that ran the bench for it
    # (`specguard distill collect | run`), which resumes the same way
    command = "specguard " + " ".join(a for a in sys.argv[1:] if a != "--report-only")
    base_tau = load_config(config, {}).tau
    text = write_summary(out, names, command, sweep=bool(taus), base_tau=base_tau)
    if is_multi_turn(dataset):
        text = multi_report.markdown(multi_report.summary(multi_report.load(out, names)))
        (out / "multi-turn.md").write_text(text)
    return text


def _methods(methods: str, taus: str | None, dataset: str | None = None) -> list[str]:
    """The method list, each SpecGuard method expanded to one point per τ of a sweep; for a
    multi-turn dataset, only methods an agent can run as its model."""
    from ..bench import methods as bench_methods
    from ..bench.bfcl.multi_turn import check_names, is_multi_turn

    names = [m.strip() for m in methods.split(",") if m.strip()]
    if is_multi_turn(dataset):
        check_names(names)
    unknown = [m for m in names if m.partition("@")[0] not in bench_methods.METHODS]
    if unknown:
        raise ConfigError(
            f"unknown method(s) {', '.join(unknown)}; known: " + ", ".join(bench_methods.METHODS)
        )
    if taus:
        try:
            values = [float(t) for t in taus.split(",") if t.strip()]
        except ValueError:
            raise ConfigError(f"--taus: expected comma-separated numbers, got {taus!r}") from None
        names = list(dict.fromkeys(bench_methods.with_tau(m, t) for m in names for t in values))
    for name in names:
        bench_methods.parse(name)  # bad overrides fail here, before any model loads
    return names


def _run(names, dataset, data, limit, offset, seed, config, max_tokens, out,
         models):  # type: ignore[no-untyped-def]  # fmt: skip
    """Load the models once and run every method on every problem (resumable)."""
    from ..bench import data as bench_data
    from ..bench import methods as bench_methods
    from ..bench.run import prompt_stores, run, weights
    from ..models.loading import requested_quantize

    problems = bench_data.load(dataset, data=data, limit=limit, offset=offset, seed=seed)
    base = load_config(config, {})
    d, t, e = load_models(models["paths"], quantize=models["quantize"], need_embedder=True,
                          names=models["names"])  # fmt: skip
    sd_target = None
    if models["sd_target"] is not None and "sd" in names:
        from ..models.served.client import ServedStepModel, is_served

        if not is_served(models["sd_target"]):
            raise ConfigError(f"--sd-target {models['sd_target']!r}: expected an http(s) URL "
                              "ending in /v1")  # fmt: skip
        sd_target = ServedStepModel(models["sd_target"])
    steps = None
    from ..bench.bfcl import is_bfcl

    if is_bfcl(dataset):
        from ..agents.spec import ChatSteps

        steps = ChatSteps()
    from ..bench.bfcl import multi_turn

    if multi_turn.is_multi_turn(dataset):  # an agent over several turns per task
        solvers = multi_turn.solvers(names, d, t)
    else:
        solvers = {m: bench_methods.make(m, d, t, e, base, max_tokens, sd_target, steps)
                   for m in names}  # fmt: skip
    from ..machine import describe

    err.print(describe(), markup=False, highlight=False, soft_wrap=True)  # whose kernels
    with Progress(
        TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=err,
    ) as progress:  # fmt: skip
        before = prompt_stores(d, t, keep=models["keep_prompts"])
        named = requested_quantize(models["quantize"].value) != "auto"
        run(problems, solvers, out, _reporter(progress, len(names)), before=before,
            loaded=(weights(d, t), named))  # fmt: skip


def _reporter(progress: Progress, n_methods: int):  # type: ignore[no-untyped-def]
    """Progress per method; one line per finished problem when stderr is a log file."""
    tasks: dict[str, Any] = {}
    start, at_start, now = time.monotonic(), {}, {}

    def report(method: str, done: int, total: int) -> None:
        if method not in tasks:
            tasks[method] = progress.add_task(method, total=total, completed=done)
            at_start[method] = done
        progress.update(tasks[method], completed=done)
        now[method] = done
        if not err.is_terminal and done > at_start[method]:  # a log file: one line each
            elapsed = time.monotonic() - start
            finished = sum(now.values()) - sum(at_start.values())
            left = total * n_methods - sum(now.values())
            err.print(f"{method} {done}/{total}  elapsed {elapsed / 60:.1f} min  "
                      f"eta {elapsed / finished * left / 60:.1f} min")  # fmt: skip

    return report
