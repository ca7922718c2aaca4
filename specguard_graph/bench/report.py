"""Summary table (Markdown) from the per-method JSONL results; the plots are in `plots.py`."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ..results import ResultLog
from .compare import common_problems as _common
from .compare import (
    engine_markdown,
    lossless_markdown,
    paired_markdown,
    seconds_per_token,
    tokens_written,
)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval for a proportion (sane at 0 and n, unlike p ± 2σ)."""
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def load_results(out_dir: Path, methods: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    return {m: ResultLog(out_dir / f"{m}.jsonl", key="id").done() for m in methods}


def _paired_ratio(
    results: dict[str, dict[str, dict[str, Any]]], method: str, ids: list[str]
) -> float | None:
    """Median of per-problem latency ratios to the target: a ratio of medians jumps when a
    method's latencies leave a gap at their middle, the paired ratio does not."""
    if "target" not in results or not ids:
        return None
    target = results["target"]
    return statistics.median(results[method][i]["latency_s"] / target[i]["latency_s"] for i in ids)


def summarize(results: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per method, on the problems every method has finished (a fair comparison)."""
    common = _common(results)
    target_lat = None
    if "target" in results and common:
        target_lat = statistics.median(results["target"][i]["latency_s"] for i in common)
    ids = sorted(common)
    rows = []
    for method, res in results.items():
        rs = [res[i] for i in ids]
        if not rs:
            continue
        correct = sum(r["correct"] for r in rs)
        lo, hi = wilson(correct, len(rs))
        lat = statistics.median(r["latency_s"] for r in rs)
        steps = sum(r.get("steps", 0) for r in rs)
        total_time = sum(r["latency_s"] for r in rs)
        rows.append({
            "method": method, "n": len(rs), "accuracy": correct / len(rs), "ci": (lo, hi),
            "median_latency_s": lat,
            "latency_ratio": lat / target_lat if target_lat else None,
            "paired_ratio": _paired_ratio(results, method, ids),
            "target_share": (sum(r.get("target_steps", 0) for r in rs) / steps) if steps else None,
            "draft_tokens": statistics.mean(tokens_written(method, r, "draft") for r in rs),
            "target_tokens": statistics.mean(tokens_written(method, r, "target") for r in rs),
            "verify_share": sum(r.get("verify_s", 0.0) for r in rs) / total_time,
            "ms_per_token": _ms_per_token(method, rs),
        })  # fmt: skip
    return rows


def _ms_per_token(method: str, rs: list[dict[str, Any]]) -> float | None:
    """Median over problems of `seconds_per_token`, in ms: at τ = 0 every step is an accepted
    draft step, so this against `draft`'s is what an accepted step costs beyond a bare draft
    decode."""
    per = [1000 * t for r in rs if (t := seconds_per_token(method, r)) is not None]
    return statistics.median(per) if per else None


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        f"Reproduce: `{command}`",
        "",
        "| method | n | accuracy (95% CI) | median latency s | vs target | paired vs target "
        "| target share of steps | draft tok | target tok | verify share | ms / token |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["ci"]
        lines.append(
            f"| {r['method']} | {r['n']} | {100 * r['accuracy']:.1f} % "
            f"({100 * lo:.0f}–{100 * hi:.0f}) | {r['median_latency_s']:.1f} | "
            f"{_fmt(r['latency_ratio'], '.2f')} | {_fmt(r['paired_ratio'], '.2f')} | "
            f"{_fmt(r['target_share'], '.2f')} | "
            f"{r['draft_tokens']:.0f} | {r['target_tokens']:.0f} | "
            f"{100 * r['verify_share']:.1f} % | {_fmt(r['ms_per_token'], '.0f')} |"
        )
    return "\n".join(lines) + "\n"


def kernels_markdown(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Which CPU kernels wrote the compared records (`machine.cpu_capability`, per record:
    a resumed run can span machines), and in which weight formats (`run.weights`, where the
    records name them); records from before a field are "unrecorded"."""
    common = _common(results)
    out = ""
    for field, what in (("cpu", "CPU kernels"), ("weights", "Weights (draft/target)")):
        counts: dict[str, int] = {}
        for res in results.values():
            for i in common:
                value = str(res[i].get(field, "unrecorded"))
                counts[value] = counts.get(value, 0) + 1
        if counts and (field == "cpu" or set(counts) != {"unrecorded"}):
            parts = ", ".join(f"{value} {n}" for value, n in sorted(counts.items()))
            out += f"{what} of the compared records: {parts}.\n"
    return out


def goal_ratio(results: dict[str, dict[str, dict[str, Any]]]) -> float:
    """The goal's latency bound: BFCL runs (records graded by BFCL) have their own."""
    from .plots import BFCL_GOAL_RATIO, GOAL_RATIO

    bfcl = any("bfcl" in r for res in results.values() for r in res.values())
    return BFCL_GOAL_RATIO if bfcl else GOAL_RATIO


def goal_markdown(rows: list[dict[str, Any]], ratio: float | None = None) -> str:
    """Whether any method reaches the goal region and, if none does, which comes closest
    from each side, so the verdict is read from the run rather than off a plot."""
    from .plots import GOAL_POINTS, GOAL_RATIO

    ratio = ratio or GOAL_RATIO
    target = next((r for r in rows if r["method"] == "target"), None)
    if target is None:
        return ""
    floor = 100 * target["accuracy"] - GOAL_POINTS
    others = [r for r in rows if r["method"] != "target" and r["latency_ratio"] is not None]
    fast = [r for r in others if r["latency_ratio"] <= ratio]
    near = [r for r in others if 100 * r["accuracy"] >= floor - 1e-9]

    def show(r: dict[str, Any]) -> str:
        return f"`{r['method']}` ({100 * r['accuracy']:.1f} %, {r['latency_ratio']:.2f}×)"

    line = (f"Goal: accuracy ≥ {floor:.1f} % (target − {GOAL_POINTS:g} points) at ≤ "
            f"{ratio}× the target's median latency. ")  # fmt: skip
    hits = [r for r in fast if r in near]
    if hits:
        return line + "**Reached** by " + ", ".join(map(show, hits)) + ".\n"
    line += "**Not reached.**"
    if fast:
        best = max(fast, key=lambda r: (r["accuracy"], -r["latency_ratio"]))
        line += f" Most accurate at ≤ {ratio}×: {show(best)}."
    if near:
        quickest = min(near, key=lambda r: r["latency_ratio"])
        line += f" Fastest within {GOAL_POINTS:g} points: {show(quickest)}."
    return line + "\n"


def write_summary(out: Path, names: list[str], command: str, *, sweep: bool,
                  base_tau: float | None = None) -> str:  # fmt: skip
    """summary.md (table, paired comparison, lossless check) and the plots for what `out`
    holds of `names`; returns the Markdown. `base_tau`: the τ of the run's config, where a
    SpecGuard method without a τ override sits on its sweep."""
    from ..errors import InputError
    from .plots import plot, plot_tau_sweep, tau_series

    results = load_results(out, names)
    rows = summarize(results)
    if not rows:
        raise InputError(f"no finished results for {', '.join(names)} in {out}")
    summary = markdown(rows, command)
    from .program_stats import program_markdown

    ratio = goal_ratio(results)
    extras = (kernels_markdown(results), goal_markdown(rows, ratio), engine_markdown(results),
              paired_markdown(results), lossless_markdown(results),
              program_markdown(results))  # fmt: skip
    for extra in extras:
        if extra:
            summary += "\n" + extra
    (out / "summary.md").write_text(summary)
    plot(rows, out / "accuracy_vs_latency.png", base_tau, ratio)
    if sweep or any(len(points) > 1 for points in tau_series(rows, base_tau).values()):
        plot_tau_sweep(rows, out / "tau_sweep.png", base_tau, ratio)
    return summary
