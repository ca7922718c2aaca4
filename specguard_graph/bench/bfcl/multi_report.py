"""The BFCL multi-turn run read back: accuracy by BFCL's checker with 95 % CIs, per-turn
success, each method's latency against the target's on the same tasks, whether a method's
trajectory is the target's, and which conversation checks fired and what the target then did.

Only tasks every method has finished are compared (the run is resumable and interleaved).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from ..report import _paired_ratio, load_results, wilson


def load(out_dir: Path, methods: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each method's finished tasks by id, on the tasks every method has finished."""
    runs = load_results(out_dir, methods)
    shared = set.intersection(*(set(r) for r in runs.values())) if runs else set()
    return {m: {i: r for i, r in rs.items() if i in shared} for m, rs in runs.items()}


def trajectory(record: dict[str, Any]) -> list[list[tuple[str, str]]]:
    """Per turn, what the assistant said and called, in order (who wrote it left out)."""
    return [[(m["text"], json.dumps(m["calls"], sort_keys=True)) for m in t["messages"]
             if m["role"] == "assistant"] for t in record["turns"]]  # fmt: skip


def assistant_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for t in record["turns"] for m in t["messages"] if m["role"] == "assistant"]


def checks(records: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """For each reason a drafted message went to the target: how often, and how often the
    target then wrote something else (other calls, or other text)."""
    fired: Counter[str] = Counter()
    changed: Counter[str] = Counter()
    for r in records.values():
        for m in assistant_messages(r):
            reason = m.get("checked")
            if reason and reason != "ok":
                fired[reason] += 1
                changed[reason] += m.get("source") == "target" and _differs(m)
    return {k: {"fired": v, "target_differed": changed[k]} for k, v in fired.most_common()}


def _differs(m: dict[str, Any]) -> bool:
    """Did the target's message make other calls or say other text than the draft's?"""
    from ...agents.calls import call_key, parse_calls

    draft = parse_calls(m.get("draft_text") or "", "json")
    mine = sorted(call_key(c["name"], c["args"]) for c in m["calls"])
    theirs = sorted(call_key(c["name"], c["arguments"]) for c in draft.calls)
    return mine != theirs or " ".join(m["text"].split()) != " ".join(draft.content.split())


def fed(records: dict[str, dict[str, Any]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for r in records.values():
        for m in assistant_messages(r):
            total.update({k: int(v) for k, v in (m.get("fed") or {}).items()})
    return dict(total)


SECONDS = ("draft prefill", "draft decode", "target prefill", "target decode + checks", "rest")


def seconds(method: str, records: dict[str, dict[str, Any]]) -> dict[str, float] | None:
    """Where a method's time went, summed over its messages (None: records from before the
    split was kept). A plain model's prefill and decode; SpecGuard's per model, its catch-up
    prefills apart from the rest (the target's checking forwards, prefill fused in, count as
    its decode + checks; `rest` is the graph's own work: selection, checks, bookkeeping)."""
    total = dict.fromkeys(SECONDS, 0.0)
    for m in (m for r in records.values() for m in assistant_messages(r)):
        spent = m.get("spent")
        if m.get("prefill_s") is not None:  # one model alone
            role = "draft" if method == "draft" else "target"
            total[f"{role} prefill"] += m["prefill_s"]
            total["target decode + checks" if role == "target" else "draft decode"] += m["decode_s"]
        elif spent and "draft_prefill_s" in spent:
            total["draft prefill"] += spent["draft_prefill_s"]
            total["draft decode"] += spent["draft_s"] - spent["draft_prefill_s"]
            total["target prefill"] += spent["target_prefill_s"]
            total["target decode + checks"] += spent["target_s"] - spent["target_prefill_s"]
            total["rest"] += spent["verify_s"]
        else:
            return None
    return total


def prefill_floor(rows: list[dict[str, Any]]) -> float | None:
    """The target's prefill share of its own time. A lossless method's target prefills the same
    tokens (the trajectory is the target's), so on these tasks its time cannot fall below this
    fraction of the target's, whatever its draft saves on decoding, unless the prefill itself
    gets cheaper."""
    target = next((r for r in rows if r["method"] == "target"), None)
    spent = target["seconds"] if target else None
    total = sum(spent.values()) if spent else 0.0
    return spent["target prefill"] / total if spent and total > 0 else None


def call_seconds(m: dict[str, Any]) -> float:
    return float((m.get("timing") or {}).get("total_s") or m.get("time_s") or 0.0)


def later_calls_ratio(record: dict[str, Any], target: dict[str, Any]) -> list[float]:
    """Per call after each task's first, this method's seconds over the target's, where the
    two wrote the same trajectory (the calls line up one to one)."""
    if trajectory(record) != trajectory(target):
        return []
    mine, theirs = assistant_messages(record), assistant_messages(target)
    return [call_seconds(a) / call_seconds(b) for a, b in zip(mine[1:], theirs[1:], strict=True)
            if call_seconds(b) > 0]  # fmt: skip


def summary(runs: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    target = runs.get("target", {})
    rows = []
    for m, rs in runs.items():
        n = len(rs)
        ok = sum(bool(r["correct"]) for r in rs.values())
        turns = sum(r["bfcl"]["turns"] for r in rs.values())
        turns_ok = sum(r["bfcl"]["turns_ok"] for r in rs.values())
        same = sum(trajectory(r) == trajectory(target[i]) for i, r in rs.items() if i in target)
        calls = sum(len(assistant_messages(r)) for r in rs.values())
        later = [x for i, r in rs.items() if i in target for x in later_calls_ratio(r, target[i])]
        lo, hi = wilson(ok, n) if n else (0.0, 0.0)
        rows.append({"method": m, "tasks": n, "accuracy": ok / n if n else 0.0, "ci": (lo, hi),
                     "turn_success": turns_ok / turns if turns else 0.0,
                     "latency_ratio": _paired_ratio(runs, m, sorted(rs)),
                     "median_latency_s": statistics.median(r["latency_s"] for r in rs.values())
                     if rs else None, "same_trajectory": same, "model_calls": calls,
                     "later_calls": statistics.median(later) if later else None,
                     "checks": checks(rs), "fed": fed(rs), "seconds": seconds(m, rs)})  # fmt: skip
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| method | tasks | accuracy (95 % CI) | turns passed | × target (median) "
           "| median s | trajectory = target's | model calls | later calls × target |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lo, hi = r["ci"]
        ratio = _ratio(r["latency_ratio"])
        out.append(f"| `{r['method']}` | {r['tasks']} | {100 * r['accuracy']:.1f} % "
                   f"({100 * lo:.0f}–{100 * hi:.0f}) | {100 * r['turn_success']:.1f} % | {ratio} "
                   f"| {r['median_latency_s']:.0f} | {r['same_trajectory']}/{r['tasks']} "
                   f"| {r['model_calls']} | {_ratio(r['later_calls'])} |")  # fmt: skip
    out.append("\n`later calls × target`: per call after a task's first, where the trajectory "
               "is the target's, the median of the call's seconds over the target's.")  # fmt: skip
    out.append("\nSeconds per model, summed over the compared tasks (`—`: records from before "
               "the split was kept):\n")  # fmt: skip
    out.append("| method | " + " | ".join(SECONDS) + " |")
    out.append("|---|" + "---|" * len(SECONDS))
    for r in rows:
        cells = [f"{r['seconds'][k]:.0f}" if r["seconds"] else "—" for k in SECONDS]
        out.append(f"| `{r['method']}` | " + " | ".join(cells) + " |")
    floor = prefill_floor(rows)
    if floor is not None:
        out.append(f"\nThe target spends {100 * floor:.0f} % of its time prefilling; a lossless "
                   f"method's target prefills the same tokens, so its time is at least "
                   f"{floor:.2f}× the target's before anything its draft costs.")  # fmt: skip
    out.append(
        "\nChecks that sent a drafted message to the target (fired / the target then "
        "wrote something else), and tokens fed per model:\n"
    )
    for r in rows:
        out.append(f"- `{r['method']}`: checks {json.dumps(r['checks'], ensure_ascii=False)}; "
                   f"fed {json.dumps(r['fed'])}")  # fmt: skip
    return "\n".join(out) + "\n"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"
