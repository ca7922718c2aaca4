"""What a step gate would have to send to the target to catch the steps that hurt.

AUROC says how well a signal ranks steps; this says what the ranking costs. A step *hurts* when
the target reaches gold from the prefix without it but not with it (the value label). An oracle
gate sends exactly those steps to the target; a threshold on a signal sends every step that
scores at or below the hurting steps it catches. The share of steps it sends is what the gate
costs in target rewrites, and the goal's latency bound caps that share, so the table shows
directly whether a signal could catch the harmful steps within the budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

CATCH = (0.5, 0.8, 1.0)  # shares of the hurting steps a gate is asked to catch
Signal = Callable[[dict[str, Any], dict[str, Any]], float | None]


def hurts(c: dict[str, Any]) -> bool | None:
    """The target reaches gold without the step but not with it (None: not value-labelled)."""
    if c.get("value_with") is None or c.get("value_without") is None:
        return None
    return bool(c["value_without"]) and not c["value_with"]


def share_to_catch(values: list[tuple[float, bool]], catch: float) -> float | None:
    """Share of the steps a threshold sends to the target (lowest score first, ties together)
    once it catches `catch` of the hurting ones; None when no step hurts."""
    bad = sorted(v for v, h in values if h)
    if not bad:
        return None
    cut = bad[max(1, math.ceil(catch * len(bad) - 1e-9)) - 1]
    return sum(v <= cut for v, _ in values) / len(values)


def markdown(problems: list[tuple[str, list[tuple[Any, Any, bool]]]],
             signals: dict[str, Signal]) -> str | None:  # fmt: skip
    """The cost table, over the value-labelled steps (None when none hurts). Only signals
    present on every such step take part, so each row counts the same steps."""
    rows = [(s, c) for _, rs in problems for s, c, _ in rs if hurts(c) is not None]
    n_hurt = sum(bool(hurts(c)) for _, c in rows)
    if not n_hurt:
        return None
    lines = [
        f"What a gate must send to the target: {n_hurt} of {len(rows)} value-labelled steps hurt "
        f"(the target reaches gold without the step, not with it), so an oracle gate sends "
        f"{n_hurt / len(rows):.0%} of the steps. A threshold on each signal, sending the "
        "lowest-scoring steps first, sends this share of all steps to catch that share of the "
        "hurting ones:",
        "",
        "| signal | " + " | ".join(f"catch {q:.0%}" for q in CATCH) + " |",
        "|---|" + "---|" * len(CATCH),
    ]
    for name, fn in signals.items():
        got = [fn(s, c) for s, c in rows]
        if any(v is None or not math.isfinite(float(v)) for v in got):
            continue
        values = [(float(v), bool(hurts(c))) for v, (_, c) in zip(got, rows, strict=True)]
        cells = [f"{share_to_catch(values, q):.0%}" for q in CATCH]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
