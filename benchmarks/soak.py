"""Soak: 200 consecutive graph runs on the tiny models, RSS sampled every 20 runs.

    .venv/bin/python benchmarks/soak.py --runs 200 --every 20

Prints the RSS series and its least-squares slope (MB per 100 runs) over the second half
(the first runs warm allocator pools and caches). Flat memory means a slope near 0.
"""

from __future__ import annotations

import argparse
import gc

import psutil

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.machine import describe
from specguard_graph.testing import tiny_models


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def sessions_of(graph):
    """The run sessions the graph's nodes share (bound at build time, one store per graph)."""
    return graph.builder.nodes["draft_k"].runnable.func.deps.sessions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--every", type=int, default=20)
    args = ap.parse_args()
    print(describe(), flush=True)
    m = tiny_models()
    cfg = SpecGuardConfig(k=4, tau=0.6, max_steps=6, max_step_tokens=24)
    graph = build_graph(m.draft, m.target, embedder=m.embedder, config=cfg).compile()
    proc = psutil.Process()
    xs, ys = [], []
    print("| runs | RSS MB | live sessions |")
    print("|---|---|---|")
    for i in range(1, args.runs + 1):
        graph.invoke({"question": f"Question {i}: what is {i} + {i}?"})
        if i % args.every == 0:
            gc.collect()
            rss = proc.memory_info().rss / 2**20
            xs.append(i)
            ys.append(rss)
            sessions = (
                len(graph.builder.nodes["draft_k"].runnable.func.deps.sessions)
                if hasattr(graph.builder.nodes["draft_k"].runnable, "func")
                else "?"
            )
            print(f"| {i} | {rss:.1f} | {sessions} |", flush=True)
    half = min(len(xs) // 2, max(len(xs) - 2, 0))  # a slope needs two points
    print(
        f"slope over runs {xs[half]}..{xs[-1]}: "
        f"{100 * slope(xs[half:], ys[half:]):+.2f} MB per 100 runs; "
        f"whole series {100 * slope(xs, ys):+.2f} MB per 100 runs"
    )


if __name__ == "__main__":
    main()
