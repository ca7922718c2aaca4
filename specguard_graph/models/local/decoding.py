"""The step sampling loop: one forward per token over all rows, and little else per token.

It replaces `transformers.generate` with what a step needs and nothing more: the raw
log-probability of each chosen token (for the signal, `token_logprobs`), safe logits to
sample from, a per-call `torch.Generator` (so concurrent runs never share random numbers),
and delimiter detection on token pieces decoded once per model (the stopping criterion it
replaces decoded every row's tail text at every token). `benchmarks/decode_speed.py`
compares it with a bare forward loop at the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .. import tokens as tokens_stream
from ..base import Candidate

Piece = Callable[[int], str]

PREFILL_ROWS = 256
"""Rows per forward of a long prefill. In one forward a 3,000-token prompt's layer outputs (the
target's MLP: 17,920 columns, 215 MB at 3,000 rows) spill out of the CPU's caches; fed 256 rows
at a time the target and the draft prefilled it in 0.92x and 0.93x the time on the AMX Xeon
(512: 0.93x; 1,024: 1.00x and 0.96x; `benchmarks/probes/prefill_chunks.py`). On a
row-invariant model each row's bits are the same however the prompt is cut (the prefix store
relies on that too)."""


def feed_long(model: Any, cache: Any, ids: Sequence[int]) -> list[int]:
    """Feed all but the last (at most `PREFILL_ROWS`) of `ids` into `cache`, `PREFILL_ROWS` per
    forward, where the model is row-invariant; the rest, for the caller's own forward."""
    from .numerics import row_invariant

    if len(ids) <= PREFILL_ROWS or not row_invariant(model):
        return list(ids)
    split = (len(ids) - 1) // PREFILL_ROWS * PREFILL_ROWS
    for i in range(0, split, PREFILL_ROWS):
        x = torch.tensor([ids[i : i + PREFILL_ROWS]], device=model.device)
        model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=1)
        tokens_stream.prefill_progress(i + PREFILL_ROWS, len(ids))  # the rest: the caller's
    return list(ids[split:])


@dataclass
class Decoded:
    tokens: torch.Tensor  # rows x T generated ids (pad after a row has ended)
    logprobs: torch.Tensor  # rows x T, log p of each token under the raw distribution
    doomed: list[int]  # per row: the tokens it had when `stop_if` ended it, else 0


class DelimiterWatch:
    """Tells when a row's generated text (never the prompt) contains the delimiter.

    Each token's text piece is decoded once per model and remembered, and a row keeps only
    the last len(delimiter) - 1 characters it has seen, so a check costs a dict lookup."""

    def __init__(self, piece: Piece, delimiter: str, rows: int):
        self.piece, self.delimiter = piece, delimiter
        self.tails = [""] * rows
        self.keep = max(len(delimiter) - 1, 0)

    def seen(self, row: int, token: int) -> bool:
        text = self.tails[row] + self.piece(token)
        if self.delimiter in text:
            return True
        self.tails[row] = text[len(text) - self.keep :] if self.keep else ""
        return False


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log p of `ids[r]` under row r of `logits`: the one formula every caller uses.

    A token scored while sampling must get the bit-identical value a scoring forward gives it,
    and `log_softmax` and `logit - logsumexp` are two roundings of one number: over a
    151,936-token vocabulary they differ by up to ~4e-5 on AVX2 and ~2e-5 on AVX-512
    (log_softmax's float32 sum is the coarser). Both reduce each row alone, so one shared
    formula on row-invariant logits gives one value whatever the rows fed beside it."""
    lse = torch.logsumexp(logits, dim=-1)
    return logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - lse


def _sample(logits: torch.Tensor, temperature: float, top_p: float,
            generator: torch.Generator) -> torch.Tensor:  # fmt: skip
    logits = logits / temperature if temperature != 1.0 else logits
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        # keep the smallest set whose mass reaches top_p (the top token always stays)
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@torch.inference_mode()
def decode(
    model: Any,
    cache: Any,
    last: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    seed: int,
    eos_ids: Sequence[int],
    pad_id: int,
    watch: DelimiterWatch,
    stop_if: Callable[[float], bool] | None = None,
) -> Decoded:
    """Generate up to `max_new_tokens` per row after `last` (one id per row, not yet in
    `cache`), stopping a row at EOS or once its text holds the delimiter.

    `stop_if(log p)` true for a token that the step will score (not the delimiter, EOS or the
    budget's last token) ends its row there too: the step can no longer pass, so the tokens
    after it would be drafted for nothing (`scoring.doomed_below`)."""
    device = next(model.parameters()).device
    rows = len(last)
    greedy = temperature <= 0.0
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    eos = torch.tensor(sorted(eos_ids) or [-1], device=device)
    alive = torch.ones(rows, dtype=torch.bool, device=device)
    x = torch.tensor([[t] for t in last], device=device)
    tokens, logprobs = [], []
    doomed = [0] * rows
    for t in range(max_new_tokens):
        logits = model(input_ids=x, cache=cache, use_cache=True).logits[:, -1].float()
        # raw log p (NaN stays NaN, so the step is flagged); sample from sanitised logits
        safe = torch.nan_to_num(logits, nan=0.0)
        nxt = safe.argmax(-1) if greedy else _sample(safe, temperature, top_p, gen)
        nxt = torch.where(alive, nxt, torch.full_like(nxt, pad_id))
        tokens.append(nxt)
        logprobs.append(token_logprobs(logits, nxt))
        ids, ended = nxt.tolist(), torch.isin(nxt, eos).tolist()
        if rows == 1 and not ended[0]:  # a greedy answer streams as it is written
            tokens_stream.emit(ids)
        lps = logprobs[-1].tolist() if stop_if is not None else None
        for r, live in enumerate(alive.tolist()):
            if live and (ended[r] or watch.seen(r, ids[r])):
                alive[r] = False
            elif live and lps is not None and t + 1 < max_new_tokens and stop_if(lps[r]):
                alive[r], doomed[r] = False, t + 1
        if not alive.any():
            break
        x = nxt[:, None]
    return Decoded(torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1), doomed)


def cut_step(
    gen: list[int],
    delimiter: str,
    eos_ids: Sequence[int],
    detok: Callable[[Sequence[int]], str],
    logprobs: torch.Tensor | None,
    doomed: int = 0,
) -> Candidate:
    """One row's generated ids as a step: cut after the token that completes the delimiter
    (or at EOS, or where the budget ran out, or after the first `doomed` tokens), with the
    log-probs of its scored tokens (a doomed step scores all, the one that doomed it too)."""
    gen = gen[:doomed] if doomed else gen
    eos_at = next((i for i, t in enumerate(gen) if t in eos_ids), None)
    body = gen if eos_at is None else gen[:eos_at]
    full = detok(body)
    d = full.find(delimiter)
    if d != -1:
        lo, hi = 0, len(body) - 1  # smallest c with the delimiter inside detok(body[:c+1])
        while lo < hi:
            mid = (lo + hi) // 2
            if delimiter in detok(body[: mid + 1]):
                hi = mid
            else:
                lo = mid + 1
        keep, scored, ended, text = body[: lo + 1], lo, "delimiter", full[:d]
    elif eos_at is not None or doomed:
        keep, scored, ended, text = body, len(body), "doomed" if doomed else "eos", full
    else:
        keep, scored, ended, text = body, max(len(body) - 1, 0), "length", full
    lps = [] if logprobs is None else logprobs[:scored].tolist()
    return Candidate(text=text, token_ids=keep, token_logprobs=lps, ended=ended)  # type: ignore[arg-type]
