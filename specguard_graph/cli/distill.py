"""`specguard distill problems | train | install | evaluate`: the draft learns the target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from ..errors import SpecGuardError
from .common import err, fail, out

distill_app = typer.Typer(
    no_args_is_help=True,
    help="A draft that learns the target: problems, collect, train, install, evaluate (run: all).",
)


@distill_app.command("problems")
def distill_problems(
    out_file: Annotated[Path, typer.Option("--out", help="JSONL to write")],
    count: Annotated[int, typer.Option(min=1, help="how many problems")] = 1400,
    seed: Annotated[int, typer.Option(help="generator seed")] = 1,
) -> None:
    """Write training problems disjoint from every evaluation set (distill/data.py); the target
    answers them with `specguard distill collect` (resumable)."""
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
    model: Annotated[
        str, typer.Option(help="draft | target | distilled:NAME | a model dir or .gguf")
    ] = "draft",
    limit: Annotated[int | None, typer.Option(min=1, help="first N records")] = None,
    offset: Annotated[int, typer.Option(min=0, help="skip the first N (those trained on)")] = 0,
) -> None:
    """Teacher-forced on the target's answers: the share of positions where MODEL's argmax is
    the target's token, of whole steps it writes as the target did, and its mean agreeing run."""
    try:
        from .. import jsonl
        from ..distill.agreement import agreement
        from ..models.loading import load_lm

        rows = [r for _, r in jsonl.objects(records, ("question", "text"))][offset:]
        rows = rows[:limit]
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


@distill_app.command("train")
def distill_train(
    records: Annotated[list[Path], typer.Option(help="the target's answers: bench JSONL(s)")],
    out_dir: Annotated[Path, typer.Option("--out", help="adapter folder (resumes from it)")],
    recipe: Annotated[str, typer.Option(help="target-text | hard-positions")] = "target-text",
    epochs: Annotated[int, typer.Option(min=1)] = 2,
    rank: Annotated[int, typer.Option(min=1, help="LoRA rank")] = 16,
    lr: Annotated[float, typer.Option(min=0.0, help="peak learning rate")] = 2e-4,
    seed: Annotated[int, typer.Option(help="adapter init and data order")] = 0,
    limit: Annotated[int | None, typer.Option(min=1, help="first N records")] = None,
) -> None:
    """Train a LoRA adapter on the draft from the target's text (distill/train.py), with a
    manifest of its data, settings, hashes and cost. Stopped, it resumes where it was."""
    try:
        from ..distill.pipeline import train_adapter
        from ..distill.train import Recipe

        spec = Recipe(name=recipe, epochs=epochs, rank=rank, alpha=2 * rank, lr=lr, seed=seed)  # type: ignore[arg-type]
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("training", total=None)

            def step(done: int, total: int, loss: float) -> None:
                progress.update(task, completed=done, total=total,
                                description=f"training (loss {loss:.3f})")  # fmt: skip

            manifest = train_adapter(records, out_dir, spec, limit=limit, progress=step)
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
    out.print(json.dumps({"adapter": str(out_dir), **manifest["figures"]}), markup=False)


@distill_app.command("install")
def distill_install(
    adapter: Annotated[Path, typer.Option(help="adapter folder with its manifest.json")],
    name: Annotated[str, typer.Option(help="installed as distilled:NAME")] = "gsm",
) -> None:
    """Check the adapter against its manifest, merge it into the draft's GGUF blocks and install
    it as `distilled:NAME`; a bad adapter leaves the installed one as it was."""
    try:
        from ..distill.install import install

        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("merging", total=None)
            done = install(adapter, name,
                           lambda _, d, t: progress.update(task, completed=d, total=t))  # fmt: skip
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
    out.print(json.dumps(done), markup=False)


@distill_app.command("collect")
def distill_collect(
    problems: Annotated[Path, typer.Option(help="`distill problems` JSONL")],
    out_dir: Annotated[Path, typer.Option("--out", help="results folder (resumes)")],
    limit: Annotated[int | None, typer.Option(min=1, help="first N problems")] = None,
    max_tokens: Annotated[int, typer.Option(min=1, help="token budget per answer")] = 384,
) -> None:
    """The target answers the problems greedily in the graph's prompt format: `OUT/target.jsonl`,
    the training records (a `specguard bench` run of the target; it resumes where it stopped)."""
    from .bench import bench

    bench(data=problems, methods="target", out=out_dir, limit=limit, max_tokens=max_tokens)


@distill_app.command("run")
def distill_run(
    out_dir: Annotated[Path, typer.Option("--out", help="work folder (every stage resumes)")],
    count: Annotated[int, typer.Option(min=1, help="problems the target answers")] = 200,
    recipe: Annotated[str, typer.Option(help="target-text | hard-positions")] = "target-text",
    name: Annotated[str, typer.Option(help="installed as distilled:NAME")] = "gsm",
    seed: Annotated[int, typer.Option(help="problems, adapter init and data order")] = 1,
    evaluate_on: Annotated[Path, typer.Option(help="held-out target answers to score on")] = Path(
        "benchmarks/results/gsm8k-100/target.jsonl"
    ),
    evaluate_limit: Annotated[int | None, typer.Option(min=1, help="first N of those")] = None,
) -> None:
    """Every stage in order: problems, collect, train, install, evaluate (stock and distilled)."""
    problems, adapter = out_dir / "problems.jsonl", out_dir / f"adapter-{recipe}"
    if not problems.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        distill_problems(out_file=problems, count=count, seed=seed)
    err.print(f"collect: the target answers {count} problems (resumes)", markup=False)
    distill_collect(problems=problems, out_dir=out_dir / "collect", limit=count)
    records = [out_dir / "collect" / "target.jsonl"]
    err.print(f"train: {recipe} into {adapter} (resumes)", markup=False)
    distill_train(records=records, out_dir=adapter, recipe=recipe, seed=seed)
    distill_install(adapter=adapter, name=name)
    for model in ("draft", f"distilled:{name}"):
        distill_evaluate(records=evaluate_on, model=model, limit=evaluate_limit, offset=0)
