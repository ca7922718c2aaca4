"""Append-only JSONL result logs that survive a kill: each finished result is flushed and
fsynced before the next one starts, and a restarted run skips what is already there."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputError


class ResultLog:
    def __init__(self, path: str | Path, key: str = "key"):
        self.path = Path(path)
        self.key = key

    def check(self) -> None:
        """Fail before any work when the log cannot be read and appended to (a read-only
        directory, a directory in its place, a symlink loop): a result computed first would be
        lost. An existing log is left byte for byte as it is."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a"):
                pass
            self.done()
        except OSError as exc:
            raise InputError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def done(self) -> dict[str, dict[str, Any]]:
        """Finished results by key; a torn last line (killed mid-write) is ignored."""
        found: dict[str, dict[str, Any]] = {}
        for record in self._read():
            if self.key in record:
                found[str(record[self.key])] = record
        return found

    def _read(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    yield obj

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._heal()
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _heal(self) -> None:
        """Drop a torn last line so the next record starts on a line of its own."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            cut = data.rfind(b"\n") + 1
            f.truncate(cut)
