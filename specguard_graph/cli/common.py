"""What the commands share: consoles, the one-line error form, option types and enums, and
loading the models once per process."""

from __future__ import annotations

import sys
import warnings
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from ..config import SpecGuardConfig
from ..errors import ConfigError

err = Console(stderr=True)
out = Console()


class OneLineErrors(TyperGroup):
    """Every bad flag or value ends as one `error:` line and exit code 2, as the commands'
    own checks do, instead of click's boxed usage panel."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # no arguments: the help, as usual
                return super().main(*args, standalone_mode=True, **kwargs)
            fail(exc.format_message().replace("Value error, ", ""))
            sys.exit(2)
        except typer.Abort:
            fail("interrupted")
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print the one-line error; the caller raises the returned Exit."""
    # the message is plain text: `pip install 'x[bench]'` must not be read as rich markup
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


class Quantize(StrEnum):
    auto = "auto"
    int8 = "int8"
    int8x2 = "int8x2"
    gguf = "gguf"
    gguf_target = "gguf-target"
    gguf_a8 = "gguf-a8"
    gguf_a8o = "gguf-a8o"
    none = "none"
    dynamic_int8 = "dynamic-int8"


class Dtype(StrEnum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


DraftPath = Annotated[
    str | None, typer.Option("--draft", help="draft model dir, .gguf or distilled:NAME")
]
TargetPath = Annotated[str | None, typer.Option("--target", help="target model dir or .gguf")]
DraftModel = Annotated[
    str | None, typer.Option("--draft-model", help="served draft's model name (default: listed)")
]
TargetModel = Annotated[
    str | None, typer.Option("--target-model", help="served target's model name (default: listed)")
]
EmbedderPath = Annotated[str | None, typer.Option("--embedder", help="sentence-transformers dir")]
QuantizeOpt = Annotated[
    Quantize,
    typer.Option(
        "--quantize",
        help="CPU weight format: auto ($SPECGUARD_QUANTIZE, else gguf where the model has GGUF "
        "blocks, else int8) | int8 (weight-only, per channel) | int8x2 (int8 + int8 residual: "
        "~bf16 precision, 2x the bytes) | gguf (the GGUF's own blocks) | gguf-a8 (gguf with int8 "
        "activations: faster prefill, less faithful) | gguf-a8o (gguf-a8 with each group's "
        "largest activation at int16: closer to gguf, most of a8's prefill on AVX-512) | "
        "gguf-target (target on its blocks, draft int8) | none (float32) | dynamic-int8 "
        "(batch-dependent, unfaithful; opt-in only)",
    ),
]


def load_config(path: Path | None, overrides: dict[str, Any]) -> SpecGuardConfig:
    base = SpecGuardConfig.from_file(path) if path else SpecGuardConfig()
    changes = {k: v for k, v in overrides.items() if v is not None}
    return base.replace(**changes) if changes else base


def _quiet_hf() -> None:
    """Model loading progress bars and deprecation chatter would bury the live view."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")


def load_models(paths: tuple[str | None, str | None, str | None], *, quantize: Quantize,
                need_embedder: bool, device: str = "auto", dtype: str = "auto",
                names: tuple[str | None, str | None] = (None, None)):  # fmt: skip
    """Draft, target and (when the vote needs it) embedder, loaded once per process; a path
    that is an http(s) URL ending in /v1 is a served model (`names`: its model names)."""
    from ..models.loading import load_embedder, load_lm

    if not isinstance(quantize, Quantize):
        raise ConfigError(f"--quantize must be one of {', '.join(q.value for q in Quantize)}")
    _quiet_hf()
    draft, target, embedder = paths
    with err.status("loading models (once per process)…"):
        qd, qt = ("int8", "gguf") if quantize is Quantize.gguf_target else (quantize.value,) * 2
        d = load_lm("draft", draft, device=device, dtype=dtype, quantize=qd, model=names[0])  # type: ignore[arg-type]
        t = load_lm("target", target, device=device, dtype=dtype, quantize=qt, model=names[1])  # type: ignore[arg-type]
        e = load_embedder(embedder) if need_embedder else None
    return d, t, e
