"""The BFCL multi-turn run read back (`specguard bench --dataset bfcl-multi`): accuracy with
95 % CIs, turns passed, latency against the target, trajectories equal to the target's, the
conversation checks that fired and what the target then wrote, tokens fed per model.

    .venv/bin/python benchmarks/bfcl_multi_report.py benchmarks/results/bfcl-multi \
        --methods target,draft,specguard-lossless,specguard@tau=0
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specguard_graph.bench.bfcl import multi_report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--methods", default="target,draft,specguard-lossless,specguard@tau=0")
    args = ap.parse_args()
    runs = multi_report.load(args.out, args.methods.split(","))
    text = multi_report.markdown(multi_report.summary(runs))
    print(text)
    (args.out / "multi-turn.md").write_text(text)


if __name__ == "__main__":
    main()
