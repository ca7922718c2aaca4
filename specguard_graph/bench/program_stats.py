"""For program-step methods: how often running the draft's code caught a step the score let
through, and how those problems ended."""

from __future__ import annotations

from typing import Any

REFUSALS = ("program failed", "program printed nothing", "writes its own program output")


def program_markdown(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = []
    for method, recs in results.items():
        if "program" not in method or method.startswith(("target-", "draft-")):
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
    return "\n".join(lines) + "\n" if lines else ""
