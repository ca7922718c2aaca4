"""First-step latency and per-step median of `specguard solve` on the embedded pair.

.venv/bin/python benchmarks/solve_latency.py
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.machine import describe
from specguard_graph.models.loading import load_embedder, load_lm


def main() -> None:
    question = (Path(__file__).parents[1] / "examples" / "demo_question.txt").read_text().strip()
    t0 = time.perf_counter()
    d, t, e = load_lm("draft"), load_lm("target"), load_embedder()
    load_s = time.perf_counter() - t0
    graph = build_graph(d, t, embedder=e, config=SpecGuardConfig(max_steps=12)).compile()
    start = time.perf_counter()
    first, steps, out = None, [], None
    for mode, data in graph.stream({"question": question}, stream_mode=["custom", "values"]):
        if mode == "custom" and data["event"] == "step":
            first = first or time.perf_counter() - start
            steps.append(data["time_s"])
        elif mode == "values":
            out = data
    print(describe())
    print(f"model load (once per process): {load_s:.1f} s")
    print(
        f"first step decided after {first:.2f} s; per-step median {statistics.median(steps):.2f} s "
        f"over {len(steps)} steps; answer {out['answer']} ({out['status']})"
    )


if __name__ == "__main__":
    main()
