"""RSD/SpecReason-style step-level baseline: the draft writes each step greedily, the target
judges it with one prefill (a 0-9 rating read from its next-token distribution), and a
step rated below the threshold is rewritten by the target from the same prefix.

The judge prompt adds a user turn after the partial answer; the target's prefix cache is
shared with generation, so the judge costs only its suffix plus the step, and the common-
prefix check drops the judge turn again before the target next generates.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ..models import LocalCausalLM, PrefixCache
from ..steps import ReasoningSteps, history

SPEC = ReasoningSteps()
JUDGE = (
    "Rate the last step of your answer so far: is it correct and useful for solving the "
    "problem? Reply with one digit from 0 (wrong) to 9 (certainly correct)."
)


def judge_prompt(target: LocalCausalLM, question: str, so_far: str) -> str:
    """The conversation so far with the judge's question as the next user turn."""
    messages = [{"role": "system", "content": SPEC.system_prompt},
                {"role": "user", "content": question},
                {"role": "assistant", "content": so_far},
                {"role": "user", "content": JUDGE}]  # fmt: skip
    return str(target.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True))  # fmt: skip


def digit_ids(lm: LocalCausalLM) -> list[int]:
    ids = [lm.encode(str(d)) for d in range(10)]
    if any(len(i) != 1 for i in ids):
        raise ValueError(f"{lm.name}: digits are not single tokens; the judge needs them")
    return [i[0] for i in ids]


@torch.inference_mode()
def judge(target: LocalCausalLM, pc: PrefixCache, prompt: str, digits: list[int]) -> float:
    """Expected 0-9 rating / 9, from one forward that reuses `pc`'s cached prefix."""
    jpc = PrefixCache(ids=target.encode(prompt), cache=pc.cache, cache_ids=pc.cache_ids)
    logits = target.next_logits(jpc)
    pc.cache, pc.cache_ids = jpc.cache, jpc.cache_ids  # the shared cache now holds the judge turn
    pc.prefill_tokens += jpc.prefill_tokens
    p = torch.softmax(logits[digits].float(), dim=-1)
    return float((p * torch.arange(10, dtype=torch.float32, device=p.device)).sum() / 9.0)


def rsd(draft: LocalCausalLM, target: LocalCausalLM, *, threshold: float = 0.7,
        max_steps: int = 48, max_step_tokens: int = 160, max_tokens: int = 512):  # fmt: skip
    digits = digit_ids(target)

    def solve(question: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        dpc = draft.new_prefix(SPEC.render_prompt(question, draft.tokenizer))
        tpc = target.new_prefix(SPEC.render_prompt(question, target.tokenizer))
        prompt_len = len(tpc.ids)
        steps: list[dict[str, Any]] = []
        used, draft_tokens, target_tokens = 0, 0, 0
        while len(steps) < max_steps and max_tokens - used >= 2:
            budget = min(max_step_tokens, max_tokens - used)
            s = draft.sample(dpc, n=1, delimiter=SPEC.delimiter, max_new_tokens=budget,
                             temperature=0.0)  # fmt: skip
            cand = s.candidates[0]
            draft_tokens += cand.n_tokens
            so_far = history(SPEC.delimiter, steps) + cand.text
            score = judge(target, tpc, judge_prompt(target, question, so_far), digits)
            if score >= threshold:
                draft.adopt(dpc, s, 0)
                tpc.extend(cand.token_ids)
                step = {"text": cand.text, "source": "draft", "score": score,
                        "ended": cand.ended}  # fmt: skip
            else:
                t = target.sample(tpc, n=1, delimiter=SPEC.delimiter, max_new_tokens=budget,
                                  temperature=0.0, fork=False)  # fmt: skip
                c = t.candidates[0]
                target.adopt(tpc, t, 0)
                dpc.extend(c.token_ids)
                target_tokens += c.n_tokens
                step = {"text": c.text, "source": "target", "score": score,
                        "ended": c.ended}  # fmt: skip
            steps.append(step)
            used = len(tpc.ids) - prompt_len
            if SPEC.is_final(step["text"], eos=step["ended"] == "eos"):
                break
        text = history(SPEC.delimiter, steps)
        return {
            "text": text, "answer": SPEC.extract_answer(text),
            "latency_s": time.perf_counter() - t0, "steps": len(steps),
            "target_steps": sum(x["source"] == "target" for x in steps),
            "draft_tokens": draft_tokens, "target_tokens": target_tokens,
            "scores": [x["score"] for x in steps],
        }  # fmt: skip

    return solve
