"""Reading a user's JSONL file: one object per line, each error naming the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputError


def objects(path: str | Path, keys: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; each object must hold `keys`."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text") from None
    expected = "{" + ", ".join(f'"{k}": ...' for k in keys) + "}"
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise InputError(f"{path}:{n}: not a JSON object; expected {expected}") from None
        if not isinstance(obj, dict) or any(k not in obj for k in keys):
            raise InputError(f"{path}:{n}: expected {expected}")
        yield n, obj
