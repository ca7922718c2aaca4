"""Exact greedy decoding with prompt-lookup proposals: for the label runs that decode a lot,
and for an agent's model (`PlainChatModel(lookup=True)`, the `target-lookup` bench method),
whose calls repeat the tool names, arguments and values its conversation already holds.

A value label decodes about one target continuation per step, to EOS, and the continuations
of one problem mostly repeat text the problem's records and the earlier continuations already
hold. Proposing the next few tokens from an n-gram match there and checking them in one
forward gives the tokens plain greedy decoding gives, in fewer forwards — provided a token
scores the same inside a chunk as fed alone, which the row-invariant CPU formats guarantee
(`numerics.row_invariant`, asserted bit for bit by tests/test_numerics.py). On float32 a
chunk rounds differently, so callers fall back to the plain loop there.

Three proposals per forward, chosen on torch's int8 kernel: it works on blocks of four rows, so
a forward of four tokens cost about what one of one token did, and a fifth row ~50 % more. On
the project's own kernel (`int8_kernel`, the default since issue 41) a forward of 4 tokens
costs 1.36x one of 1 token on the target and 1.42x on the draft, and 3 tokens cost more than
4 (`benchmarks/probes/forward_rows.py`, `benchmarks/results/engine/forward-rows.txt`): three
proposals still pay when the target agrees with most of them. `benchmarks/probes/lookup_speed.py`
compares the two loops on recorded prefixes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...errors import ConfigError
from ...steps import NEVER
from .. import tokens as tokens_stream
from ..base import Candidate, PrefixCache
from . import numerics
from .decoding import cut_step, feed_long
from .hf import LocalCausalLM

PROPOSE = 3


class NgramIndex:
    """Where each n-gram was last seen, and what followed it.

    Only n-grams with at least one token after them are kept, so a growing sequence never
    shadows an earlier useful match with its own tail."""

    def __init__(self, n: int = 2):
        if n < 1:
            raise ValueError("n must be >= 1")
        self.n = n
        self._at: dict[tuple[int, ...], tuple[list[int], int]] = {}

    def add(self, seq: list[int], start: int = 0) -> None:
        """Index `seq`'s n-grams that end at `start` or later (the list is kept, not copied:
        tokens appended to it later are proposed too once `add` has seen them)."""
        for end in range(max(start, self.n), len(seq)):
            self._at[tuple(seq[end - self.n : end])] = (seq, end)

    def propose(self, seq: Sequence[int], k: int) -> list[int]:
        """Up to `k` tokens that followed the last occurrence of `seq`'s final n-gram."""
        if k <= 0 or len(seq) < self.n:
            return []
        hit = self._at.get(tuple(seq[-self.n :]))
        if hit is None:
            return []
        src, end = hit
        return src[end : end + k]


def is_exact(lm: object) -> bool:
    """Does `greedy` give `lm`'s plain greedy tokens? Only on a local model whose formats score a
    token the same inside a chunk as fed alone."""
    return isinstance(lm, LocalCausalLM) and numerics.row_invariant(lm.model)


def require_exact(lm: object, what: str) -> None:
    """Refuse `what` (a setting that writes through `greedy`) on a model where it is not exact."""
    if not is_exact(lm):
        raise ConfigError(f"{what} needs a local model on a row-invariant format (quantize int8 "
                          "or gguf): elsewhere a checked chunk rounds differently from plain "
                          "decoding")  # fmt: skip


def greedy_candidate(lm: Any, pc: PrefixCache, *, max_new_tokens: int, lookup: bool,
                     index: NgramIndex | None = None) -> tuple[Candidate, int | None]:  # fmt: skip
    """`lm`'s greedy message after `pc`, to EOS, as `sample(n=1, temperature=0)` writes it, and
    with `lookup` the forwards it took (proposals from `index`, else from the text itself; the
    caller checks `is_exact`). `pc`'s cache is extended, as `sample(fork=False)` does."""
    if not lookup:
        s = lm.sample(pc, n=1, delimiter=NEVER, max_new_tokens=max_new_tokens, temperature=0.0,
                      fork=False)  # fmt: skip
        return s.candidates[0], None
    ids, forwards = greedy(lm, pc, max_new_tokens=max_new_tokens, index=index or NgramIndex())
    pc.decode_tokens += len(ids)
    return cut_step(ids, NEVER, lm.eos_ids, lm.decode, None), forwards


@torch.inference_mode()
def greedy(lm: LocalCausalLM, pc: PrefixCache, *, max_new_tokens: int, index: NgramIndex,
           propose: int = PROPOSE) -> tuple[list[int], int]:  # fmt: skip
    """The greedy tokens after `pc.ids` (up to and including EOS, at most `max_new_tokens`) and
    the forwards spent; `pc`'s cache is consumed.

    Proposals come from `index` (the problem's records and earlier continuations) and, where it
    has no match, from this sequence's own context and tokens so far. The generated tokens join
    `index` at the end, so the next continuation can be proposed from this one."""
    eos = set(lm.eos_ids)
    with lm.lock:
        lm.catch_up(pc)
        seq = list(pc.ids)
        own = NgramIndex(index.n)
        own.add(seq)
        start, forwards = len(seq), 0
        while len(seq) - start < max_new_tokens:
            k = min(propose, max_new_tokens - (len(seq) - start) - 1)
            prop = index.propose(seq, k) or own.propose(seq, k)
            _, new = check_proposals(lm, pc, seq[-1], prop, eos)
            forwards += 1
            pc.cache.crop(len(new) - 1 - len(prop))  # keep the KV of the accepted proposals
            seq.extend(new)
            tokens_stream.emit(new, eos)
            own.add(seq, len(seq) - len(new))
            if new[-1] in eos:
                break
    index.add(seq, start)
    return seq[start:], forwards


def check_proposals(
    lm: LocalCausalLM, pc: PrefixCache, last: int, prop: list[int], eos: set[int],
    before: Sequence[int] = (),
) -> tuple[torch.Tensor, list[int]]:  # fmt: skip
    """One forward over `last` and the proposals on `pc`'s cache: its float32 logits, and the
    greedy tokens it yields (the proposals greedy agrees with, then greedy's own next token).
    The cache then holds all of them; the caller crops what was not accepted. `before`: context
    tokens the cache still lacks, prefilled in the same forward (on a row-invariant model the
    rows checked come out as they would after a prefill of their own)."""
    before = feed_long(lm.model, pc.cache, before)  # a long context first, in whole chunks
    x = torch.tensor([[*before, last, *prop]], device=lm.device)
    out = lm.model(input_ids=x, cache=pc.cache, use_cache=True, logits_to_keep=len(prop) + 1)
    logits = out.logits[0].float()
    best = torch.nan_to_num(logits, nan=0.0).argmax(-1).tolist()  # as decoding.decode
    return logits, _accepted(prop, best, eos)


def _accepted(prop: list[int], best: list[int], eos: set[int]) -> list[int]:
    """The greedy tokens one checking forward yields: the proposals that greedy agrees with,
    then greedy's own next token; nothing after an EOS."""
    out: list[int] = []
    for j, tok in enumerate(best):
        out.append(tok)
        if tok in eos or j >= len(prop) or prop[j] != tok:
            break
    return out
