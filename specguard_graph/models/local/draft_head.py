"""A cheaper draft for proposals: its output head over the most frequent tokens only (FR-Spec,
arXiv 2502.14856).

The 0.5B draft's head is 151,936 x 896, 27.6 % of its weights, read for every token it
proposes. Where a draft token is only a proposal that the target checks (the project's
lossless SD, `verify.propose`), the draft need not rank the whole vocabulary: it picks among
the first `PROPOSAL_VOCAB` ids (Qwen's byte-level BPE numbers its tokens in merge order, the
frequent ones first: the first 32,768 ids cover 94 % of the target's tokens on gsm8k answers
and BFCL turns) plus every special token (end of turn, `<tool_call>`). A proposal outside
the subset is simply not made; the target writes its own token, so the text is unchanged.
The kept rows are the full head's rows as they are (int8, or the GGUF's blocks in the `gguf`
format, where the draft's Q8_0 head is 37 % of the bytes it reads per token), so each kept
logit is the same bits.

Where the draft's full distribution is read, the full head stays: SpecGuard's draft sampling
(`LocalCausalLM.sample`: the min-log-prob signal and the vote need every token's probability)
and scoring.

Off by default (`PROPOSAL_VOCAB = 0`): on the embedded pair it measured 0.99x the full head's
time per token in `sd-verify` (3 problems, interleaved, a loaded machine), because the draft
then missed 5-7 % more of the target's tokens (`benchmarks/results/draft-head.txt`). Set
`lm.proposal_vocab = 32768` on a draft to use it; FR-Spec's gain needs a head that is a larger
share of the draft's time than this pair's.
"""

from __future__ import annotations

from typing import Any

import torch

from .blocks import BlockLinear
from .numerics import Int8WeightOnlyLinear

PROPOSAL_VOCAB = 0  # off: see the module doc; 32768 is FR-Spec's size


def proposal_head(lm: Any) -> tuple[Int8WeightOnlyLinear | BlockLinear, torch.Tensor] | None:
    """The reduced head and the token ids of its rows (None: the full head is used); built
    once per size (a GGUF head's rows take seconds to gather: a probe alternating two sizes
    must not pay that per run)."""
    cached = lm.__dict__.setdefault("_proposal_heads", {})
    size = getattr(lm, "proposal_vocab", PROPOSAL_VOCAB)
    if size in cached:
        return cached[size]
    head = lm.model.get_output_embeddings()
    found = None
    int8 = isinstance(head, Int8WeightOnlyLinear) and head.terms == 1
    usable = (int8 or isinstance(head, BlockLinear)) and head.bias is None
    if usable and 0 < size < head.out_features:
        special = {*getattr(lm.tokenizer, "added_tokens_decoder", {}), *lm.eos_ids}
        keep = sorted(set(range(size)) | {i for i in special if i < head.out_features})
        ids = torch.tensor(keep)
        found = (head.rows(ids), ids)
    cached[size] = found
    return found


def next_token(
    lm: Any, x: torch.Tensor, cache: Any, sure: bool = False
) -> tuple[int, float | None]:
    """The draft's greedy proposal after feeding `x` on `cache` (the cache keeps `x`), and,
    with `sure`, the probability the draft gives it (over the head's rows: `verify.propose`
    reads it as the draft's confidence; a softmax over the vocabulary, so only when asked)."""
    found = proposal_head(lm)
    if found is None:
        out = lm.model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=1)
        return _best(torch.nan_to_num(out.logits[0, -1].float(), nan=0.0), sure)
    head, ids = found
    hidden = lm.model.get_decoder()(input_ids=x, cache=cache, use_cache=True).last_hidden_state
    best, p = _best(torch.nan_to_num(head(hidden[:, -1])[0].float(), nan=0.0), sure)
    return int(ids[best]), p


def _best(logits: torch.Tensor, sure: bool) -> tuple[int, float | None]:
    best = int(logits.argmax())
    return best, float(torch.softmax(logits, -1)[best]) if sure else None
