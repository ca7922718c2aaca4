"""Where an installed distilled draft lives (`draft = "distilled:NAME"`; `distill/install.py`
builds it), so that the loader can find one without importing the training code."""

from __future__ import annotations

from pathlib import Path

from ...errors import ModelLoadError
from .installer import MARKER
from .registry import home

PREFIX = "distilled:"


def check_name(name: str) -> str:
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ModelLoadError(f"distilled:{name}: a distilled draft is named distilled:NAME "
                             "(letters, digits, - and _)")  # fmt: skip
    return name


def distilled_dir(name: str) -> Path:
    return home() / "models" / f"distilled-{check_name(name)}"


def resolve(spec: str) -> Path:
    """`distilled:NAME` -> its installed directory, or one line saying how to install it."""
    name = check_name(spec.removeprefix(PREFIX))
    out = distilled_dir(name)
    if not (out / MARKER).is_file():
        raise ModelLoadError(f"distilled draft {name!r} is not installed: run `specguard distill "
                             f"install --adapter DIR --name {name}`")  # fmt: skip
    return out
