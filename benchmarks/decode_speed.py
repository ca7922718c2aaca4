"""Decode cost per weight format: the library's step paths against a bare forward loop.

For each format, side by side in one process (2 threads by default), after a 70-token prompt:

* bare: a loop of `model(next_token, cache)` + argmax, at 1 and k rows: the floor;
* draft step: `LocalCausalLM.sample` as the graph calls it (k rows, T = 0.7, attention capture
  on the last 3 layers, raw log-probs, delimiter watch), ms per generated token;
* target token: `sample` greedy, one row, no capture (the target's recompute / plain decode);
* ratios: step / bare at the same rows, draft k=4 step / target token.

    .venv/bin/python benchmarks/decode_speed.py                         # int8 and dynamic-int8
    .venv/bin/python benchmarks/decode_speed.py --options int8 --profile  # + torch.profiler
    python3 benchmarks/decode_speed.py --device cuda --options bf16 --ks 1 2 4 8 \\
        --random-weights DIR   # DIR/draft and DIR/target: config.json + tokenizer files only

`--random-weights` builds each model from its config with random weights: decode cost depends
on the architecture and the token count, not on the weights, and every row runs the full
length (the delimiter never appears), so a machine without the weight files (the GPU box,
which cannot reach a hub) measures the same work.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from specguard_graph.models import numerics
from specguard_graph.models.hf import LocalCausalLM
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.steps import ReasoningSteps

NEVER = "\x00\x01never"  # a delimiter that never appears: every row runs the full length
QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether in April and May?"
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _sync(lm: LocalCausalLM) -> None:
    if lm.device.type == "cuda":
        torch.cuda.synchronize()


def _prompt(lm: LocalCausalLM) -> list[int]:
    return lm.encode(ReasoningSteps().render_prompt(QUESTION, lm.tokenizer))


@torch.inference_mode()
def bare_ms(lm: LocalCausalLM, rows: int, tokens: int, repeats: int) -> float:
    """ms per step of the plainest decode loop over `rows` copies of the prompt."""
    ids = _prompt(lm)
    times = []
    for r in range(repeats + 1):
        cache = DynamicCache(config=lm.model.config)
        x = torch.tensor([ids[:-1]] * rows, device=lm.device)
        lm.model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=1)
        nxt = torch.tensor([[ids[-1]]] * rows, device=lm.device)
        _sync(lm)
        t0 = time.perf_counter()
        for _ in range(tokens):
            logits = lm.model(input_ids=nxt, cache=cache, use_cache=True).logits[:, -1]
            nxt = logits.argmax(-1, keepdim=True)
        _sync(lm)
        if r:
            times.append(1000 * (time.perf_counter() - t0) / tokens)
    return statistics.median(times)


def step_ms(lm: LocalCausalLM, n: int, tokens: int, repeats: int, capture: bool) -> float:
    """ms per generated token of `sample` as the graph calls it (prompt prefill excluded)."""
    times = []
    for r in range(repeats + 1):
        pc = lm.new_prefix(ReasoningSteps().render_prompt(QUESTION, lm.tokenizer))
        lm._catch_up(pc)  # the prompt prefill is not part of a decode step
        _sync(lm)
        t0 = time.perf_counter()
        s = lm.sample(
            pc,
            n=n,
            delimiter=NEVER,
            max_new_tokens=tokens,
            temperature=0.7 if capture else 0.0,
            seed=r,
            capture_layers=lm.capture_layers(3) if capture else None,
        )
        _sync(lm)
        dt = time.perf_counter() - t0
        if r:
            steps = max(len(c.token_ids) for c in s.candidates) + (
                1 if any(c.ended == "eos" for c in s.candidates) else 0
            )
            times.append(1000 * dt / steps)
    return statistics.median(times)


def profile(lm: LocalCausalLM, n: int, tokens: int) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    pc = lm.new_prefix(ReasoningSteps().render_prompt(QUESTION, lm.tokenizer))
    lm._catch_up(pc)
    kw = dict(n=n, delimiter=NEVER, max_new_tokens=tokens, temperature=0.7)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        lm.sample(pc, capture_layers=lm.capture_layers(3), **kw)
    print(f"\n### torch.profiler: {lm.name}, k={n}, {tokens} tokens with capture\n")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def load(role: str, option: str, device: str, random_weights: Path | None) -> LocalCausalLM:
    opt = OPTIONS[option]
    if random_weights is None:
        return load_lm(role, device=device, **opt)  # needs the installed weights
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = random_weights / role
    config = AutoConfig.from_pretrained(src, local_files_only=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        config, dtype=DTYPES[opt["dtype"]], attn_implementation="sdpa"
    )
    model.to(device)
    model = numerics.apply(model, opt["quantize"], device)
    tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
    return LocalCausalLM(model, tok, name=f"{role} (random weights)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--options", nargs="+", default=["int8", "dynamic-int8"], choices=OPTIONS)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--ks", nargs="+", type=int, default=[1, 4], help="draft batch sizes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="torch.profiler of a draft k-step")
    ap.add_argument("--random-weights", type=Path, default=None, metavar="DIR")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is visible")
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    ks = sorted(set(args.ks))
    kk = 4 if 4 in ks else max(ks)
    print(
        f"torch {torch.__version__} on {where} ({args.threads} threads), {args.tokens}-token "
        f"decode after the prompt, median of {args.repeats}; ms per step (one token per row)"
        f"{'; random weights' if args.random_weights else ''}\n"
    )
    cols = [f"draft k={k}: bare / step / ratio" for k in ks]
    print(f"| option | {' | '.join(cols)} | target: bare / token / ratio | draft k{kk} / target |")
    print("|---|" + "---|" * (len(ks) + 2))
    for name in args.options:
        d = load("draft", name, args.device, args.random_weights)
        cells, step = [], {}
        for k in ks:
            bare = bare_ms(d, k, args.tokens, args.repeats)
            step[k] = step_ms(d, k, args.tokens, args.repeats, capture=True)
            cells.append(f"{bare:.1f} / {step[k]:.1f} / {step[k] / bare:.2f}")
        if args.profile:
            profile(d, kk, args.tokens)
        del d
        t = load("target", name, args.device, args.random_weights)
        tb = bare_ms(t, 1, args.tokens, args.repeats)
        tt = step_ms(t, 1, args.tokens, args.repeats, capture=False)
        del t
        print(
            f"| {name} | {' | '.join(cells)} | {tb:.1f} / {tt:.1f} / {tt / tb:.2f} | "
            f"{step[kk] / tt:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
