"""`specguard solve`: one question (or a JSONL file of them) with the live view or JSON traces."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.text import Text

from ..errors import InputError, SpecGuardError
from ..results import ResultLog
from ..runtime import validate_question
from .common import (
    DraftModel,
    DraftPath,
    Dtype,
    EmbedderPath,
    Quantize,
    QuantizeOpt,
    TargetModel,
    TargetPath,
    err,
    fail,
    load_config,
    load_models,
    out,
)
from .live import LiveView
from .view import write_page

NoSandbox = Annotated[
    bool,
    typer.Option("--no-sandbox", help="run program steps WITHOUT isolation (your rights, your "
                 "files, the network); each program's trace says so"),
]  # fmt: skip


class Steps(StrEnum):
    reasoning = "reasoning"
    program = "program"
    plan = "plan"


class SignalModel(StrEnum):
    draft = "draft"
    target = "target"


def questions(question: str | None, file: Path | None) -> list[str]:
    """The question argument, or every {"question": ...} line of the file."""
    from .. import jsonl

    if (question is None) == (file is None):
        raise InputError("give either a QUESTION or --file questions.jsonl")
    if question is not None:
        return [validate_question(question)]
    assert file is not None
    found = []
    for n, obj in jsonl.objects(file, ("question",)):
        try:
            found.append(validate_question(obj["question"]))
        except InputError as exc:
            raise InputError(f"{file}:{n}: {exc}") from None
    if not found:
        raise InputError(f"{file}: no questions")
    return found


def solve(
    question: Annotated[str | None, typer.Argument(help="the question to solve")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="JSONL of {question}")] = None,
    draft: DraftPath = None,
    target: TargetPath = None,
    embedder: EmbedderPath = None,
    draft_model: DraftModel = None,
    target_model: TargetModel = None,
    k: Annotated[int | None, typer.Option(help="draft candidates per step")] = None,
    tau: Annotated[float | None, typer.Option(help="accept threshold; > 1: target only")] = None,
    beta: Annotated[float | None, typer.Option(help="log-prob weight in [0, 1]")] = None,
    signal_model: Annotated[
        SignalModel | None, typer.Option(help="whose signals score a step")
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="stop after N steps")] = None,
    max_step_tokens: Annotated[int | None, typer.Option(help="cut a step after N tokens")] = None,
    seed: Annotated[int | None, typer.Option(help="sampling seed")] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON (from calibrate)")] = None,
    steps: Annotated[Steps, typer.Option(help="what a step is")] = Steps.reasoning,
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON trace")] = False,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", help="append traces here (fsynced); a rerun skips finished ones"),
    ] = None,
    html_file: Annotated[
        Path | None, typer.Option("--html", help="write the run page (why each step) here")
    ] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    dtype: Annotated[Dtype, typer.Option(help="weights' float type")] = Dtype.auto,
    quantize: QuantizeOpt = Quantize.auto,
    no_sandbox: NoSandbox = False,
) -> None:
    """Solve QUESTION (or every line of --file) with SpecGuard."""
    try:
        from ..steps import get_step_spec

        todo_all = questions(question, file)
        cfg = load_config(config, dict(
            k=k, tau=tau, beta=beta, max_steps=max_steps, max_step_tokens=max_step_tokens,
            seed=seed, signal_model=signal_model.value if signal_model else None,
        ))  # fmt: skip
        spec = get_step_spec(steps.value)
        log = ResultLog(out_file, key="key") if out_file else None
        if log:
            log.check()
        finished = log.done() if log else {}
        todo = [(i, q) for i, q in enumerate(todo_all) if f"{i}:{q}" not in finished]
        if log and len(todo) < len(todo_all):
            err.print(f"resuming: {len(todo_all) - len(todo)} already in {out_file}", markup=False)
        if not todo:
            return
        graph = _graph((draft, target, embedder), cfg, spec, device, dtype, quantize,
                       (draft_model, target_model), sandbox=not no_sandbox)  # fmt: skip
        _run_all(graph, todo, log, as_json=as_json or file is not None, html=html_file)
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None


def _run_all(graph: Any, todo: list[tuple[int, str]], log: ResultLog | None, *, as_json: bool,
             html: Path | None) -> None:  # fmt: skip
    """Each question in turn: its trace to the log (fsynced) and to the page as it finishes."""
    shown = []
    for i, q in todo:
        trace = _run_one(graph, q, as_json=as_json)
        if log:
            log.append({"key": f"{i}:{q}", **trace})
        if html:
            shown.append(trace)
            write_page(shown, html)


def _graph(paths, cfg, spec, device, dtype, quantize, names, *,  # type: ignore[no-untyped-def]
           sandbox: bool = True):  # fmt: skip
    from ..graph import build_graph
    from ..models import shared_vocab
    from ..program.executor import PythonExecutor

    d, t, e = load_models(paths, quantize=quantize, need_embedder=cfg.k > 1,
                          device=device, dtype=dtype.value, names=names)  # fmt: skip
    if not shared_vocab(d, t):
        err.print(
            "[yellow]note:[/] draft and target share no vocabulary (different tokenizers or a "
            "served model): steps pass between them as text"
        )
    executor = None
    if not sandbox and callable(getattr(spec, "program", None)):
        err.print("[yellow]note:[/] --no-sandbox: program steps run unisolated, with your rights")
        executor = PythonExecutor(sandbox=False)
    return build_graph(d, t, embedder=e, steps=spec, config=cfg, executor=executor).compile()


def _run_one(graph: Any, question: str, *, as_json: bool) -> dict[str, Any]:
    from ..trace import to_trace

    result: dict[str, Any] = {}
    if as_json:
        trace = to_trace(graph.invoke({"question": question}))
        sys.stdout.write(json.dumps(trace) + "\n")
        sys.stdout.flush()
        return trace
    view = LiveView(question)
    with Live(view.render(), console=out, refresh_per_second=8, transient=False) as live:
        for mode, data in graph.stream({"question": question}, stream_mode=["custom", "values"]):
            if mode == "custom":
                view.handle(data)
                live.update(view.render())
            else:
                result = data
    if not out.is_terminal:  # rich ends the live view with a newline only on a terminal
        out.line()
    trace = to_trace(result)
    t, c = trace["timing"], trace["counts"]
    timing = (f"total {t['total_s']:.1f}s = draft {t['draft_s']:.1f}s + verify "
              f"{t['verify_s']:.2f}s + target {t['target_s']:.1f}s")  # fmt: skip
    line = (f" {trace['answer']}   status={trace['status']}   steps={c['steps']} "
            f"(target {c['target_steps']})   {timing}")  # fmt: skip
    out.print(Text.assemble(("answer:", "bold"), line))  # the answer is model text: not markup
    return trace
