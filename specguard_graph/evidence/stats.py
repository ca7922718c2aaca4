"""AUROC with a bootstrap interval over problems (steps of one problem are not independent)."""

from __future__ import annotations

import random
from collections.abc import Sequence


def auroc(scores: Sequence[float], good: Sequence[bool]) -> float | None:
    """P(score of a good step > score of a bad one), ties counting half (Mann-Whitney U);
    None when either class is empty."""
    pos = [s for s, g in zip(scores, good, strict=True) if g]
    neg = [s for s, g in zip(scores, good, strict=True) if not g]
    if not pos or not neg:
        return None
    ranked = sorted((s, i) for i, s in enumerate([*pos, *neg]))
    ranks = [0.0] * len(ranked)
    i = 0
    while i < len(ranked):  # average ranks over ties
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[ranked[k][1]] = (i + j) / 2 + 1
        i = j + 1
    u = sum(ranks[: len(pos)]) - len(pos) * (len(pos) + 1) / 2
    return u / (len(pos) * len(neg))


def bootstrap(
    groups: Sequence[Sequence[tuple[float, bool]]], *, draws: int = 1000, seed: int = 0
) -> tuple[float, float] | None:
    """95 % interval of the AUROC, resampling whole problems (`groups`) with replacement."""
    rng = random.Random(seed)
    values = []
    for _ in range(draws):
        sample = [pair for _ in groups for pair in rng.choice(groups)]
        a = auroc([s for s, _ in sample], [g for _, g in sample])
        if a is not None:
            values.append(a)
    if len(values) < draws // 2:
        return None
    values.sort()
    return values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]


def roc(scores: Sequence[float], good: Sequence[bool]) -> tuple[list[float], list[float]]:
    """(false-positive rates, true-positive rates) as the threshold falls, for plotting."""
    pairs = sorted(zip(scores, good, strict=True), key=lambda p: -p[0])
    n_pos = sum(good) or 1
    n_neg = (len(good) - sum(good)) or 1
    fpr, tpr, tp, fp = [0.0], [0.0], 0, 0
    for _, g in pairs:
        tp, fp = tp + g, fp + (not g)
        fpr.append(fp / n_neg)
        tpr.append(tp / n_pos)
    return fpr, tpr
