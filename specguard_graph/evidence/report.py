"""`specguard evidence`: every signal against every label, from the bench records alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..results import ResultLog
from . import labels
from .stats import auroc, bootstrap, roc

Step = dict[str, Any]

# signal name -> value from a step record (higher should mean a better step), None if absent
SIGNALS: dict[str, Callable[[Step, dict[str, Any]], float | None]] = {
    "grounding (ABGV)": lambda s, c: s.get("grounding"),
    "log-prob (LPBV, min)": lambda s, c: s.get("logprob"),
    "log-prob mean": lambda s, c: c.get("logprob_mean"),
    "score (β-mix)": lambda s, c: s.get("score"),
    "vote share": lambda s, c: c.get("vote"),
    "target log-prob min": lambda s, c: c.get("target_logprob_min"),
    "target log-prob mean": lambda s, c: c.get("target_logprob_mean"),
    "step length (−tokens)": lambda s, c: -float(c.get("tokens") or 0),
    # a rejected step only: how much of it the verifying target agreed with (docs/design.md)
    "target kept (share, rejected steps)": lambda s, c: _kept_share(s),
    "no code": lambda s, c: float(not labels.contains_code(c.get("text", ""))),
    # a label that only tracks how far into the solution a step is (the judge rates partial
    # solutions low) shows up here, and a signal that merely tracks position cannot beat it
    "step position (later)": lambda s, c: float(c.get("position") or 0),
}
# label name -> is the scored candidate good? (None: the label says nothing about this step)
LABELS: dict[str, Callable[[Step, dict[str, Any], bool], bool | None]] = {
    "arithmetic": lambda s, c, right: labels.arithmetic(c.get("text", "")),
    "no fabricated output": lambda s, c, right: not labels.fabricated_output(c.get("text", "")),
    "judge ≥ 5 of 9": lambda s, c, right: None if c.get("judge") is None else c["judge"] >= 5 / 9,
    "value: target reaches gold from it": lambda s, c, right: c.get("value_with"),
    "value: helps (+1) vs hurts (−1)": lambda s, c, right: (
        None
        if c.get("value_with") is None or c["value_with"] == c["value_without"]
        else c["value_with"]
    ),
    "problem ends right": lambda s, c, right: right,
}


def _kept_share(s: Step) -> float | None:
    v = s.get("verified")
    return v["kept"] / v["candidate"] if v and v.get("candidate") else None


def units(
    results_dir: Path, methods: list[str] | None
) -> list[tuple[str, list[tuple[Step, dict, bool]]]]:
    """(problem key, [(step record, scored candidate, problem correct)]) from every SpecGuard
    method's JSONL; the scored candidate is the selected draft candidate, whatever replaced it,
    with its step index (`position`) and the target's annotations of it (`annotate.py`,
    `value.py`) where they were computed."""
    from . import annotate, records, value

    notes, values = annotate.load(results_dir), value.load(results_dir)
    problems = []
    for f in records.result_files(results_dir, methods):
        for rec in ResultLog(f, key="id").done().values():
            steps = rec.get("step_records") or []
            rows = []
            key = f"{f.stem}/{rec['id']}"
            for i, s in enumerate(steps):
                cand = records.scored_candidate(s)
                if cand is not None:
                    scored = {**cand, "position": i, **notes.get(key, {}).get(str(i), {}),
                              **values.get(key, {}).get(str(i), {})}  # fmt: skip
                    rows.append((s, scored, bool(rec.get("correct"))))
            if rows:
                problems.append((key, rows))
    if not problems:
        raise InputError(
            f"{results_dir}: no step records (run `specguard bench` on SpecGuard methods)"
        )
    return problems


def table(
    problems: list[tuple[str, list[tuple[Step, dict, bool]]]], draws: int = 1000
) -> tuple[str, dict]:
    """Markdown: AUROC [95 % CI] (good / bad steps) per signal × label, and the ROC points."""
    curves: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    head = "| signal | " + " | ".join(LABELS) + " |"
    lines = [head, "|---|" + "---|" * len(LABELS)]
    for sname, signal in SIGNALS.items():
        cells = []
        for lname, label in LABELS.items():
            groups = []
            for _, rows in problems:
                pairs = []
                for s, c, right in rows:
                    v, g = signal(s, c), label(s, c, right)
                    if v is not None and g is not None:
                        pairs.append((float(v), bool(g)))
                if pairs:
                    groups.append(pairs)
            flat = [p for g in groups for p in g]
            a = auroc([v for v, _ in flat], [g for _, g in flat]) if flat else None
            if a is None:
                cells.append("—")
                continue
            ci = bootstrap(groups, draws=draws)
            n_good = sum(g for _, g in flat)
            interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
            cells.append(f"{a:.2f}{interval} ({n_good}/{len(flat) - n_good})")
            curves.setdefault(lname, {})[sname] = roc([v for v, _ in flat], [g for _, g in flat])
        lines.append(f"| {sname} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", curves


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(1, len(curves)), figsize=(5 * max(1, len(curves)), 4.5))
    axes = axes if hasattr(axes, "__len__") else [axes]
    for ax, (lname, by_signal) in zip(axes, curves.items(), strict=False):
        for sname, (fpr, tpr) in by_signal.items():
            ax.plot(fpr, tpr, label=sname)
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
        ax.set(title=f"label: {lname}", xlabel="false positive rate", ylabel="true positive rate")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
