"""What every step model shares: the per-run prefix, sampled candidates, and the protocol the
graph's nodes call (docs/design.md, "Sessions and caches").

A backend says what it can give through capability flags instead of the graph checking its
concrete class, so a served model or a user callable plugs in the same way as a local one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch

if TYPE_CHECKING:
    from .local.capture import AttentionCapture

StepEnd = Literal["delimiter", "eos", "length", "doomed"]


@dataclass
class PrefixCache:
    """One model's view of one run: context ids and the KV cache over `cache_ids`."""

    ids: list[int]
    cache: Any = None
    cache_ids: list[int] = field(default_factory=list)
    prefill_tokens: int = 0  # tokens fed in catch-up prefills (batch 1)
    prefill_s: float = 0.0  # seconds of the catch-up forwards (one fused into a check: the check's)
    decode_tokens: int = 0  # tokens fed while generating (all rows)
    reused_tokens: int = 0  # tokens whose KV came from an earlier run (`local/prefix_store/`)
    remembered: bool = False  # this run's prompt is in the model's prefix store

    def extend(self, ids: Sequence[int]) -> None:
        """Append tokens to the context; the model is fed them lazily on its next call."""
        self.ids = self.ids + list(ids)


@dataclass
class Candidate:
    """One sampled step. `token_ids` extend the context if accepted (delimiter included);
    `token_logprobs` cover the scored tokens: every generated token but the last, which is
    the delimiter, the token before EOS's successor, or the cut point, and has no row."""

    text: str
    token_ids: list[int]
    token_logprobs: list[float]
    ended: StepEnd
    scored: int | None = None  # set when a backend scores tokens it gives no log-probs for
    generated: int | None = None  # the model's own token count, where ids are not its tokens
    pieces: list[str] | None = None  # and those tokens' texts (a server returns them)

    @property
    def n_scored(self) -> int:
        return len(self.token_logprobs) if self.scored is None else self.scored

    @property
    def n_tokens(self) -> int:
        """Tokens the model generated: what budgets and counts are in."""
        return len(self.token_ids) if self.generated is None else self.generated


@dataclass
class Sample:
    """The result of one batched sampling call, with what is needed to adopt a row."""

    candidates: list[Candidate]
    prefix_len: int
    cache: Any
    cache_ids: list[list[int]]
    capture: AttentionCapture | None
    precomputed: list[list[torch.Tensor]] | None = None  # from backends that return them
    parts: list[tuple[Sample, int]] | None = None  # set by `merge`: where each row came from

    def source(self, row: int) -> tuple[Sample, int]:
        """The sampling call (and its row) that produced candidate `row`."""
        return self.parts[row] if self.parts is not None else (self, row)

    def merge(self, more: Sample) -> Sample:
        """This sample's candidates followed by `more`'s (same prefix, separate calls)."""
        parts = [self.source(i) for i in range(len(self.candidates))]
        parts += [more.source(i) for i in range(len(more.candidates))]
        return Sample([*self.candidates, *more.candidates], self.prefix_len, None, [], None,
                      parts=parts)  # fmt: skip

    def attentions(self, row: int) -> list[torch.Tensor]:
        """Captured rows of candidate `row` per layer (oldest first), heads x S x (P + S)."""
        if self.parts is not None:
            src, r = self.source(row)
            return src.attentions(r)
        if self.precomputed is not None:
            if not self.precomputed[row]:
                raise ValueError("this backend gave no attentions")
            return self.precomputed[row]
        if self.capture is None:
            raise ValueError("attention was not captured for this sample")
        cand = self.candidates[row]
        s, p = cand.n_scored, self.prefix_len
        out = []
        for layer in sorted(self.capture.layers):
            calls = self.capture.rows.get(layer, [])
            if len(calls) < s + 1:
                raise ValueError(f"layer {layer}: {len(calls)} captured calls, need {s + 1}")
            heads = calls[0].shape[1]
            # built in numpy: the grounding node runs on an executor thread, where a torch
            # op would start a second OpenMP team (`scoring.grounding_score`)
            att = np.zeros((heads, s, p + s), dtype=np.float32)
            for t in range(1, s + 1):  # call 0 is the last prefix token's row
                r = calls[t][row, :, -1, :].cpu().numpy()
                att[:, t - 1, : r.shape[-1]] = r
            out.append(torch.from_numpy(att))
        return out


@runtime_checkable
class StepModel(Protocol):
    """A model that writes steps after a cached prefix: what the graph's nodes call.

    Capability flags: `has_logprobs` / `has_attentions` (the signals a sample carries),
    `can_score` (re-scores a given step: `signal_model="target"`, resumed runs), and
    `vocab()` (token ids shared with another model let a step pass as tokens, not text).
    """

    name: str
    tokenizer: Any
    context_window: int
    has_logprobs: bool
    has_attentions: bool
    can_score: bool

    def vocab(self) -> dict[str, int] | None: ...

    def capture_layers(self, n: int) -> frozenset[int]: ...

    def encode(self, text: str) -> list[int]: ...

    def new_prefix(self, prompt: str) -> PrefixCache: ...

    def append_text(self, pc: PrefixCache, text: str) -> None: ...

    def adopt(self, pc: PrefixCache, sample: Sample, row: int) -> None: ...

    def sample(
        self,
        pc: PrefixCache,
        *,
        n: int,
        delimiter: str,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        seed: int = 0,
        capture_layers: frozenset[int] | None = None,
        fork: bool = True,
    ) -> Sample:
        """Draw `n` candidate steps in one call (`fork=False`: extend the run's own cache)."""
        ...

    def score(
        self, pc: PrefixCache, step_ids: Sequence[int], capture_layers: frozenset[int]
    ) -> tuple[list[float], list[torch.Tensor]]:
        """Log-probs and attention rows of a given step after the context."""
        ...


def shared_vocab(a: StepModel, b: StepModel) -> bool:
    """True when both models map text to the same token ids (steps can pass as tokens)."""
    va = a.vocab()
    return va is not None and va == b.vocab()
