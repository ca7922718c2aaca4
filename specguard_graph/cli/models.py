"""`specguard models install | list | serve`: the embedded default models."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError, ModelLoadError, SpecGuardError
from .common import err, fail, out

models_app = typer.Typer(no_args_is_help=True, help="Install, list and serve the embedded models.")


@models_app.command("install")
def models_install() -> None:
    """Download, assemble, verify and convert the embedded default models (idempotent)."""
    from ..models.install.installer import install
    from ..models.install.registry import DEFAULTS

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
                progress.console.print(f"{role:8} {spec.name:30} {what:9} {path}", markup=False)
    except SpecGuardError as exc:
        raise fail(str(exc)) from None


@models_app.command("list")
def models_list() -> None:
    """Show the default models: installed or not, where, and their size."""
    from ..models.install.installer import installed

    table = Table("role", "model", "installed", "size", "path")
    for row in installed():
        size = f"{row['bytes'] / 2**30:.2f} GiB" if row["installed"] else "—"
        table.add_row(
            row["role"], row["name"], "yes" if row["installed"] else "no", size, Text(row["path"])
        )
    out.print(table)


class Role(StrEnum):
    draft = "draft"
    target = "target"


class Engine(StrEnum):
    llamacpp = "llama.cpp"
    vllm = "vllm"


@models_app.command("serve")
def models_serve(
    role: Annotated[Role, typer.Argument(help="which embedded model to serve")],
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (the URL is …/v1)")] = 8080,
    engine: Annotated[
        Engine, typer.Option(help="llama.cpp (the GGUF) or vllm (the model directory; `make vllm`)")
    ] = Engine.llamacpp,
    speculative: Annotated[
        bool,
        typer.Option(help="target only: llama.cpp's own speculative decoding, the draft inside"),
    ] = False,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads")] = 2,
    parallel: Annotated[int, typer.Option(min=1, help="slots: concurrent requests/samples")] = 4,
    ctx: Annotated[int, typer.Option(min=256, help="context tokens per slot")] = 4096,
) -> None:
    """Serve an embedded model with llama.cpp (xllamacpp) or vLLM until interrupted."""
    try:
        if engine is Engine.vllm:
            _serve_vllm(role, port, speculative, ctx)
            return
        _serve_llamacpp(role, port, speculative, threads, parallel, ctx)
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        pass


def _serve_vllm(role: Role, port: int, speculative: bool, ctx: int) -> None:
    from ..models.install.registry import model_dir
    from ..models.served.vllm import serve_forever, vllm_command

    if speculative:
        raise ConfigError("--speculative is llama.cpp's; vLLM serves one model here")
    path = model_dir(role.value)
    if not path.is_dir():
        raise ModelLoadError(f"{path} is missing: run `specguard models install`")
    cmd = vllm_command(path, port=port, max_model_len=ctx)
    err.print(f"serving {path.name} with vLLM at http://127.0.0.1:{port}/v1", markup=False)
    serve_forever(cmd)


def _serve_llamacpp(role: Role, port: int, speculative: bool, threads: int, parallel: int,
                    ctx: int) -> None:  # fmt: skip
    from ..models.install.installer import gguf_path
    from ..models.install.registry import DEFAULTS
    from ..models.served.llamacpp import serve_forever

    if speculative and role is not Role.target:
        raise ConfigError("--speculative serves the target with the draft inside it")
    gguf = gguf_path(DEFAULTS[role.value])
    draft = gguf_path(DEFAULTS["draft"]) if speculative else None
    for path in (gguf, draft):
        if path is not None and not path.exists():
            raise ModelLoadError(f"{path} is missing: run `specguard models install`")
    err.print(f"serving {gguf.name} at http://127.0.0.1:{port}/v1"
              + (f" (draft {draft.name} inside)" if draft else ""), markup=False)  # fmt: skip
    serve_forever(gguf, port=port, draft=draft, threads=threads, parallel=parallel, ctx=ctx)
