"""The in-process engine beside llama.cpp on the same CPU: prefill and decode, draft and target.

Both engines get the same token ids: a `--prompt-tokens` prompt forward (llama.cpp with
`cache_prompt: false`; in process one forward with logits for the last row only), then a
`--decode-tokens` greedy decode. llama.cpp runs in this process (`xllamacpp`, the models'
Q4_K_M GGUFs), with the same number of threads. Every timer runs once per round, interleaved,
and the table gives medians, so the ratios compare runs made seconds apart: this shared CPU's
speed drifts by several times between hours, and only ratios from one run mean anything.

    .venv/bin/python benchmarks/engine_speed.py                    # int8 (the CPU default)
    .venv/bin/python benchmarks/engine_speed.py --options int8 gguf --repeats 5  # + GGUF blocks
    .venv/bin/python benchmarks/engine_speed.py --torch-kernel --repeats 5  # + torch's int8 kernel
    .venv/bin/python benchmarks/engine_speed.py --options gguf --vnni  # + gguf without AMX
    .venv/bin/python benchmarks/engine_speed.py --options gguf --plain-attention \
        --prompt-tokens 3000  # an agent's prompt, + gguf on the plain attention copy

The goal of issue 41: prefill >= 0.67x llama.cpp's tokens/s and decode <= 1.5x its ms/token;
of issue 58 (the `gguf` format, the same blocks llama.cpp reads): prefill >= 1.0x, decode
<= 1.0x; for both models, in one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch

from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local import int8_kernel, numerics
from specguard_graph.models.local.blocks.linear import kernel_copy
from specguard_graph.models.local.capture import attention_copy
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.models.local.kv_cache import new_cache

TEXT = (
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
    "muffins for her friends every day with four. She sells the remainder at the farmers' "
    "market daily for $2 per fresh duck egg. How much in dollars does she make every day at "
    "the farmers' market? "
)


def prompt_ids(lm: LocalCausalLM, n: int) -> list[int]:
    """`n` token ids of ordinary text (the question repeated), the same for both engines."""
    text = lm.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    return (text * (n // len(text) + 1))[:n]


def torch_timer(lm: LocalCausalLM, ids: list[int], decode: int) -> Callable[[], tuple]:
    """One prefill of `ids`, then `decode` greedy tokens: (tokens/s, ms/token)."""
    x = torch.tensor([ids])

    def run() -> tuple[float, float]:
        with torch.inference_mode():
            cache = new_cache(lm.model.config)
            t0 = time.perf_counter()
            out = lm.model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=1)
            t1 = time.perf_counter()
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            for _ in range(decode):
                out = lm.model(input_ids=tok, cache=cache, use_cache=True)
                tok = out.logits[:, -1].argmax(-1, keepdim=True)
            t2 = time.perf_counter()
        return len(ids) / (t1 - t0), 1000 * (t2 - t1) / decode

    return run


def plain_attention(timer: Callable[[], tuple]) -> Callable[[], tuple]:
    """`timer` with attention on the kernel's plain copy (the same bits, one row at a time)."""

    def run() -> tuple[float, float]:
        with attention_copy(0):
            return timer()

    return run


def llama_timer(role: str, ids: list[int], decode: int, threads: int) -> Callable[[], tuple]:
    try:
        import xllamacpp
    except ImportError:
        raise SystemExit("llama.cpp: pip install xllamacpp (llama.cpp's CPU server)") from None
    from specguard_graph.models.install.installer import gguf_path
    from specguard_graph.models.install.registry import DEFAULTS

    gguf = gguf_path(DEFAULTS[role])
    if not gguf.exists():
        raise SystemExit(f"llama.cpp: {gguf} is missing; run `specguard models install`")
    p = xllamacpp.CommonParams()
    p.model.path = str(gguf)
    p.n_ctx = 2 * (len(ids) + decode)
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
    server = xllamacpp.Server(p)
    request = {"prompt": ids, "max_tokens": decode, "temperature": 0, "ignore_eos": True}
    request["cache_prompt"] = False

    def run() -> tuple[float, float]:
        t = server.handle_completions(request)["timings"]
        return float(t["prompt_per_second"]), float(t["predicted_per_token_ms"])

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["draft", "target"], choices=["draft", "target"])
    ap.add_argument("--options", nargs="+", default=["int8"], choices=OPTIONS)
    ap.add_argument("--prompt-tokens", type=int, default=400)
    ap.add_argument("--decode-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3, help="rounds; every timer runs once each")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--torch-kernel", action="store_true", help="also time int8 on torch's kernel (int8-torch)"
    )
    ap.add_argument(
        "--vnni",
        action="store_true",
        help="also time gguf on the kernel's AVX-512 VNNI copy (gguf-vnni), where AMX runs",
    )
    ap.add_argument(
        "--plain-attention",
        action="store_true",
        help="also time gguf with the attention kernel's plain copy (gguf-plain-attn)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    options = list(args.options) + (["int8-torch"] if args.torch_kernel else [])
    options += ["gguf-vnni"] if args.vnni else []
    options += ["gguf-plain-attn"] if args.plain_attention else []
    print(
        f"{describe()}; int8 kernel: {numerics.kernel_name()}; {args.prompt_tokens}-token prompt "
        f"forward, then {args.decode_tokens} greedy tokens; timers interleaved, median of "
        f"{args.repeats} rounds after a warm-up\n",
        flush=True,
    )
    timers: dict[tuple[str, str], Callable[[], tuple]] = {}
    for role in args.models:
        for opt in options:
            if opt == "int8-torch":
                with int8_kernel.torch_kernel():
                    lm = load_lm(role, **OPTIONS["int8"])
            elif opt == "gguf-vnni":
                with kernel_copy(1):
                    lm = load_lm(role, **OPTIONS["gguf"])
            else:
                lm = load_lm(role, **OPTIONS[opt.removesuffix("-plain-attn")])
            ids = prompt_ids(lm, args.prompt_tokens)
            timers[role, opt] = torch_timer(lm, ids, args.decode_tokens)
            if opt == "gguf-plain-attn":
                timers[role, opt] = plain_attention(timers[role, opt])
        timers[role, "llama.cpp"] = llama_timer(role, ids, args.decode_tokens, args.threads)
    times: dict[tuple[str, str], list[tuple]] = {key: [] for key in timers}
    for r in range(args.repeats + 1):
        for key, timer in timers.items():
            result = timer()
            if r:
                times[key].append(result)
        print(f"  round {r + 1} of {args.repeats + 1} done", file=sys.stderr, flush=True)
    print("| model, engine | prefill tokens/s | × llama.cpp | decode ms/token | × llama.cpp |")
    print("|---|---|---|---|---|")
    for role in args.models:
        lp = statistics.median(t[0] for t in times[role, "llama.cpp"])
        ld = statistics.median(t[1] for t in times[role, "llama.cpp"])
        print(f"| `{role} llama.cpp` Q4_K_M | {lp:.1f} | 1 | {ld:.1f} | 1 |")
        for opt in options:
            p = statistics.median(t[0] for t in times[role, opt])
            d = statistics.median(t[1] for t in times[role, opt])
            row = f"| `{role} {opt}` in process | {p:.1f} | {p / lp:.2f} | {d:.1f} | {d / ld:.2f} |"
            print(row)


if __name__ == "__main__":
    main()
