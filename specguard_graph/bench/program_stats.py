"""For program-step methods: how much code the models ran, how often the output they wrote
themselves (cut at the fence, `ProgramSteps.trim`) matched the real one, how often running the
draft's code caught a step the score let through, and how those problems ended."""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

REFUSALS = ("program failed", "program printed nothing", "writes its own program output")
_WRITTEN = re.compile(r"```\s*output[^\n]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)


def _usage(method: str, recs: dict[str, dict[str, Any]]) -> str | None:
    """Programs run, and the made-up outputs cut beside the real ones."""
    if not recs:
        return None
    used = tools = cut = equal = 0
    for rec in recs.values():
        steps = rec.get("step_records") or []
        n = sum(s.get("source") == "tool" for s in steps)
        used, tools = used + bool(n), tools + n
        for step, nxt in pairwise(steps):
            written = _WRITTEN.search(step.get("dropped") or "")
            if written is None or nxt.get("source") != "tool":
                continue
            cut += 1
            real = (nxt.get("observation") or {}).get("stdout") or ""
            equal += written.group(1).strip() == real.strip()
    return (
        f"`{method}`: {used} of {len(recs)} problems ran code ({tools} programs); {cut} steps "
        f"went on past the fence with an output of their own (cut, never read): it matched the "
        f"real output {equal} times."
    )


def program_markdown(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = []
    for method, recs in results.items():
        if "program" not in method:
            continue
        if (usage := _usage(method, recs)) is not None:
            lines.append(usage)
        if method.startswith(("target-", "draft-")):
            continue
        scored = refused = 0
        kinds = dict.fromkeys(REFUSALS, 0)
        caught = right = 0
        for rec in recs.values():
            steps = [s for s in rec.get("step_records") or [] if s.get("source") != "tool"]
            scored += len(steps)
            hits = [s for s in steps if str(s.get("reason") or "").startswith(REFUSALS)]
            for s in hits:
                kinds[next(k for k in REFUSALS if str(s["reason"]).startswith(k))] += 1
            refused += len(hits)
            if hits:
                caught += 1
                right += bool(rec.get("correct"))
        if not scored:
            continue
        detail = ", ".join(f"{k}: {n}" for k, n in kinds.items())
        lines.append(
            f"`{method}`: execution sent {refused} of {scored} draft steps "
            f"({100 * refused / scored:.1f} %) to the target that the score had accepted "
            f"({detail}); the {caught} problems with such a step ended right {right} times."
        )
    return "\n\n".join(lines) + "\n" if lines else ""
