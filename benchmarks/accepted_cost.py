"""What an accepted draft step costs per token against the `draft` method, from a bench run.

Issue 37's goal: an accepted step at <= 1.10x the `draft` method's per-token time, in the same
run. Per problem: the accepted draft steps' `time_s` (the whole step: sampling, selection,
signals, decision, commit) over their tokens, against `draft`'s latency over its tokens; and
the draft sampling alone (`spent.draft_s`). Prints the median and range over the problems
that accepted at least one draft step.

    .venv/bin/python benchmarks/accepted_cost.py benchmarks/results/gsm8k-30-frontier \
        specguard-greedy@tau=0.2 specguard-greedy
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def records(run: Path, method: str) -> dict[str, dict[str, Any]]:
    path = run / f"{method}.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: no such method log")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["id"]: r for r in rows}


def ratios(run: Path, method: str) -> list[tuple[float, float]]:
    """Per problem: (step time per token, draft sampling per token), each over `draft`'s
    per-token time on that problem."""
    draft = records(run, "draft")
    out = []
    for pid, r in records(run, method).items():
        steps = [s for s in r.get("step_records") or [] if s["source"] == "draft" and s["accepted"]]
        tokens = sum(s["tokens"] for s in steps)
        if pid not in draft or not tokens:
            continue
        per = draft[pid]["latency_s"] / draft[pid]["tokens"]
        step_s = sum(s["time_s"] for s in steps)
        sample_s = sum(s["spent"]["draft_s"] for s in steps)
        out.append((step_s / tokens / per, sample_s / tokens / per))
    return out


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("methods", nargs="+")
    args = ap.parse_args()
    cpus = {r.get("cpu") for r in records(args.run, "draft").values()}
    print(f"run {args.run}; CPU kernels of the draft records: {', '.join(map(str, cpus))}")
    print("method | problems | accepted step / draft per token: median (range) | sampling alone")
    for m in args.methods:
        rows = ratios(args.run, m)
        if not rows:
            print(f"{m} | 0 | no accepted draft step")
            continue
        step, sample = spread([x[0] for x in rows]), spread([x[1] for x in rows])
        print(f"{m} | {len(rows)} | {step} | {sample}")


if __name__ == "__main__":
    main()
