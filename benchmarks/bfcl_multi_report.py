"""The BFCL multi-turn run read back (`specguard bench --dataset bfcl-multi`): accuracy with
95 % CIs, turns passed, latency against the target, trajectories equal to the target's, the
conversation checks that fired and what the target then wrote, tokens fed per model.

    .venv/bin/python benchmarks/bfcl_multi_report.py benchmarks/results/bfcl-multi \
        [--methods target,draft,specguard-lossless,specguard@tau=0]

Without --methods, every method with records in the folder, the target first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specguard_graph.bench.bfcl import multi_report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--methods", help="comma-separated (default: every method with records)")
    args = ap.parse_args()
    recorded = sorted(p.stem for p in args.out.glob("*.jsonl"))
    names = args.methods.split(",") if args.methods else recorded
    missing = [m for m in names if m not in recorded]
    if missing or not names:
        ap.error(f"no records of {', '.join(missing) or 'any method'} in {args.out}")
    names.sort(key=lambda m: m != "target")  # the target first: every ratio is against it
    runs = multi_report.load(args.out, names)
    text = multi_report.markdown(multi_report.summary(runs))
    print(text)
    (args.out / "multi-turn.md").write_text(text)


if __name__ == "__main__":
    main()
