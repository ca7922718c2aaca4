"""What a forward of m tokens costs against one of one token, after a cached prompt.

Speculative verification (`models/verify.py`, `models/lookup.py`) checks a few proposed tokens
per target forward; how many pays depends on how a forward's cost grows with its rows. For
each model and m, the cache holds a `--prompt-tokens` prompt, m tokens are fed in one forward,
and the cache is cropped back; timers interleaved, medians. Prints ms per forward and the ratio
to m = 1, so `PROPOSE` (m - 1 proposals per forward) can be chosen on this engine.

    .venv/bin/python benchmarks/probes/forward_rows.py --models target --rows 1 2 3 4 5 6 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # engine_speed.py
from engine_speed import prompt_ids

from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local import numerics
from specguard_graph.models.local.kv_cache import new_cache


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["draft", "target"], choices=["draft", "target"])
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 2, 3, 4, 5, 6, 8, 12])
    ap.add_argument("--prompt-tokens", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    print(
        f"{describe()}; int8 kernel: {numerics.kernel_name()}; a {args.prompt_tokens}-token cache, "
        f"then one forward of m tokens; interleaved, median of {args.repeats}\n"
    )
    print("| model | m | ms per forward | × m = 1 | ms per token |\n|---|---|---|---|---|")
    for role in args.models:
        lm = load_lm(role, **OPTIONS["int8"])
        ids = prompt_ids(lm, args.prompt_tokens + max(args.rows))
        times: dict[int, list[float]] = {m: [] for m in args.rows}
        with torch.inference_mode():
            cache = new_cache(lm.model.config)
            lm.model(
                input_ids=torch.tensor([ids[: args.prompt_tokens]]), cache=cache, use_cache=True
            )
            for r in range(args.repeats + 1):
                for m in args.rows:
                    x = torch.tensor([ids[args.prompt_tokens : args.prompt_tokens + m]])
                    t = time.perf_counter()
                    lm.model(input_ids=x, cache=cache, use_cache=True)
                    if r:
                        times[m].append(1000 * (time.perf_counter() - t))
                    cache.crop(-m)  # back to the prompt
        one = statistics.median(times[args.rows[0]])
        for m in args.rows:
            ms = statistics.median(times[m])
            print(f"| {role} | {m} | {ms:.1f} | {ms / one:.2f} | {ms / m:.1f} |")


if __name__ == "__main__":
    main()
