"""Prefix reuse across an agent's calls: what each call feeds, what it costs against a cold
call of the same prompt, and whether its logits are the cold call's, bit for bit.

An agent (`create_agent`, BFCL's backends; the draft alone as its model by default, since it
makes many calls) runs one BFCL `multi_turn_base` task; every prompt it renders is recorded.
Then each prompt is replayed on `--model` twice, interleaved: warm (the model's prefix store
holds the earlier prompts, as in the run) and cold (a store emptied before the call). Per call:
tokens, tokens fed warm, seconds warm and cold, their ratio, and `torch.equal` of the two
next-token logits.

    .venv/bin/python benchmarks/prefix_reuse.py --task multi_turn_base_10 --model target
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specguard_graph.agents.plain import PlainChatModel
from specguard_graph.bench.bfcl import multi_turn as mt
from specguard_graph.machine import describe
from specguard_graph.models.loading import load_lm
from specguard_graph.models.local.hf import LocalCausalLM


class Enough(Exception):
    """The recorded run has made its calls."""


def record_prompts(lm: LocalCausalLM, task: str, max_calls: int) -> list[str]:
    """The prompts of the agent's calls, in order (the run stops after `max_calls`)."""
    prompts: list[str] = []
    original = lm.new_prefix

    def recording(prompt: str):  # type: ignore[no-untyped-def]
        if len(prompts) >= max_calls:
            raise Enough
        prompts.append(prompt)
        return original(prompt)

    lm.new_prefix = recording  # type: ignore[method-assign]
    try:
        mt.run_task(PlainChatModel(lm=lm, system_prompt=None), task)
    except Enough:
        pass
    finally:
        del lm.new_prefix
    return prompts


def timed_logits(lm: LocalCausalLM, prompt: str) -> tuple[torch.Tensor, float, int, int]:
    pc = lm.new_prefix(prompt)
    t0 = time.perf_counter()
    logits = lm.next_logits(pc)
    return logits, time.perf_counter() - t0, pc.prefill_tokens, len(pc.ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="multi_turn_base_10")
    ap.add_argument("--agent", choices=("draft", "target"), default="draft")
    ap.add_argument("--model", choices=("draft", "target"), default="target")
    ap.add_argument("--max-calls", type=int, default=10)
    args = ap.parse_args()
    lms = {role: load_lm(role) for role in {args.agent, args.model}}  # sets the threads
    print(f"{describe()}; task {args.task}; agent {args.agent}; replayed on {args.model}")
    prompts = record_prompts(lms[args.agent], args.task, args.max_calls)
    warm = lms[args.model]
    warm.prefix_store.clear()
    cold = LocalCausalLM(warm.model, warm.tokenizer, name="cold")  # same weights, own store
    print(f"{len(prompts)} calls\n call  tokens  fed warm  warm s  cold s  warm/cold  same bits")
    ratios, fed_extra = [], []
    for i, prompt in enumerate(prompts):
        cold.prefix_store.clear()
        c_logits, c_s, _, n = timed_logits(cold, prompt)
        w_logits, w_s, fed, _ = timed_logits(warm, prompt)
        same = torch.equal(w_logits, c_logits)
        if i:
            new = n - len(warm.encode(prompts[i - 1]))
            ratios.append(w_s / c_s)
            fed_extra.append(fed - new)
        print(f"{i:5} {n:7} {fed:9} {w_s:7.2f} {c_s:7.2f} {w_s / c_s:10.3f}  {same}", flush=True)
    if ratios:
        med, worst = statistics.median(ratios), max(ratios)
        print(f"calls after the first: warm/cold median {med:.3f}, max {worst:.3f}; "
              f"fed beyond the new tokens: max {max(fed_extra)}")  # fmt: skip


if __name__ == "__main__":
    main()
