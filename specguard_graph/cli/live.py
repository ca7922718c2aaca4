"""The live view of `specguard solve`: a table that grows one row per decided step.

Questions, steps, candidates and reasons are text from users and models, never rich markup: a
step holding `[/INST]` would end the run with a MarkupError, and `\\[` would lose its
backslash. Every such string reaches rich as a `Text`."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text


class LiveView:
    """Reads the graph's custom stream events; shows steps, the candidates and the status."""

    def __init__(self, question: str):
        self.question = question
        self.rows: list[dict[str, Any]] = []
        self.candidates: list[str] = []
        self.status = "drafting step 0"

    def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "draft":
            self.candidates = event["candidates"]
            self.status = f"scoring step {event['step']}"
        elif kind == "decision" and not event["accepted"]:
            self.status = f"target recomputing step {event['step']} ({event['reason']})"
        elif kind == "target_text":  # the target's step as it is written
            tail = event["text"].strip().replace("\n", " ⏎ ")[-100:]
            self.status = f"target writing step {event['step']}: {tail}"
        elif kind == "prefill":  # a long prompt, fed in chunks
            share = event["fed"] / max(event["total"], 1)
            bar = "█" * round(20 * share) + "·" * (20 - round(20 * share))
            self.status = f"prefilling {bar} {event['fed']:,} / {event['total']:,} tokens"
        elif kind == "step":
            self.rows.append(event)
            self.status = f"drafting step {event['index'] + 1}"
        elif kind == "done":
            self.status = f"done: {event['status']}"

    def render(self) -> Group:
        table = Table(title=Text(self.question), title_justify="left", expand=True)
        for col, kw in (
            ("#", {"justify": "right"}),
            ("by", {}),
            ("ground", {"justify": "right"}),
            ("logp", {"justify": "right"}),
            ("score", {"justify": "right"}),
            ("k", {"justify": "right"}),
            ("step", {"ratio": 1, "overflow": "fold"}),
        ):
            table.add_column(col, **kw)
        for r in self.rows:
            colour = "green" if r["source"] == "draft" else "yellow"
            table.add_row(
                str(r["index"]),
                Text(r["source"], style=colour),
                _num(r.get("grounding")),
                _num(r.get("logprob"), 2),
                _num(r.get("score")),
                str(len(r.get("candidates") or [])),
                Text(r["text"].strip()),
            )
        # one line each, as written (a repr would double every backslash of the LaTeX)
        shown = [
            f"  [{i}] " + c.strip()[:100].replace("\n", " ⏎ ")
            for i, c in enumerate(self.candidates)
        ]
        return Group(table, Text(self.status, style="bold"), Text("\n".join(shown), style="dim"))


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"
