"""The bench's plots: accuracy against latency (each τ sweep drawn as its frontier, the goal
region shaded) and the τ sweep's accuracy, target share and latency ratio against τ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

GOAL_POINTS, GOAL_RATIO = 2.0, 0.75  # the goal: within 2 points of target, at <= 0.75x latency
BFCL_GOAL_RATIO = 0.70  # function calls are prefill-bound: the agents issue asks for <= 0.70x


def plot(rows: list[dict[str, Any]], path: Path, base_tau: float | None = None,
         goal_ratio: float = GOAL_RATIO) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.8))
    target = next((r for r in rows if r["method"] == "target"), None)
    if target is not None:
        x_max = goal_ratio * target["median_latency_s"]
        y_min = 100 * target["accuracy"] - GOAL_POINTS
        goal = f"goal: ≥ target − {GOAL_POINTS:g} points at ≤ {goal_ratio}× latency"
        ax.fill_between([0, x_max], y_min, 100, color="tab:green", alpha=0.12, label=goal)
    for name, points in tau_series(rows, base_tau).items():
        if len(points) > 1:
            ax.plot([r["median_latency_s"] for _, r in points],
                    [100 * r["accuracy"] for _, r in points], "-", alpha=0.6,
                    label=f"{name}, τ " + " → ".join(f"{t:g}" for t, _ in points))  # fmt: skip
    colours = plt.get_cmap("tab20").colors
    for i, r in enumerate(rows, 1):
        lo, hi = r["ci"]
        acc = 100 * r["accuracy"]
        ax.errorbar(r["median_latency_s"], acc, yerr=[[acc - 100 * lo], [100 * hi - acc]],
                    fmt="o", capsize=3, color=colours[(i - 1) % len(colours)],
                    label=f"{i}  {r['method']}")  # fmt: skip
    ax.set_xlim(left=0)
    ax.set_xlabel("median latency per problem (s)")
    ax.set_ylabel("accuracy (%), 95% Wilson CI")
    ax.set_title(f"accuracy vs latency, n = {rows[0]['n'] if rows else 0}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    _number_points(ax, [(r["median_latency_s"], 100 * r["accuracy"]) for r in rows])
    fig.savefig(path, dpi=120)
    plt.close(fig)


# Where a point's number may go, in points from the marker: right, then around it.
_OFFSETS = [(4, 3), (4, -10), (-11, 3), (-11, -10), (4, -3.5), (-11, -3.5), (-3.5, 5), (-3.5, -13)]
_LABEL = (7.0, 7.0)  # a one- or two-digit number at fontsize 7, in points
_ENOUGH = 3.0  # points of clearance past which a nearer spot is better than a clearer one


def label_offsets(xy: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Per point (in points on the page), the offset of its number's lower-left corner: the
    first candidate that keeps `_ENOUGH` clear of every other marker and every number placed
    before, else the one that keeps clearest. Methods a few seconds apart sit on top of each
    other at this scale; their names overlapped into one smudge."""
    placed: list[tuple[float, float]] = []  # centres of the numbers placed so far
    chosen: list[tuple[float, float]] = []
    for i, (x, y) in enumerate(xy):
        others = xy[:i] + xy[i + 1 :]
        best = max(_OFFSETS, key=lambda o, x=x, y=y, others=others: min(
            _ENOUGH, _clearance(x + o[0], y + o[1], others, placed)))  # fmt: skip
        placed.append((x + best[0] + _LABEL[0] / 2, y + best[1] + _LABEL[1] / 2))
        chosen.append(best)
    return chosen


def _clearance(x: float, y: float, markers: list[tuple[float, float]],
               labels: list[tuple[float, float]]) -> float:  # fmt: skip
    """How far a number with its lower-left corner at (x, y) keeps from the nearest marker or
    number (Chebyshev gap between boxes; negative when they overlap)."""
    w, h = _LABEL
    cx, cy = x + w / 2, y + h / 2
    gaps = [max(abs(cx - mx) - w / 2, abs(cy - my) - h / 2) for mx, my in markers]
    gaps += [max(abs(cx - lx) - w, abs(cy - ly) - h) for lx, ly in labels]
    return min(gaps, default=float("inf"))


def _number_points(ax: Any, xy: list[tuple[float, float]]) -> None:
    to_points = 72.0 / ax.figure.dpi
    page = [tuple(p * to_points for p in ax.transData.transform(q)) for q in xy]
    for i, (q, offset) in enumerate(zip(xy, label_offsets(page), strict=True), 1):
        ax.annotate(str(i), q, textcoords="offset points", xytext=offset, fontsize=7)


def tau_series(rows: list[dict[str, Any]], base_tau: float | None = None
               ) -> dict[str, list[tuple[float, dict[str, Any]]]]:  # fmt: skip
    """Rows of a τ sweep grouped by method without its τ, each series sorted by τ. A SpecGuard
    method without a τ override runs at the config's τ: with `base_tau` it joins its series."""
    from .methods import ABLATIONS, parse

    series: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for r in rows:
        base, overrides = parse(r["method"])
        tau = overrides.get("tau", base_tau if base in ABLATIONS else None)
        if tau is None:  # a plain method, or a SpecGuard one whose config τ is not known
            continue
        rest = "+".join(f"{k}={v}" for k, v in overrides.items() if k != "tau")
        series.setdefault(f"{base}@{rest}" if rest else base, []).append((tau, r))
    return {name: sorted(points, key=lambda p: p[0]) for name, points in series.items()}


def plot_tau_sweep(rows: list[dict[str, Any]], path: Path, base_tau: float | None = None,
                   goal_ratio: float = GOAL_RATIO) -> None:  # fmt: skip
    """Accuracy, target share and latency ratio against τ, with target-only for reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = next((r for r in rows if r["method"] == "target"), None)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    for name, points in tau_series(rows, base_tau).items():
        taus = [t for t, _ in points]
        axes[0].plot(taus, [100 * r["accuracy"] for _, r in points], "o-", label=name)
        axes[1].plot(taus, [r["target_share"] or 0.0 for _, r in points], "o-", label=name)
        if target is not None:
            axes[2].plot(taus, [r["latency_ratio"] for _, r in points], "o-", label=name)
    if target is not None:
        axes[0].axhline(100 * target["accuracy"], color="k", ls="--", lw=1, label="target")
        axes[2].axhline(1.0, color="k", ls="--", lw=1, label="target")
        axes[2].axhline(goal_ratio, color="r", ls=":", lw=1, label=f"{goal_ratio} × target")
    for ax, ylabel in zip(axes, ("accuracy (%)", "share of steps recomputed by target",
                                 "median latency / target's"), strict=True):  # fmt: skip
        ax.set_xlabel("τ")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=7)
    fig.suptitle(f"τ sweep, n = {rows[0]['n'] if rows else 0} problems")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
