"""The `specguard` command: solve questions with a live view, manage the embedded models."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .config import SpecGuardConfig
from .errors import ConfigError, InputError, SpecGuardError
from .results import ResultLog
from .runtime import validate_question

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
models_app = typer.Typer(no_args_is_help=True, help="Install and list the embedded models.")
app.add_typer(models_app, name="models")
err = Console(stderr=True)
out = Console()


DraftPath = Annotated[str | None, typer.Option("--draft", help="draft model dir or .gguf")]
TargetPath = Annotated[str | None, typer.Option("--target", help="target model dir or .gguf")]
EmbedderPath = Annotated[str | None, typer.Option("--embedder", help="sentence-transformers dir")]
QuantizeOpt = Annotated[
    str,
    typer.Option(
        "--quantize",
        help="CPU weight format: auto (= int8) | int8 (weight-only, per channel) | int8x2 "
        "(int8 + int8 residual: ~bf16 precision, 2x the bytes) | none (float32) | "
        "dynamic-int8 (batch-dependent, unfaithful; opt-in only)",
    ),
]


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _questions(question: str | None, file: Path | None) -> list[str]:
    if (question is None) == (file is None):
        raise InputError("give either a QUESTION or --file questions.jsonl")
    if question is not None:
        return [validate_question(question)]
    assert file is not None
    try:
        lines = file.read_text().splitlines()
    except OSError as exc:
        raise InputError(f"cannot read {file}: {exc.strerror}") from None
    found = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise InputError(f"{file}:{n}: not a JSON object") from None
        if not isinstance(obj, dict) or "question" not in obj:
            raise InputError(f'{file}:{n}: expected {{"question": ...}}')
        try:
            found.append(validate_question(obj["question"]))
        except InputError as exc:
            raise InputError(f"{file}:{n}: {exc}") from None
    if not found:
        raise InputError(f"{file}: no questions")
    return found


def _config(path: Path | None, overrides: dict[str, Any]) -> SpecGuardConfig:
    base = SpecGuardConfig.from_file(path) if path else SpecGuardConfig()
    changes = {k: v for k, v in overrides.items() if v is not None}
    return base.replace(**changes) if changes else base


class LiveView:
    """A rich table that grows one row per decided step, with the current candidates."""

    def __init__(self, question: str):
        self.question = question
        self.rows: list[dict[str, Any]] = []
        self.candidates: list[str] = []
        self.status = "drafting step 0"

    def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "draft":
            self.candidates = event["candidates"]
            self.status = f"scoring step {event['step']}"
        elif kind == "decision" and not event["accepted"]:
            self.status = f"target recomputing step {event['step']} ({event['reason']})"
        elif kind == "step":
            self.rows.append(event)
            self.status = f"drafting step {event['index'] + 1}"
        elif kind == "done":
            self.status = f"done: {event['status']}"

    def render(self) -> Group:
        table = Table(title=self.question, title_justify="left", expand=True)
        for col, kw in (
            ("#", {"justify": "right"}),
            ("by", {}),
            ("ground", {"justify": "right"}),
            ("logp", {"justify": "right"}),
            ("score", {"justify": "right"}),
            ("k", {"justify": "right"}),
            ("step", {"ratio": 1, "overflow": "fold"}),
        ):
            table.add_column(col, **kw)
        for r in self.rows:
            colour = "green" if r["source"] == "draft" else "yellow"
            table.add_row(
                str(r["index"]),
                Text(r["source"], style=colour),
                _num(r.get("grounding")),
                _num(r.get("logprob"), 2),
                _num(r.get("score")),
                str(len(r.get("candidates") or [])),
                r["text"].strip(),
            )
        shown = [f"  [{i}] {c.strip()[:100]!r}" for i, c in enumerate(self.candidates)]
        return Group(table, Text(self.status, style="bold"), Text("\n".join(shown), style="dim"))


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


@app.command()
def solve(
    question: Annotated[str | None, typer.Argument(help="the question to solve")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="JSONL of {question}")] = None,
    draft: DraftPath = None,
    target: TargetPath = None,
    embedder: EmbedderPath = None,
    k: Annotated[int | None, typer.Option(help="draft candidates per step")] = None,
    tau: Annotated[float | None, typer.Option(help="accept threshold in [0, 1]")] = None,
    beta: Annotated[float | None, typer.Option(help="log-prob weight in [0, 1]")] = None,
    signal_model: Annotated[str | None, typer.Option(help="draft | target")] = None,
    max_steps: Annotated[int | None, typer.Option(help="stop after N steps")] = None,
    max_step_tokens: Annotated[int | None, typer.Option(help="cut a step after N tokens")] = None,
    seed: Annotated[int | None, typer.Option(help="sampling seed")] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON (from calibrate)")] = None,
    steps: Annotated[
        str, typer.Option(help="step spec: reasoning | plan | tool_call")
    ] = "reasoning",
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON trace")] = False,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", help="append traces here (fsynced); a rerun skips finished ones"),
    ] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16")] = "auto",
    quantize: QuantizeOpt = "auto",
) -> None:
    """Solve QUESTION (or every line of --file) with SpecGuard."""
    try:
        from .steps import get_step_spec

        questions = _questions(question, file)
        cfg = _config(
            config,
            dict(
                k=k,
                tau=tau,
                beta=beta,
                signal_model=signal_model,
                max_steps=max_steps,
                max_step_tokens=max_step_tokens,
                seed=seed,
            ),
        )
        spec = get_step_spec(steps)
        log = ResultLog(out_file, key="key") if out_file else None
        finished = log.done() if log else {}
        todo = [(i, q) for i, q in enumerate(questions) if f"{i}:{q}" not in finished]
        if log and len(todo) < len(questions):
            err.print(f"resuming: {len(questions) - len(todo)} already in {out_file}")
        if not todo:
            return
        graph = _load_graph(draft, target, embedder, cfg, spec, device, dtype, quantize)
        for i, q in todo:
            trace = _run_one(graph, q, as_json=as_json or file is not None)
            if log:
                log.append({"key": f"{i}:{q}", **trace})
    except SpecGuardError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise _fail("interrupted", 130) from None


def _quiet_hf() -> None:
    """Model loading progress bars and deprecation chatter would bury the live view."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")


def _load_models(draft, target, embedder, *, quantize, need_embedder, device="auto",
                 dtype="auto"):  # fmt: skip
    """Draft, target and (when the vote needs it) embedder, loaded once per process."""
    from .models.loading import load_embedder, load_lm
    from .models.numerics import QUANTIZE_CHOICES

    if quantize not in QUANTIZE_CHOICES:
        raise ConfigError(
            f"--quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {quantize!r}"
        )
    _quiet_hf()
    with err.status("loading models (once per process)…"):
        d = load_lm("draft", draft, device=device, dtype=dtype, quantize=quantize)
        t = load_lm("target", target, device=device, dtype=dtype, quantize=quantize)
        e = load_embedder(embedder) if need_embedder else None
    return d, t, e


def _load_graph(draft, target, embedder, cfg, spec, device, dtype, quantize):
    from .graph import build_graph

    d, t, e = _load_models(draft, target, embedder, quantize=quantize,
                           need_embedder=cfg.k > 1, device=device, dtype=dtype)  # fmt: skip
    if d.tokenizer.get_vocab() != t.tokenizer.get_vocab():
        err.print(
            "[yellow]warning:[/] draft and target tokenizers differ: step-level decoding "
            "works (steps pass as text), but the token-level SD baseline cannot run"
        )
    return build_graph(d, t, embedder=e, steps=spec, config=cfg).compile()


def _run_one(graph: Any, question: str, *, as_json: bool) -> dict[str, Any]:
    from .trace import to_trace

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
    trace = to_trace(result)
    t, c = trace["timing"], trace["counts"]
    out.print(
        f"[bold]answer:[/] {trace['answer']}   status={trace['status']}   "
        f"steps={c['steps']} (target {c['target_steps']})   total {t['total_s']:.1f}s = "
        f"draft {t['draft_s']:.1f}s + verify {t['verify_s']:.2f}s + target {t['target_s']:.1f}s"
    )
    return trace


@app.command()
def bench(
    dataset: Annotated[
        str, typer.Option(help="gsm8k (the 100 original test problems) | gsm-symbolic | champ")
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
    quantize: QuantizeOpt = "auto",
    report_only: Annotated[
        bool, typer.Option("--report-only", help="summarise what --out holds, run nothing")
    ] = False,
) -> None:
    """Run methods side by side on the same problems; write JSONL, summary.md and a plot."""
    from .bench.report import (
        load_results,
        lossless_markdown,
        markdown,
        paired_markdown,
        plot,
        plot_tau_sweep,
        summarize,
    )

    try:
        names = _bench_methods(methods, taus)
        if not report_only:
            _bench_run(names, dataset, data, limit, offset, seed, config, max_tokens, out,
                       (draft, target, embedder), quantize)  # fmt: skip
        results = load_results(out, names)
        rows = summarize(results)
        if not rows:
            raise InputError(f"no finished results for {', '.join(names)} in {out}")
        command = "specguard bench " + " ".join(a for a in sys.argv[2:] if a != "--report-only")
        summary = markdown(rows, command)
        if pairs := paired_markdown(results):
            summary += "\n" + pairs
        if same := lossless_markdown(results):
            summary += "\n" + same
        (out / "summary.md").write_text(summary)
        plot(rows, out / "accuracy_vs_latency.png")
        if taus:
            plot_tau_sweep(rows, out / "tau_sweep.png")
        Console().print((out / "summary.md").read_text())
    except SpecGuardError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise _fail(f"interrupted: finished results are kept in {out}", 130) from None


def _bench_methods(methods: str, taus: str | None) -> list[str]:
    """The method list, each SpecGuard method expanded to one point per τ of a sweep."""
    from .bench import methods as bench_methods

    names = [m.strip() for m in methods.split(",") if m.strip()]
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


def _bench_run(names, dataset, data, limit, offset, seed, config, max_tokens, out, paths,
               quantize):  # fmt: skip
    """Load the models once and run every method on every problem (resumable)."""
    from rich.progress import MofNCompleteColumn, TimeRemainingColumn

    from .bench import data as bench_data
    from .bench import methods as bench_methods
    from .bench.run import run

    problems = bench_data.load(dataset, data=data, limit=limit, offset=offset, seed=seed)
    base = _config(config, {})
    d, t, e = _load_models(*paths, quantize=quantize, need_embedder=True)
    solvers = {m: bench_methods.make(m, d, t, e, base, max_tokens) for m in names}
    with Progress(
        TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=err,
    ) as progress:  # fmt: skip
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
                left = total * len(names) - sum(now.values())
                err.print(f"{method} {done}/{total}  elapsed {elapsed / 60:.1f} min  "
                          f"eta {elapsed / finished * left / 60:.1f} min")  # fmt: skip

        run(problems, solvers, out, report)


@app.command()
def calibrate(
    out: Annotated[Path, typer.Option(help="where to write the fitted config JSON")],
    dataset: Annotated[str, typer.Option(help="dev split: gsm-symbolic (fresh problems)")] = (
        "gsm-symbolic"
    ),
    data: Annotated[Path | None, typer.Option(help="JSONL of {question, answer} instead")] = None,
    limit: Annotated[int, typer.Option(help="dev problems")] = 20,
    seed: Annotated[int, typer.Option(help="seed of the generated dev problems")] = 1234,
    budget: Annotated[float, typer.Option(help="share of steps the target may recompute")] = 0.3,
    config: Annotated[Path | None, typer.Option(help="base SpecGuardConfig JSON")] = None,
    draft: DraftPath = None,
    target: TargetPath = None,
    embedder: EmbedderPath = None,
    quantize: QuantizeOpt = "auto",
) -> None:
    """Fit normalisation ranges and tau on a dev split to a target budget; write a config."""
    from rich.progress import MofNCompleteColumn, TimeRemainingColumn

    from .bench import data as bench_data
    from .bench.calibrate import calibrate as fit_config

    try:
        if not 0.0 <= budget <= 1.0:
            raise ConfigError(f"--budget must be in [0, 1], got {budget}")
        problems = bench_data.load(dataset, data=data, limit=limit, seed=seed)
        base = _config(config, {})
        d, t, e = _load_models(draft, target, embedder, quantize=quantize,
                               need_embedder=base.k > 1)  # fmt: skip
        with Progress(TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(), console=err) as progress:  # fmt: skip
            task = progress.add_task("calibrate", total=len(problems))
            cfg, info = fit_config(
                d, t, e, problems, base, budget,
                lambda done, total: progress.update(task, completed=done),
            )  # fmt: skip
        cfg.to_file(out)
        Console().print(
            f"wrote {out}: tau={info['tau']:.3f}, grounding_range="
            f"({info['grounding_range'][0]:.3f}, {info['grounding_range'][1]:.3f}), "
            f"logprob_range=({info['logprob_range'][0]:.2f}, {info['logprob_range'][1]:.2f}) "
            f"from {info['steps']} dev steps; target share on dev {info['dev_target_share']:.2f}"
        )
    except (SpecGuardError, ValueError) as exc:
        raise _fail(str(exc)) from None


@models_app.command("install")
def models_install() -> None:
    """Download, assemble, verify and convert the embedded default models (idempotent)."""
    from .models.install import install
    from .models.registry import DEFAULTS

    try:
        with Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            console=err,
        ) as progress:
            for role, spec in DEFAULTS.items():
                tasks: dict[str, int] = {}

                def report(
                    phase: str, done: int, total: int, role: str = role, tasks: dict = tasks
                ) -> None:
                    if phase not in tasks:
                        tasks[phase] = progress.add_task(f"{role}: {phase}", total=total)
                    progress.update(tasks[phase], completed=done, total=total)

                path, what = install(role, report)
                for task in tasks.values():
                    progress.remove_task(task)
                progress.console.print(f"{role:8} {spec.name:30} {what:9} {path}")
    except SpecGuardError as exc:
        raise _fail(str(exc)) from None


@models_app.command("list")
def models_list() -> None:
    """Show the default models: installed or not, where, and their size."""
    from .models.install import installed

    table = Table("role", "model", "installed", "size", "path")
    for row in installed():
        size = f"{row['bytes'] / 2**30:.2f} GiB" if row["installed"] else "—"
        table.add_row(
            row["role"], row["name"], "yes" if row["installed"] else "no", size, row["path"]
        )
    out.print(table)


def main() -> None:  # pragma: no cover - console entry point
    warnings.filterwarnings("ignore")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
