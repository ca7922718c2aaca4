"""Decode cost per weight format: the library's step paths against a bare forward loop.

For each format, side by side in one process (2 threads by default), after a 70-token prompt:

* bare: a loop of `model(next_token, cache)` + argmax, at 1 and k rows: the floor;
* draft step: `LocalCausalLM.sample` as the graph calls it (k rows, T = 0.7, attention capture
  on the last 3 layers, raw log-probs, delimiter watch), ms per generated token;
* target token: `sample` greedy, one row, no capture (the target's recompute / plain decode);
* ratios: step / bare at the same rows, draft k=4 step / target token;
* llama.cpp (`--llama-cpp`, needs `pip install xllamacpp`): the same Q4_K_M target GGUF decoded
  greedily by llama.cpp's server in this process, same threads, ms per token, and the ratio of
  the in-process target token to it — side by side, because this shared CPU's speed drifts by
  several times between hours.

    .venv/bin/python benchmarks/decode_speed.py                         # int8 and dynamic-int8
    .venv/bin/python benchmarks/decode_speed.py --options int8 --profile  # + torch.profiler
    .venv/bin/python benchmarks/decode_speed.py --llama-cpp   # + llama.cpp on the target GGUF
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
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local import numerics
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.models.local.kv_cache import new_cache
from specguard_graph.steps import NEVER, ReasoningSteps

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
def bare_ms(lm: LocalCausalLM, rows: int, tokens: int) -> float:
    """ms per step of the plainest decode loop over `rows` copies of the prompt."""
    ids = _prompt(lm)
    cache = new_cache(lm.model.config)
    x = torch.tensor([ids[:-1]] * rows, device=lm.device)
    lm.model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=1)
    nxt = torch.tensor([[ids[-1]]] * rows, device=lm.device)
    _sync(lm)
    t0 = time.perf_counter()
    for _ in range(tokens):
        logits = lm.model(input_ids=nxt, cache=cache, use_cache=True).logits[:, -1]
        nxt = logits.argmax(-1, keepdim=True)
    _sync(lm)
    return 1000 * (time.perf_counter() - t0) / tokens


def step_ms(lm: LocalCausalLM, n: int, tokens: int, seed: int, capture: bool) -> float:
    """ms per generated token of `sample` as the graph calls it (prompt prefill excluded)."""
    pc = lm.new_prefix(ReasoningSteps().render_prompt(QUESTION, lm.tokenizer))
    lm.catch_up(pc)  # the prompt prefill is not part of a decode step
    _sync(lm)
    t0 = time.perf_counter()
    s = lm.sample(
        pc,
        n=n,
        delimiter=NEVER,
        max_new_tokens=tokens,
        temperature=0.7 if capture else 0.0,
        seed=seed,
        capture_layers=lm.capture_layers(3) if capture else None,
    )
    _sync(lm)
    dt = time.perf_counter() - t0
    steps = max(len(c.token_ids) for c in s.candidates)
    return 1000 * dt / (steps + any(c.ended == "eos" for c in s.candidates))


def profile(lm: LocalCausalLM, n: int, tokens: int) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    pc = lm.new_prefix(ReasoningSteps().render_prompt(QUESTION, lm.tokenizer))
    lm.catch_up(pc)
    kw = dict(n=n, delimiter=NEVER, max_new_tokens=tokens, temperature=0.7)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        lm.sample(pc, capture_layers=lm.capture_layers(3), **kw)
    print(f"\n### torch.profiler: {lm.name}, k={n}, {tokens} tokens with capture\n")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def llama_cpp(threads: int, tokens: int) -> Callable[[], float]:
    """A timer of llama.cpp decoding the embedded target's Q4_K_M GGUF: ms per token."""
    try:
        import xllamacpp
    except ImportError:
        raise SystemExit(
            "--llama-cpp: pip install xllamacpp (llama.cpp's prebuilt CPU server)"
        ) from None
    from specguard_graph.models.install.installer import gguf_path
    from specguard_graph.models.install.registry import TARGET

    gguf = gguf_path(TARGET)
    if not gguf.exists():
        raise SystemExit(f"--llama-cpp: {gguf} is missing; run `specguard models install`")
    p = xllamacpp.CommonParams()
    p.model.path = str(gguf)
    p.n_ctx = 1024
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
    server = xllamacpp.Server(p)
    request = {
        "prompt": QUESTION,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "cache_prompt": False,
    }
    return lambda: float(server.handle_completions(request)["timings"]["predicted_per_token_ms"])


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
    ap.add_argument("--repeats", type=int, default=3, help="rounds; every timer runs once each")
    ap.add_argument("--profile", action="store_true", help="torch.profiler of a draft k-step")
    ap.add_argument("--random-weights", type=Path, default=None, metavar="DIR")
    ap.add_argument(
        "--llama-cpp", action="store_true", help="also time llama.cpp on the target's GGUF"
    )
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is visible")
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    ks = sorted(set(args.ks))
    kk = 4 if 4 in ks else max(ks)
    print(
        f"{describe()}; on {where}, {args.tokens}-token "
        f"decode after the prompt; every model loaded at once and every timer run once per "
        f"round, median of {args.repeats} rounds (one warm-up round); ms per step (one token "
        f"per row){'; random weights' if args.random_weights else ''}\n",
        flush=True,
    )
    timers: dict[tuple[str, str], Callable[[int], float]] = {}
    for name in args.options:
        d = load("draft", name, args.device, args.random_weights)
        t = load("target", name, args.device, args.random_weights)
        for k in ks:
            timers[name, f"bare{k}"] = lambda r, d=d, k=k: bare_ms(d, k, args.tokens)
            timers[name, f"step{k}"] = lambda r, d=d, k=k: step_ms(d, k, args.tokens, r, True)
        timers[name, "tbare"] = lambda r, t=t: bare_ms(t, 1, args.tokens)
        timers[name, "ttoken"] = lambda r, t=t: step_ms(t, 1, args.tokens, r, False)
        if args.profile:
            profile(d, kk, args.tokens)
    if args.llama_cpp:
        llama = llama_cpp(args.threads, args.tokens)
        timers["llama.cpp", "token"] = lambda r: llama()
    times: dict[tuple[str, str], list[float]] = {key: [] for key in timers}
    for r in range(args.repeats + 1):
        for key, timer in timers.items():
            ms = timer(r)
            if r:
                times[key].append(ms)
        print(f"  round {r + 1} of {args.repeats + 1} done", file=sys.stderr, flush=True)
    m = {key: statistics.median(v) for key, v in times.items()}
    cols = [f"draft k={k}: bare / step / ratio" for k in ks]
    cols += ["target: bare / token / ratio", f"draft k{kk} / target"]
    if args.llama_cpp:
        cols.append("target / llama.cpp")
        print(f"llama.cpp, Q4_K_M target GGUF: {m['llama.cpp', 'token']:.1f} ms per token\n")
    print(f"| option | {' | '.join(cols)} |")
    print("|---|" + "---|" * len(cols))
    for name in args.options:
        cells = [
            f"{m[name, f'bare{k}']:.1f} / {m[name, f'step{k}']:.1f} / "
            f"{m[name, f'step{k}'] / m[name, f'bare{k}']:.2f}"
            for k in ks
        ]
        tb, tt = m[name, "tbare"], m[name, "ttoken"]
        cells += [f"{tb:.1f} / {tt:.1f} / {tt / tb:.2f}", f"{m[name, f'step{kk}'] / tt:.2f}"]
        if args.llama_cpp:
            cells.append(f"{tt / m['llama.cpp', 'token']:.2f}")
        print(f"| {name} | {' | '.join(cells)} |")
    if len(args.options) > 1:
        base = args.options[-1]
        for name in args.options[:-1]:
            ratio = m[name, "ttoken"] / m[base, "ttoken"]
            print(f"\ntarget token, {name} / {base}: {ratio:.2f}")


if __name__ == "__main__":
    main()
