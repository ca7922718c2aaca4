"""A long prompt's prefill in one forward against forwards of a fixed number of rows
(`decoding.PREFILL_ROWS`), through the path a run takes (`LocalCausalLM.catch_up`), interleaved.

    .venv/bin/python benchmarks/probes/prefill_chunks.py --model target --tokens 3000
    .venv/bin/python benchmarks/probes/prefill_chunks.py --model draft --rows 0,1024,512,256

Each round prefills the same prompt (random ids; an agent's first call is 2,200-4,700 tokens)
from an empty cache once per setting (0: one forward), then takes the next-token logits, which
must equal the one forward's bit for bit. Prints the median seconds and tokens/s per setting
and their ratio to one forward.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specguard_graph.machine import describe
from specguard_graph.models.loading import load_lm
from specguard_graph.models.local import decoding


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["draft", "target"], default="target")
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--rows", default="0,1024,512,256")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    settings = [int(r) for r in args.rows.split(",")]
    if args.tokens < 2 or args.rounds < 1 or min(settings) < 0:
        ap.error("--tokens must be at least 2, --rounds at least 1, --rows 0 or more")
    lm = load_lm(args.model)
    print(f"{describe()}; {args.model}, {args.tokens}-token prompt, {args.rounds} rounds")
    ids = torch.randint(100, 20000, (args.tokens,), generator=torch.Generator().manual_seed(0))
    times: dict[int, list[float]] = {r: [] for r in settings}
    ref = None
    for r in range(args.rounds):
        for rows in settings:
            decoding.PREFILL_ROWS = rows or args.tokens + 1
            lm.prefix_store.clear()
            pc = lm.new_prefix("x")  # its ids replaced: the random prompt
            pc.ids = ids.tolist()
            t0 = time.perf_counter()
            logits = lm.next_logits(pc)
            times[rows].append(time.perf_counter() - t0)
            ref = logits if ref is None else ref
            if not torch.equal(logits, ref):
                raise SystemExit(f"rows {rows}: the logits differ from one forward's")
        print(f"  round {r + 1} of {args.rounds} done", flush=True)
    base = statistics.median(times[settings[0]])
    print("| rows per forward | s (median) | tokens/s | × first |\n|---|---|---|---|")
    for rows in settings:
        s = statistics.median(times[rows])
        print(f"| {rows or 'one forward'} | {s:.2f} | {args.tokens / s:.1f} | {s / base:.3f} |")
    print("logits equal to the first setting's, bit for bit, in every round")


if __name__ == "__main__":
    main()
