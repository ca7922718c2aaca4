"""`specguard bench --html-dir`: one run page per problem and method, and an index to them.

A failure in the results table should be one click from the page that shows why: the index
lists every problem the methods finished, marks each answer right or wrong, and links to
`<method>/<problem id>.html`.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from .. import jsonl
from ..errors import InputError
from ..view import CSS, as_trace, page


def _name(text: str) -> str:
    """A file name any filesystem takes, from a method name (`specguard@tau=0.5`) or an id."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text)[:120] or "_"


def check_html_dir(html_dir: Path) -> None:
    try:
        html_dir.mkdir(parents=True, exist_ok=True)
        probe = html_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"--html-dir {html_dir}: {exc.strerror or exc}") from None


def write_pages(out_dir: Path, methods: list[str], html_dir: Path) -> Path:
    """Write the pages for every finished record in `out_dir`; return the index's path."""
    records: dict[str, dict[str, dict[str, Any]]] = {}
    for m in methods:
        path = out_dir / f"{m}.jsonl"
        found = jsonl.objects(path, ("id",)) if path.exists() else ()
        records[m] = {str(obj["id"]): obj for _, obj in found}
    ids = list(dict.fromkeys(i for m in methods for i in records[m]))
    try:
        for m in methods:
            (html_dir / _name(m)).mkdir(parents=True, exist_ok=True)
            for pid, rec in records[m].items():
                title = f"{m} · {pid}"
                (html_dir / _name(m) / f"{_name(pid)}.html").write_text(
                    page([as_trace(rec)], title=title), encoding="utf-8"
                )
        index = html_dir / "index.html"
        index.write_text(_index(ids, methods, records, out_dir), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--html-dir {html_dir}: {exc.strerror or exc}") from None
    return index


def _cell(method: str, pid: str, rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "<td>—</td>"
    mark, cls = ("✓", "correct") if rec.get("correct") else ("✗", "wrong")
    href = f"{_name(method)}/{_name(pid)}.html"
    answer = html.escape(str(rec.get("answer")))
    return f'<td><a class="grade {cls}" href="{html.escape(href)}">{mark} {answer}</a></td>'


def _index(ids: list[str], methods: list[str], records: dict[str, dict[str, dict[str, Any]]],
           out_dir: Path) -> str:  # fmt: skip
    head = "<tr><th>problem</th><th>gold</th>" + "".join(
        f"<th>{html.escape(m)}</th>" for m in methods
    )
    rows = [head + "</tr>"]
    for pid in ids:
        gold = next((records[m][pid].get("gold") for m in methods if pid in records[m]), None)
        cells = "".join(_cell(m, pid, records[m].get(pid)) for m in methods)
        rows.append(f"<tr><td>{html.escape(pid)}</td><td>{html.escape(str(gold))}</td>{cells}</tr>")
    title = f"specguard bench · {html.escape(str(out_dir))}"
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{CSS}</style></head><body><h1>{title}</h1>"
            f'<table class="index">{"".join(rows)}</table></body></html>')  # fmt: skip
