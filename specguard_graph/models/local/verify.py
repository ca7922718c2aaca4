"""Lossless fallback: the target verifies a rejected step instead of rewriting it.

A rejected draft candidate is still the best guess of what the target would write: the pair
agrees on most greedy tokens. So the target checks it a few tokens per forward and keeps the
prefix it agrees with; from the first disagreement the draft proposes a few tokens at a time
and the target checks each proposal in one forward (token-level speculative decoding, to the
step's end). The step that comes out is the one `LocalCausalLM.sample(n=1, temperature=0)`
writes, token for token and log-prob for log-prob, because a token scores the same inside a
chunk as fed alone on the row-invariant CPU formats (`numerics.row_invariant`); on other
formats a chunk rounds differently, and `can_verify` says no.

How many proposals a forward checks follows the engine's costs (`proposals`): on the project's
kernel a forward of 2 target tokens costs what one of 1 token does, 4 tokens 1.2-1.8x by
machine, and a draft forward is 0.35-0.45 of a target one, so one proposal per forward is
cheapest; the draft catches up on the target's tokens in the forward that makes its next
proposal (`benchmarks/results/engine/forward-rows.txt`, `benchmarks/results/verify-k.txt`).

The draft's proposals are stretched for free where the text so far continues them: if the
prompt or the tokens written so far hold the proposal's last two tokens, the tokens that
followed there ride in the same target forward (`Stretch`, prompt-lookup decoding on top of
the draft). A worked problem repeats its numbers and phrases: in the target's texts of the
first 30 gsm8k problems, the token after a proposal is the looked-up one at 35 % of positions,
and a forward of 4 rows costs ~1.2x one of 2 on the project's kernel, so a stretch pays when
its first token is right about a fifth of the time. Measured: 0.81x -> 0.73x the target's
time on 4 problems, the same text (`benchmarks/probes/verify_k.py --lookup 0 2`,
`benchmarks/results/verify-lookup.txt`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .. import tokens as tokens_stream
from ..base import PrefixCache, Sample
from .decoding import DelimiterWatch, cut_step, feed_long, token_logprobs
from .draft_head import next_token
from .hf import LocalCausalLM
from .lookup import NgramIndex, check_proposals
from .numerics import row_invariant
from .prefix_store import common_prefix

LOOKUP_N = 2
"""Tokens of the context an n-gram match needs to extend the draft's proposals."""

CANDIDATE_CHUNK = 3
"""Candidate tokens per forward once the target has agreed with a whole chunk of them: they
cost no draft forward, so the longer 4-row forward pays while the target keeps agreeing."""


MORE_IF = 0.0
"""`propose`'s `more_if` by default: the draft proposes `k` tokens whatever it gives them."""


def proposals(target: LocalCausalLM) -> int:
    """Proposals per target forward on this engine: 1 on the project's kernel, where a forward
    of 2 rows costs what one of 1 row does and the draft's own forward is the cost to save
    (the pair agrees on ~89 % of proposals, so each forward yields ~1.9 tokens); 3 on torch's
    kernel, whose four-row blocks make a 4-row forward cost about a 1-row one."""
    return 1 if _ours(target) else 3


def lookup_tokens(target: LocalCausalLM) -> int:
    """Looked-up tokens a forward may add after the draft's proposals: 2 on the project's
    kernel (1 proposal + 2 = a 4-row forward, ~1.2x a 2-row one, where a 3-row one costs
    ~1.3x), 0 on torch's, whose 3 proposals already fill its four-row block."""
    return 2 if _ours(target) else 0


def _ours(target: LocalCausalLM) -> bool:
    return getattr(target.model.get_output_embeddings(), "_kernel", None) is not None


@dataclass
class Verification:
    """What the verifier spent and kept: `kept` candidate tokens the target agreed with (a
    signal of how close the rejected step was), `drafted` of `proposed` draft tokens accepted
    after that, `found` of `looked_up` tokens from n-gram matches accepted, in `forwards`
    target forwards."""

    kept: int
    candidate: int
    drafted: int
    proposed: int
    forwards: int
    looked_up: int = 0
    found: int = 0

    def count(self, new: Sequence[int], prop: Sequence[int], drafted: int) -> None:
        """What the target kept of `prop`: its first `drafted` tokens are the draft's."""
        agreed = common_prefix(new, prop)
        self.drafted += min(agreed, drafted)
        self.found += max(0, agreed - drafted)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def can_verify(target: object) -> bool:
    """Verification is exact only on a local, row-invariant target (draft proposals need a
    local draft with the target's token ids too; without one the candidate alone is checked),
    or on a served one whose engine gives prompt log-probs (`served_verify.py`)."""
    from ..served.client import ServedStepModel

    if isinstance(target, ServedStepModel):
        return target.can_score
    return isinstance(target, LocalCausalLM) and row_invariant(target.model)


@torch.inference_mode()
def propose(draft: LocalCausalLM, pc: PrefixCache, after: Sequence[int], k: int,
            more_if: float = 0.0) -> list[int]:  # fmt: skip
    """The draft's greedy tokens after its context plus `after`, up to `k`: after each, another
    only while the draft gives the last one a probability of at least `more_if` (a proposal
    after a likely-rejected one is likely wasted); its cache keeps them.

    The tokens its cache lacks (the target's correction or bonus token, the last accepted
    proposal) go in the same forward that yields the first proposal: on this engine a forward
    of two rows costs about one of one row, so catching up is nearly free."""
    ids = [*pc.ids, *after]
    with draft.lock:
        feed, out = [*draft.reuse(pc, ids[:-1]), ids[-1]], []
        pc.prefill_tokens += len(feed) - 1
        feed = feed_long(draft.model, pc.cache, feed)  # a long context first, in whole chunks
        for _ in range(k):  # over the draft's frequent vocabulary (`draft_head`)
            x = torch.tensor([feed], device=draft.device)
            tok, p = next_token(draft, x, pc.cache, sure=more_if > 0)
            out.append(tok)
            if p is not None and p < more_if:
                break
            feed = [tok]
        pc.cache_ids = [*ids, *out[:-1]]
    pc.decode_tokens += len(out)
    return out


def _checked(target: LocalCausalLM, pc: PrefixCache, max_new_tokens: int, k: int | None,
             lookup: int | None, more_if: float | None, draft: object,
             draft_pc: object) -> tuple[int, int, float]:  # fmt: skip
    """`verify_greedy`'s arguments checked, and k, lookup and more_if resolved for this engine."""
    more_if = MORE_IF if more_if is None else more_if
    k = proposals(target) if k is None else k
    lookup = lookup_tokens(target) if lookup is None else lookup
    if k < 1:
        raise ValueError("k (proposals per forward) must be >= 1")
    if lookup < 0:
        raise ValueError("lookup (looked-up tokens per forward) must be >= 0")
    if (draft is None) != (draft_pc is None):
        raise ValueError("draft and draft_pc come together")
    target._check_window(pc, max_new_tokens)
    return k, lookup, more_if


class Stretch:
    """The tokens that followed the draft's proposals where their last `LOOKUP_N` tokens occur
    earlier in the context; `seq` is the context, which the caller grows as tokens come."""

    def __init__(self, seq: list[int], most: int):
        self.seq, self.most, self.index, self.indexed = seq, most, NgramIndex(LOOKUP_N), 0

    def __call__(self, prop: Sequence[int], room: int) -> list[int]:
        if not (self.most and prop):
            return []
        self.index.add(self.seq, self.indexed)  # the n-grams of the tokens added since
        self.indexed = len(self.seq)
        return self.index.propose([*self.seq[-LOOKUP_N:], *prop], min(self.most, room))


def _prefilled(target: LocalCausalLM, pc: PrefixCache, pending: list[int]) -> list[int]:
    """After a checking forward that prefilled `pending`: count it, and keep the prompt for
    later runs as `catch_up` does. Nothing is pending after it."""
    if pending or not pc.remembered:
        pc.prefill_tokens += len(pending)
        pc.remembered = target.prefix_store.remember(pc.ids[:-1], pc.cache)
    return []


@torch.inference_mode()
def verify_greedy(
    target: LocalCausalLM,
    pc: PrefixCache,
    *,
    candidate: Sequence[int],
    delimiter: str,
    max_new_tokens: int,
    draft: LocalCausalLM | None = None,
    draft_pc: PrefixCache | None = None,
    k: int | None = None,
    lookup: int | None = None,
    more_if: float | None = None,
) -> tuple[Sample, Verification]:
    """The target's greedy step after `pc.ids`, checked against `candidate` (target ids), then
    `draft`'s proposals (`propose`) stretched by up to `lookup` looked-up tokens (None: the
    engine's choice): `target.sample(pc, n=1, temperature=0.0)`'s Sample bit for bit, its cost."""
    k, lookup, more = _checked(target, pc, max_new_tokens, k, lookup, more_if, draft, draft_pc)
    eos, watch = set(target.eos_ids), DelimiterWatch(target.piece, delimiter, 1)
    gen: list[int] = []
    lps: list[torch.Tensor] = []
    stats, on_candidate, done, chunk = Verification(0, len(candidate), 0, 0, 0), True, False, k
    with target.lock:  # the context the cache lacks rides in the first checking forward
        pending = target.reuse(pc, pc.ids[:-1])
        stretch = Stretch(list(pc.ids), lookup if draft else 0)
        while not done:
            room = max_new_tokens - len(gen) - 1
            if on_candidate and len(gen) < len(candidate):
                prop = list(candidate[len(gen) : len(gen) + min(chunk, room)])
            else:
                on_candidate = False
                prop = propose(draft, draft_pc, gen, min(k, room), more) if draft and room else []
                drafted = len(prop)  # then stretched where the context continues it
                prop += stretch(prop, room - drafted)
                stats.proposed += drafted
                stats.looked_up += len(prop) - drafted
            last = gen[-1] if gen else pc.ids[-1]
            logits, new = check_proposals(target, pc, last, prop, eos, before=pending)
            stats.forwards += 1
            pending = _prefilled(target, pc, pending)
            for i, tok in enumerate(new):  # the stops `decode` applies, token by token
                gen.append(tok)
                if tok in eos or watch.seen(0, tok) or len(gen) >= max_new_tokens:
                    new, done = new[: i + 1], True
                    break
            stretch.seq.extend(new)
            tokens_stream.emit(new, eos)
            if not on_candidate:
                stats.count(new, prop, drafted)
            elif gen != list(candidate[: len(gen)]):  # the target left the candidate
                on_candidate = False
            else:  # it keeps the candidate: check it in longer chunks (they cost no draft)
                chunk = max(k, CANDIDATE_CHUNK)
            lps.append(token_logprobs(logits[: len(new)], torch.tensor(new)))
            pc.cache.crop(len(new) - 1 - len(prop))  # KV of the accepted proposals only
    pc.decode_tokens += len(gen)
    stats.kept = common_prefix(gen, candidate)
    pc.cache_ids = cache_ids = [*pc.ids, *gen[:-1]]
    cand = cut_step(gen, delimiter, target.eos_ids, target.decode, torch.cat(lps))
    return Sample([cand], len(pc.ids), pc.cache, [cache_ids], None), stats
