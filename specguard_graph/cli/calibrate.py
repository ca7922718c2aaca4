"""`specguard calibrate`: fit the normalisation ranges and τ on a dev split, or refit them from
the dev signals an earlier run kept."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..config import SpecGuardConfig
from ..errors import ConfigError, SpecGuardError
from .bench import Dataset
from .common import (
    DraftPath,
    EmbedderPath,
    Quantize,
    QuantizeOpt,
    TargetPath,
    err,
    fail,
    load_config,
    load_models,
)


def _observe(models: tuple, problems: list, base: SpecGuardConfig) -> list:
    from ..bench.calibrate import observe

    with Progress(TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err) as progress:  # fmt: skip
        task = progress.add_task("calibrate", total=len(problems))
        return observe(*models, problems, base, lambda d, t: progress.update(task, completed=d))


def calibrate(
    out: Annotated[Path, typer.Option(help="where to write the fitted config JSON")],
    dataset: Annotated[Dataset, typer.Option(help="dev split: gsm-symbolic (fresh problems)")] = (
        Dataset.gsm_symbolic
    ),
    data: Annotated[Path | None, typer.Option(help="JSONL of {question, answer} instead")] = None,
    limit: Annotated[int, typer.Option(help="dev problems")] = 20,
    seed: Annotated[int, typer.Option(help="seed of the generated dev problems")] = 1234,
    budget: Annotated[float, typer.Option(help="share of steps the target may recompute")] = 0.3,
    config: Annotated[Path | None, typer.Option(help="base SpecGuardConfig JSON")] = None,
    signals: Annotated[
        Path | None,
        typer.Option(
            help="refit from the dev signals an earlier calibrate kept (its OUT.signals.json): "
            "another budget or beta, no model run"
        ),
    ] = None,
    draft: DraftPath = None,
    target: TargetPath = None,
    embedder: EmbedderPath = None,
    quantize: QuantizeOpt = Quantize.auto,
) -> None:
    """Fit normalisation ranges and tau on a dev split to a target budget; write a config, and
    the observed dev signals beside it (OUT.signals.json) for refits."""
    from ..bench import calibrate as cal
    from ..bench import data as bench_data

    try:
        if not 0.0 <= budget <= 1.0:
            raise ConfigError(f"--budget must be in [0, 1], got {budget}")
        base = load_config(config, {})
        if signals is not None:
            observed = cal.load_signals(signals, base)
        else:
            problems = bench_data.load(dataset.value, data=data, limit=limit, seed=seed)
            models = load_models((draft, target, embedder), quantize=quantize,
                                 need_embedder=base.k > 1)  # fmt: skip
            observed = _observe(models, problems, base)
            dev = {"dataset": str(data) if data else dataset.value, "limit": limit, "seed": seed}
            cal.save_signals(out.with_name(f"{out.stem}.signals.json"), observed, base, dev)
        cfg, info = cal.fit(observed, base, budget)
        cfg.to_file(out)
        Console().print(
            f"wrote {out}: tau={info['tau']:.3f}, grounding_range="
            f"({info['grounding_range'][0]:.3f}, {info['grounding_range'][1]:.3f}), "
            f"logprob_range=({info['logprob_range'][0]:.2f}, {info['logprob_range'][1]:.2f}) "
            f"from {info['steps']} dev steps; target share on dev {info['dev_target_share']:.2f}",
            markup=False,
        )
    except (SpecGuardError, ValueError) as exc:
        raise fail(str(exc)) from None
