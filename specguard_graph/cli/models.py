"""`specguard models install | list`: the embedded default models."""

from __future__ import annotations

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import SpecGuardError
from .common import err, fail, out

models_app = typer.Typer(no_args_is_help=True, help="Install and list the embedded models.")


@models_app.command("install")
def models_install() -> None:
    """Download, assemble, verify and convert the embedded default models (idempotent)."""
    from ..models.install import install
    from ..models.registry import DEFAULTS

    try:
        with Progress(
            TextColumn("{task.description:<28}"), BarColumn(), DownloadColumn(),
            TimeElapsedColumn(), console=err,
        ) as progress:  # fmt: skip
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
        raise fail(str(exc)) from None


@models_app.command("list")
def models_list() -> None:
    """Show the default models: installed or not, where, and their size."""
    from ..models.install import installed

    table = Table("role", "model", "installed", "size", "path")
    for row in installed():
        size = f"{row['bytes'] / 2**30:.2f} GiB" if row["installed"] else "—"
        table.add_row(
            row["role"], row["name"], "yes" if row["installed"] else "no", size, row["path"]
        )
    out.print(table)
