"""Draft/target decode speed per CPU option, measured side by side in one process.

Prints, per option: draft ms per step (one token in every row) at k = 1 and k = 4, the
k4/k1 ratio, the target's ms per token, and the draft(k=4)/target ratio. The goals in
issue 3: k4/k1 <= 1.3 and draft(k=4) <= 0.6 x target per token.

    .venv/bin/python benchmarks/cpu_speed.py --options int8 fp32 --tokens 40 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specguard_graph.models.loading import load_lm
from specguard_graph.steps import ReasoningSteps

NEVER = "\x00\x01never"  # a delimiter that never appears: every row runs the full length
QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether in April and May?"
)
OPTIONS = {
    "fp32": dict(dtype="float32", quantize="none"),
    "int8": dict(dtype="float32", quantize="int8"),
    "bf16": dict(dtype="bfloat16", quantize="none"),
}


def per_token_ms(lm, n: int, tokens: int, repeats: int, capture: bool) -> float:
    spec = ReasoningSteps()
    times = []
    for r in range(repeats + 1):  # first run warms up
        pc = lm.new_prefix(spec.render_prompt(QUESTION, lm.tokenizer))
        lm._catch_up(pc)  # the prompt prefill is not part of a decode step
        t0 = time.perf_counter()
        s = lm.sample(
            pc,
            n=n,
            delimiter=NEVER,
            max_new_tokens=tokens,
            temperature=0.7,
            seed=r,
            capture_layers=lm.capture_layers(3) if capture else None,
        )
        dt = time.perf_counter() - t0
        if r:
            steps = max(len(c.token_ids) for c in s.candidates) + (
                1 if any(c.ended == "eos" for c in s.candidates) else 0
            )
            times.append(1000 * dt / steps)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--options", nargs="+", default=["int8", "fp32"], choices=list(OPTIONS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} threads, {args.tokens}-token decode, "
        f"median of {args.repeats}; draft samples with attention capture (last 3 layers)"
    )
    print(
        "| option | draft k=1 ms/step | draft k=4 ms/step | k4/k1 | target ms/token "
        "| draft k4 / target |"
    )
    print("|---|---|---|---|---|---|")
    for name in args.options:
        d = load_lm("draft", device="cpu", **OPTIONS[name])
        k1 = per_token_ms(d, 1, args.tokens, args.repeats, capture=True)
        k4 = per_token_ms(d, 4, args.tokens, args.repeats, capture=True)
        del d
        t = load_lm("target", device="cpu", **OPTIONS[name])
        tt = per_token_ms(t, 1, args.tokens, args.repeats, capture=False)
        del t
        print(
            f"| {name} | {k1:.0f} | {k4:.0f} | {k4 / k1:.2f} | {tt:.0f} | {k4 / tt:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
