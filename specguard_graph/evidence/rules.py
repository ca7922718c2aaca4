"""Decision rules fitted on some problems and scored on others.

A rule that looks good on the steps it was fitted on says nothing; steps of one problem are
not independent either. So every rule here is scored by cross-validation over problems
(scikit-learn's `GroupKFold`): fitted on the other folds' problems, its held-out scores pooled,
one AUROC per label. The candidates the evidence issue names, beside each single signal as it
stands (no fitting), so the table says what each buys:

* a logistic combiner of every signal the records hold;
* per-position τ: the score with one offset per step position (0, 1, 2, 3, 4+), fitted; a
  threshold on it is a τ per position, since the first steps of a solution may need a
  different bar than the last;
* refusing fabricated output: the score, except that a step writing a program's output block
  itself scores below every τ (`reject_fabricated_output`; nothing to fit);
* refusing false arithmetic: the score, except that a step stating an equation that does not
  hold scores below every τ (`reject_false_arithmetic`; nothing to fit).
Target-side log-prob gating is the single signal "target log-prob min" (after `--annotate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..refusals import REFUSALS as LIVE_CHECKS
from ..refusals import Check
from .stats import auroc, bootstrap

Step = dict[str, Any]
Problems = list[tuple[str, list[tuple[Step, dict[str, Any], bool]]]]
SCORE = "score (β-mix)"
POSITIONS = 5  # one-hot buckets: 0, 1, 2, 3, 4 and later
COMBINER, PER_POSITION, NO_FABRICATED, NO_FALSE_MATH = (
    "logistic (all signals)",
    "per-position τ (score, offset per step 0–4+)",
    "score, fabricated output refused",
    "score, false arithmetic refused",
)


def _features(signals: dict[str, Any], s: Step, c: dict[str, Any]) -> list[float] | None:
    row = []
    for fn in signals.values():
        v = fn(s, c)
        if v is None or not math.isfinite(float(v)):
            return None
        row.append(float(v))
    return row


def _position(c: dict[str, Any]) -> list[float]:
    at = min(int(c.get("position") or 0), POSITIONS - 1)
    return [float(i == at) for i in range(POSITIONS)]


def _cross_validated(x: Any, y: Any, groups: list[int], folds: int) -> list[float]:
    """Held-out logistic-regression probabilities, pooled over `GroupKFold` folds."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    pooled = np.zeros(len(y))
    for train, test in GroupKFold(n_splits=min(folds, len(set(groups)))).split(x, y, groups):
        if len(set(y[train])) < 2:  # a fold whose training steps are all one class
            pooled[test] = 0.5
            continue
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        model.fit(x[train], y[train])
        pooled[test] = model.predict_proba(x[test])[:, 1]
    return pooled.tolist()


# rules that keep the score but put a candidate failing a cheap check below every τ: the
# live options' own checks (`refusals.REFUSALS`)
REFUSALS: dict[str, Check] = {
    NO_FABRICATED: LIVE_CHECKS["reject_fabricated_output"],
    NO_FALSE_MATH: LIVE_CHECKS["reject_false_arithmetic"],
}


# per label: (problem index of each step, its label, {rule: held-out score of each step})
Pooled = dict[str, tuple[list[int], list[bool], dict[str, list[float]]] | None]


def held_out_scores(problems: Problems, signals: dict[str, Any], labels: dict[str, Any],
                    folds: int = 5) -> Pooled:  # fmt: skip
    """Every step's held-out score under the fitted rules and each single signal, per label
    (None: the label has one class or one problem). Only signals present on every step take
    part (e.g. no grounding for a served draft, no target log-probs before `--annotate`), so
    every rule is scored on the same steps; the rules built on the score need it among them."""
    import numpy as np

    every = [(s, c) for _, rows in problems for s, c, _ in rows]
    signals = {n: fn for n, fn in signals.items()
               if all(_features({n: fn}, s, c) is not None for s, c in every)}  # fmt: skip
    if not signals:
        return {}
    names = list(signals)
    j = names.index(SCORE) if SCORE in names else None
    rules: dict[str, Callable[[Any, Any, list[dict[str, Any]], list[int]], list[float]]] = {
        COMBINER: lambda x, y, cs, g: _cross_validated(x, y, g, folds)
    }
    if j is not None:
        rules[PER_POSITION] = lambda x, y, cs, g: _cross_validated(
            np.array([[r[j], *_position(c)] for r, c in zip(x, cs, strict=True)]), y, g, folds
        )
        for name, refuse in REFUSALS.items():
            rules[name] = lambda x, y, cs, g, refuse=refuse: [
                -1.0 if refuse(c) else r[j] for r, c in zip(x, cs, strict=True)
            ]
    out: Pooled = {}
    for lname, label in labels.items():
        xs, ys, cs, groups = [], [], [], []
        for g, (_, rows) in enumerate(problems):
            for s, c, right in rows:
                row, v = _features(signals, s, c), label(s, c, right)
                if row is not None and v is not None:
                    xs.append(row), ys.append(bool(v)), cs.append(c), groups.append(g)
        if len(set(ys)) < 2 or len(set(groups)) < 2:
            out[lname] = None
            continue
        x, y = np.array(xs), np.array(ys)
        scores = {rule: list(fn(x, y, cs, groups)) for rule, fn in rules.items()}
        scores |= {name: x[:, k].tolist() for k, name in enumerate(names)}
        out[lname] = (groups, ys, scores)
    return out


def held_out(problems: Problems, signals: dict[str, Any], labels: dict[str, Any],
             folds: int = 5) -> dict[str, dict[str, float | None]]:  # fmt: skip
    """{rule: {label: held-out AUROC}} (see `held_out_scores`)."""
    out: dict[str, dict[str, float | None]] = {}
    pooled = held_out_scores(problems, signals, labels, folds)
    names = _rules(pooled)
    for lname, entry in pooled.items():
        for rule in names:
            out.setdefault(rule, {})[lname] = (
                None if entry is None else auroc(entry[2][rule], entry[1])
            )
    return out


def _rules(pooled: Pooled) -> list[str]:
    return next((list(e[2]) for e in pooled.values() if e is not None), [])


def markdown(pooled: Pooled, *, draws: int = 1000) -> str:
    """One row per rule, one cell per label: held-out AUROC [95 % bootstrap CI over problems]."""
    labels = list(pooled)
    lines = ["| rule | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for rule in _rules(pooled):
        cells = []
        for entry in pooled.values():
            a = None if entry is None else auroc(entry[2][rule], entry[1])
            if entry is None or a is None:
                cells.append("—")
                continue
            groups, ys, scores = entry
            by_problem: dict[int, list[tuple[float, bool]]] = {}
            for g, v, y in zip(groups, scores[rule], ys, strict=True):
                by_problem.setdefault(g, []).append((v, y))
            ci = bootstrap(list(by_problem.values()), draws=draws)
            cells.append(f"{a:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""))
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
