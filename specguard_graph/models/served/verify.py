"""The lossless fallback on a served target: verify a rejected step with prompt log-probs.

One `echo` request over the context, the rejected candidate and the delimiter says, at each
of the candidate's tokens, whether it was the target's own greedy choice (vLLM's
`prompt_logprobs` rank). The target agrees with the candidate up to the first token where it
does not; those tokens are kept, and one greedy completion from the context's and the kept
tokens' ids writes the rest of the step. An agreed candidate costs one prefill instead of a
whole decode. Tokens pass as the engine's own ids, so nothing is re-tokenized. What comes out
is the target's greedy step as far as its engine is consistent with itself: the top-1 of a
prefill and of a decode can round differently (`tests/test_vllm.py` checks they agree).
"""

from __future__ import annotations

from typing import Any

from ..base import PrefixCache, Sample
from ..callable import StepOutput
from ..local.verify import Verification
from .logprobs import detokenize, split


def verify_served(model: Any, pc: PrefixCache, *, candidate: str, delimiter: str,
                  max_new_tokens: int, seed: int = 0) -> tuple[Sample, Verification]:  # fmt: skip
    """The target's greedy step after `pc`, checked against `candidate` (text) first; a
    one-row `Sample` as `model.sample(n=1, temperature=0)` returns, and what it cost."""
    whole, ctx = split(model, model.decode(pc.ids), candidate + delimiter)
    step = whole.after(len(ctx))
    kept = 0
    while kept < len(step.ids) and kept < max_new_tokens and step.top1[kept]:
        kept += 1
    head = detokenize(model, step.ids[:kept])
    while kept and head.endswith("\ufffd"):  # never stop inside a character's bytes
        kept -= 1
        head = detokenize(model, step.ids[:kept])
    stats = Verification(kept, len(step.ids), 0, 0, 1)
    lps = [float(x) for x in step.logprobs[:kept] if x is not None]
    texts = step.texts[:kept]
    if kept == len(step.ids) and head.endswith(delimiter):  # the candidate, ended where it was
        out = StepOutput(head[: -len(delimiter)], lps[:-1], token_texts=texts[:-1],
                         ended="delimiter")  # fmt: skip
    elif kept >= max_new_tokens:
        out = StepOutput(head, lps, token_texts=texts, ended="length")
    else:
        r = model._call(model.client.completions.create, model=model.model,
                        prompt=[*ctx, *step.ids[:kept]], stop=[delimiter],
                        max_tokens=max_new_tokens - kept, temperature=0.0, seed=seed, logprobs=1,
                        extra_body=model.extra_body)  # fmt: skip
        rest = model._output(r.choices[0])
        stats.forwards += 1
        out = StepOutput(head + rest.text, [*lps, *rest.token_logprobs],
                         token_texts=[*texts, *rest.token_texts], ended=rest.ended)  # fmt: skip
    cand = model._candidate(out, delimiter, max_new_tokens)
    return Sample([cand], len(pc.ids), None, [], None, precomputed=[[]]), stats
