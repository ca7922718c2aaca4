"""The `specguard` command: solve questions with a live view, benchmark and calibrate, manage
the embedded models."""

from __future__ import annotations

import warnings

import typer

from .bench import bench
from .calibrate import calibrate
from .common import OneLineErrors
from .distill import distill_app
from .evidence import evidence
from .models import models_app
from .serve import serve
from .solve import solve
from .view import view

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, cls=OneLineErrors)
app.command()(solve)
app.command()(bench)
app.command()(calibrate)
app.command()(evidence)
app.command()(view)
app.command()(serve)
app.add_typer(models_app, name="models")
app.add_typer(distill_app, name="distill")


def main() -> None:  # pragma: no cover - console entry point
    warnings.filterwarnings("ignore")
    app()


__all__ = ["app", "main"]
