"""Methods compared on the same problems: who solved what the other did not (McNemar), whether
a lossless method wrote the target's text, and each method's time per token against llama.cpp's
plain target."""

from __future__ import annotations

import statistics
from typing import Any

from .methods import parse


def tokens_written(method: str, r: dict[str, Any], model: str) -> int:
    """Tokens written by `model`: step methods count them; plain ones wrote `tokens` with
    the target (target, sd: sd's output is the target's) or the draft (draft)."""
    if f"{model}_tokens" in r:
        return int(r[f"{model}_tokens"])
    writer = "draft" if method == "draft" else "target"
    return int(r.get("tokens", 0)) if writer == model else 0


def seconds_per_token(method: str, r: dict[str, Any]) -> float | None:
    """A problem's latency per token the method's models wrote (a rejected candidate's tokens
    count); None where it wrote none."""
    n = tokens_written(method, r, "draft") + tokens_written(method, r, "target")
    return r["latency_s"] / n if n else None


def common_problems(results: dict[str, dict[str, dict[str, Any]]]) -> set[str]:
    """Problems every method has finished: the only fair ground for comparing them."""
    return set.intersection(*(set(r) for r in results.values())) if results else set()


def paired(results: dict[str, dict[str, dict[str, Any]]], a: str, b: str) -> dict[str, Any]:
    """Which problems only `a` or only `b` solved, with the exact McNemar p-value.

    Both methods see the same problems, so the discordant pairs carry the evidence; the
    Wilson intervals of two accuracies overlap long after a paired test can tell them apart.
    """
    from scipy.stats import binomtest

    common = common_problems(results)
    ra, rb = results[a], results[b]
    a_only = sum(bool(ra[i]["correct"]) and not rb[i]["correct"] for i in common)
    b_only = sum(bool(rb[i]["correct"]) and not ra[i]["correct"] for i in common)
    p = binomtest(a_only, a_only + b_only, 0.5).pvalue if a_only + b_only else 1.0
    return {"n": len(common), "a_only": a_only, "b_only": b_only, "p": float(p)}


def paired_markdown(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Every pair of methods once (upper triangle), as `row-only:column-only (p)`."""
    methods = list(results)
    if len(methods) < 2 or not common_problems(results):
        return ""
    lines = [
        "Paired on the same problems — cell: solved only by the row method : only by the "
        "column method (exact McNemar p, two-sided):",
        "",
        "| | " + " | ".join(methods[1:]) + " |",
        "|---" * len(methods) + "|",
    ]
    for i, a in enumerate(methods[:-1]):
        pairs = [paired(results, a, b) for b in methods[i + 1 :]]
        cells = [""] * i + [f"{c['a_only']}:{c['b_only']} ({c['p']:.2g})" for c in pairs]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# methods whose text must equal the target's greedy text
LOSSLESS = ("sd", "sd-verify", "target-lookup", "specguard-lossless")


def _lossless(method: str) -> bool:
    """The methods above, and greedy SpecGuard that verifies every step (τ ≥ 1, as issue 58's
    τ = 1.01: the verified fallback writes the target's greedy step from the target's own
    prefix, step after step)."""
    if method in LOSSLESS:
        return True
    base, at, _ = method.partition("@")
    if base != "specguard-greedy" or not at:
        return False
    params = parse(method)[1]
    return params.get("tau", 0.0) >= 1.0 and params.get("fallback", "verify") == "verify"


def lossless_markdown(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """For each lossless method: on how many problems its text is the target's, and where the
    others first differ. A lossless method that differs shows the numerics are not faithful."""
    if "target" not in results:
        return ""
    common = sorted(common_problems(results))
    lines = []
    for method in (m for m in results if _lossless(m)):
        firsts = []
        for i in common:
            a, b = results[method][i]["text"], results["target"][i]["text"]
            if a != b:
                pairs = zip(a, b, strict=False)  # texts of different lengths: the shorter
                firsts.append(next((j for j, (x, y) in enumerate(pairs) if x != y),
                                   min(len(a), len(b))))  # fmt: skip
        where = ""
        if firsts:
            where = f"; first differing character at a median of {statistics.median(firsts):.0f}"
        lines.append(
            f"`{method}` text identical to `target`'s on {len(common) - len(firsts)} of "
            f"{len(common)} problems{where}."
        )
    return "\n".join(lines) + "\n" if lines else ""


def engine_markdown(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Each method's seconds per generated token against `llamacpp-target`'s, as the median of
    the per-problem ratios (issue 58): the two engines write different texts, so whole-answer
    latencies do not compare, but the time per token does."""
    base = results.get("llamacpp-target")
    common = sorted(common_problems(results))
    if not base or not common:
        return ""

    lines = ["Per generated token against `llamacpp-target` (the same GGUF in llama.cpp): the "
             "median of the per-problem ratios of seconds per token.", "",
             "| method | × llama.cpp per token | problems |", "|---|---|---|"]  # fmt: skip
    for method in (m for m in results if m != "llamacpp-target"):
        ratios = [a / b for i in common
                  if (a := seconds_per_token(method, results[method][i]))
                  and (b := seconds_per_token("llamacpp-target", base[i]))]  # fmt: skip
        if ratios:
            lines.append(f"| {method} | {statistics.median(ratios):.2f} | {len(ratios)} |")
    return "\n".join(lines) + "\n"
