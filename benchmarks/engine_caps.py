"""What each served engine gives the graph, measured on the embedded 0.5B draft: one table row
per engine (llama.cpp's server on the Q4_K_M GGUF, vLLM's CPU build on the model directory).

Columns: token log-probs; prompt log-probs (`echo`, what scoring and the served verify need);
k > 1 sampled in one request; the same seed giving the same samples; batch-invariance (a
greedy request alone vs. the same request while 3 others share the batch: equal text and
log-probs?). Attention is never returned by either (no field for it in the API).

    .venv/bin/python benchmarks/engine_caps.py [--engines llama.cpp,vllm]
"""

from __future__ import annotations

import argparse
import concurrent.futures
from contextlib import ExitStack
from typing import Any

from specguard_graph.machine import describe
from specguard_graph.models.served.client import ServedStepModel

QUESTION = "A shop sells 3 pens for $4. How much do 12 pens cost? Think step by step."
OTHERS = ["Write a haiku about rain.", "List three prime numbers.", "Explain what a CPU does."]


def start(stack: ExitStack, engine: str) -> str:
    if engine == "vllm":
        from specguard_graph.models.install.registry import model_dir
        from specguard_graph.models.served.vllm import VllmServer

        return stack.enter_context(VllmServer(model_dir("draft")))
    from specguard_graph.models.install.installer import gguf_path
    from specguard_graph.models.install.registry import DRAFT
    from specguard_graph.models.served.llamacpp import LlamaServer

    return stack.enter_context(LlamaServer(gguf_path(DRAFT), parallel=4, ctx=1024))


def ask(model: ServedStepModel, question: str, **kw: Any) -> list[tuple[str, list[float]]]:
    pc = model.new_prefix(model.tokenizer.apply_chat_template([{"role": "user",
                                                                "content": question}]))  # fmt: skip
    s = model.sample(pc, delimiter="\n\n", max_new_tokens=kw.pop("max_new_tokens", 64), **kw)
    return [(c.text, c.token_logprobs) for c in s.candidates]


def row(engine: str, url: str) -> list[str]:
    model = ServedStepModel(url)
    greedy = dict(n=1, temperature=0.0)
    alone = ask(model, QUESTION, **greedy)[0]
    logprobs = "yes" if alone[1] and all(x <= 0 for x in alone[1]) else "no"
    prompt = "yes" if model.can_score else "no"
    hot = dict(n=4, temperature=1.0, seed=11, max_new_tokens=24)
    first, again = ask(model, QUESTION, **hot), ask(model, QUESTION, **hot)
    n = f"yes ({len({t for t, _ in first})} distinct of 4)"
    seed = "yes" if [t for t, _ in first] == [t for t, _ in again] else "no"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(ask, model, q, n=1, temperature=0.0, max_new_tokens=64)
                for q in [QUESTION, *OTHERS]]  # fmt: skip
        shared = jobs[0].result()[0]
        for j in jobs[1:]:
            j.result()
    drift = max((abs(a - b) for a, b in zip(alone[1], shared[1], strict=False)), default=0.0)
    same = shared[0] == alone[0]
    invariant = f"{'yes' if same and drift == 0 else 'no'} (text {'equal' if same else 'differs'}, "
    invariant += f"max log-prob change {drift:.2g})"
    return [engine, "none", logprobs, prompt, n, seed, invariant]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="llama.cpp,vllm")
    a = ap.parse_args()
    print(describe(), flush=True)
    print("| engine | attention | token log-probs | prompt log-probs | k > 1 in one request | "
          "seed repeats | batch-invariant (greedy, alone vs 3 others) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for engine in a.engines.split(","):
        with ExitStack() as stack:
            print("| " + " | ".join(row(engine, start(stack, engine))) + " |", flush=True)


if __name__ == "__main__":
    main()
