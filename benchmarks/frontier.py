"""A run's accuracy-latency frontier beside an older run's, on the problems the new run finished.

Issue 37 re-measures the τ frontier with the verified fallback; the old frontier (rewrite
fallback) is read from its committed records, restricted to the same problems, so the two sit
on one plot and in one table; the old run's `sd` (transformers' assisted generation, the
reference lossless row) comes with it. Ratios are to each run's own target (each run
interleaved its methods per problem), so two runs on machines of different speed still compare.

    .venv/bin/python benchmarks/frontier.py benchmarks/results/gsm8k-30-verify \
        benchmarks/results/gsm8k-100 --out benchmarks/results/gsm8k-30-verify/frontier.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specguard_graph.bench.compare import common_problems
from specguard_graph.bench.plots import GOAL_POINTS, GOAL_RATIO, tau_series
from specguard_graph.bench.report import load_results, summarize

CONFIG = Path("benchmarks/results/gsm8k-100/calibrated.json")
PLAIN = ["target", "draft", "sd", "sd-verify", "rsd"]
COLOURS = ["black", "tab:red", "tab:purple", "tab:green", "tab:brown"]


def methods_in(run: Path, like: set[str] | None = None) -> list[str]:
    """The run's method logs; with `like`, only those methods and the greedy τ sweep (an old
    run also holds ablations and label files)."""
    names = [p.stem for p in run.glob("*.jsonl") if not p.stem.endswith("_labels")]
    if like is not None:
        names = [m for m in names if m in like or m.startswith("specguard-greedy@tau=")]
    return sorted(names, key=lambda m: (m not in PLAIN, PLAIN.index(m) if m in PLAIN else 0, m))


def rows_of(run: Path, methods: list[str], only: set[str] | None = None
            ) -> tuple[list[dict[str, Any]], set[str]]:  # fmt: skip
    """Summary rows of `methods` in `run` (restricted to `only`'s problems, and to methods
    that finished all of them) and the problems they cover."""
    results = load_results(run, methods)
    if only is not None:
        results = {m: {i: r for i, r in res.items() if i in only} for m, res in results.items()}
        results = {m: res for m, res in results.items() if set(res) >= only}
    return summarize(results), common_problems(results)


def table(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> str:
    olds = {r["method"]: r for r in old}
    lines = ["| method | accuracy | × target | paired | old: accuracy | × target | paired |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    names = [r["method"] for r in new] + [m for m in olds if m not in {r["method"] for r in new}]
    news = {r["method"]: r for r in new}
    for m in names:
        cells = []
        for r in (news.get(m), olds.get(m)):
            cells += (["—"] * 3 if r is None else [f"{100 * r['accuracy']:.0f} %",
                      f"{r['latency_ratio']:.2f}", f"{r['paired_ratio']:.2f}"])  # fmt: skip
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(new: list[dict[str, Any]], old: list[dict[str, Any]], tau: float, path: Path) -> None:
    """`tau`: the config's τ, the τ of `specguard-greedy` in both runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.8))
    target = next(r for r in new if r["method"] == "target")
    ax.fill_between([0, GOAL_RATIO], 100 * target["accuracy"] - GOAL_POINTS, 100,
                    color="tab:green", alpha=0.12,
                    label=f"goal: ≥ target − {GOAL_POINTS:g} points at ≤ {GOAL_RATIO}×",
                    )  # fmt: skip
    for rows, style, run in ((new, "o", "verified"), (old, "s", "old")):
        for name, points in tau_series(rows, tau).items():
            ax.plot([r["latency_ratio"] for _, r in points],
                    [100 * r["accuracy"] for _, r in points], style + "-",
                    mfc="none" if run == "old" else None,
                    label=f"{name} ({run}), τ " + " → ".join(f"{t:.2g}" for t, _ in points),
                    )  # fmt: skip
        for r in rows:
            if r["method"] in PLAIN:
                colour = COLOURS[PLAIN.index(r["method"])]
                ax.plot(r["latency_ratio"], 100 * r["accuracy"], style, color=colour,
                        mfc="none" if run == "old" else colour, ms=8,
                        label=f"{r['method']} ({run})")  # fmt: skip
    ax.set_xlim(left=0)
    ax.set_xlabel("median latency, × the same run's target")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"gsm8k, the same {target['n']} problems: verified fallback against the old run")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new", type=Path)
    ap.add_argument("old", type=Path)
    ap.add_argument("--out", type=Path, help="the plot (PNG); the table goes to stdout")
    ap.add_argument("--config", type=Path, default=CONFIG,
                    help="both runs' config: its τ is the τ of `specguard-greedy`")  # fmt: skip
    args = ap.parse_args()
    names = methods_in(args.new)
    new, ids = rows_of(args.new, names)
    old, _ = rows_of(args.old, methods_in(args.old, {*names, "specguard-greedy", "sd"}), ids)
    print(f"{len(ids)} problems: {args.new} (new) beside {args.old} (old), same problems\n")
    print(table(new, old))
    if args.out:
        tau = float(json.loads(args.config.read_text())["tau"])
        plot(new, old, tau, args.out)


if __name__ == "__main__":
    main()
