"""Decision rules fitted on some problems and scored on others.

A rule that looks good on the steps it was fitted on says nothing; steps of one problem are
not independent either. So every rule here is scored by cross-validation over problems
(scikit-learn's `GroupKFold`): fitted on the other folds' problems, its held-out scores pooled,
one AUROC per label. The candidates: a logistic combiner of every signal the records hold,
and each single signal as it stands (no fitting), so the table says what combining buys.
"""

from __future__ import annotations

import math
from typing import Any

from .stats import auroc

Step = dict[str, Any]
Problems = list[tuple[str, list[tuple[Step, dict[str, Any], bool]]]]


def _features(signals: dict[str, Any], s: Step, c: dict[str, Any]) -> list[float] | None:
    row = []
    for fn in signals.values():
        v = fn(s, c)
        if v is None or not math.isfinite(float(v)):
            return None
        row.append(float(v))
    return row


def held_out(problems: Problems, signals: dict[str, Any], labels: dict[str, Any],
             folds: int = 5) -> dict[str, dict[str, float | None]]:  # fmt: skip
    """{rule: {label: held-out AUROC}} for the logistic combiner and each single signal. Only
    signals present on every step take part (e.g. no grounding for a served draft, no target
    log-probs before `--annotate`), so every rule is scored on the same steps."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    every = [(s, c) for _, rows in problems for s, c, _ in rows]
    signals = {n: fn for n, fn in signals.items()
               if all(_features({n: fn}, s, c) is not None for s, c in every)}  # fmt: skip
    if not signals:
        return {}
    out: dict[str, dict[str, float | None]] = {"logistic (all signals)": {}}
    out.update({name: {} for name in signals})
    for lname, label in labels.items():
        xs, ys, groups = [], [], []
        for g, (_, rows) in enumerate(problems):
            for s, c, right in rows:
                x, y = _features(signals, s, c), label(s, c, right)
                if x is not None and y is not None:
                    xs.append(x), ys.append(bool(y)), groups.append(g)
        n_groups = len(set(groups))
        if len(set(ys)) < 2 or n_groups < 2:
            for rule in out:
                out[rule][lname] = None
            continue
        x, y = np.array(xs), np.array(ys)
        pooled = np.zeros(len(y))
        for train, test in GroupKFold(n_splits=min(folds, n_groups)).split(x, y, groups):
            if len(set(y[train])) < 2:  # a fold whose training steps are all one class
                pooled[test] = 0.5
                continue
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
            model.fit(x[train], y[train])
            pooled[test] = model.predict_proba(x[test])[:, 1]
        out["logistic (all signals)"][lname] = auroc(pooled.tolist(), ys)
        for j, name in enumerate(signals):
            out[name][lname] = auroc(x[:, j].tolist(), ys)
    return out


def markdown(result: dict[str, dict[str, float | None]], labels: list[str]) -> str:
    lines = ["| rule | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for rule, by_label in result.items():
        cells = ["—" if by_label.get(lab) is None else f"{by_label[lab]:.2f}" for lab in labels]
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
