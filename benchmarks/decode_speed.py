"""Draft/target decode speed per device and weight format, measured side by side in one process.

Prints, per option: draft ms per step (one token in every row) at each k, the k/k=1 ratios,
the target's ms per token, and draft(k=4)/target. Issue 3's CPU goals: k4/k1 <= 1.3 and
draft(k=4) <= 0.6 x target per token. Issue 4 asks what the k - 1 extra candidates cost on
a GPU, which is why `--device cuda` exists.

    .venv/bin/python benchmarks/decode_speed.py --options int8 fp32 --tokens 40 --repeats 3
    python3 benchmarks/decode_speed.py --device cuda --options bf16 --ks 1 2 4 8 \
        --random-weights DIR   # DIR/draft and DIR/target: config.json + tokenizer files only

`--random-weights` builds each model from its config with random weights: decode cost
depends on the architecture and the token count, not on the weights, and every row runs the
full length (the delimiter never appears), so a machine without the weight files (the GPU
box, which cannot reach a hub) measures the same work. Only torch and transformers are
imported from the library's model layer there.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from specguard_graph.models.hf import LocalCausalLM, quantize_int8
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
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _sync(lm: LocalCausalLM) -> None:
    if lm.device.type == "cuda":
        torch.cuda.synchronize()


def per_token_ms(lm: LocalCausalLM, n: int, tokens: int, repeats: int, capture: bool) -> float:
    spec = ReasoningSteps()
    times = []
    for r in range(repeats + 1):  # first run warms up
        pc = lm.new_prefix(spec.render_prompt(QUESTION, lm.tokenizer))
        lm._catch_up(pc)  # the prompt prefill is not part of a decode step
        _sync(lm)
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
        _sync(lm)
        dt = time.perf_counter() - t0
        if r:
            steps = max(len(c.token_ids) for c in s.candidates) + (
                1 if any(c.ended == "eos" for c in s.candidates) else 0
            )
            times.append(1000 * dt / steps)
    return statistics.median(times)


def load(role: str, option: str, device: str, random_weights: Path | None) -> LocalCausalLM:
    opt = OPTIONS[option]
    if random_weights is None:
        from specguard_graph.models.loading import load_lm  # needs the installed weights

        return load_lm(role, device=device, **opt)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = random_weights / role
    config = AutoConfig.from_pretrained(src, local_files_only=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        config, dtype=DTYPES[opt["dtype"]], attn_implementation="sdpa"
    )
    model.to(device)
    if opt["quantize"] == "int8":
        model = quantize_int8(model)
    tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
    return LocalCausalLM(model, tok, name=f"{role} (random weights)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--options", nargs="+", default=["int8", "fp32"], choices=list(OPTIONS))
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--ks", nargs="+", type=int, default=[1, 4], help="draft batch sizes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--random-weights", type=Path, default=None, metavar="DIR")
    args = ap.parse_args()
    if 1 not in args.ks:
        ap.error("--ks must include 1 (the ratios are against k = 1)")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is visible")
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(
        f"torch {torch.__version__} on {where} ({args.threads} CPU threads), {args.tokens}-token "
        f"decode, median of {args.repeats}; draft samples with attention capture (last 3 "
        f"layers){'; random weights' if args.random_weights else ''}"
    )
    ks = sorted(set(args.ks))
    k_cols = " | ".join(f"draft k={k} ms/step" for k in ks)
    r_cols = " | ".join(f"k{k}/k1" for k in ks if k != 1)
    kk = 4 if 4 in ks else max(ks)
    print(f"| option | {k_cols} | {r_cols} | target ms/token | draft k{kk} / target |")
    print("|---|" + "---|" * (2 * len(ks) + 1))
    for name in args.options:
        d = load("draft", name, args.device, args.random_weights)
        ms = {k: per_token_ms(d, k, args.tokens, args.repeats, capture=True) for k in ks}
        del d
        t = load("target", name, args.device, args.random_weights)
        tt = per_token_ms(t, 1, args.tokens, args.repeats, capture=False)
        del t
        cells = " | ".join(f"{ms[k]:.1f}" for k in ks)
        ratios = " | ".join(f"{ms[k] / ms[1]:.2f}" for k in ks if k != 1)
        print(f"| {name} | {cells} | {ratios} | {tt:.1f} | {ms[kk] / tt:.2f} |", flush=True)


if __name__ == "__main__":
    main()
