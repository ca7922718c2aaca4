"""Bring your own draft or target: any callable that writes steps.

`fn(prompt, n, *, delimiter, max_new_tokens, temperature, seed)` returns n steps, each a
string or a `StepOutput` carrying what the backend can give: token log-probs (for LPBV)
and attention rows (for ABGV). Signals a backend cannot give must be switched off
explicitly in the config: no log-probs -> `beta=0` (grounding only); no attentions ->
`beta=1` (log-probs only). `build_graph` refuses a config that relies on a missing signal.

Context is kept as text; "tokens" in counts are characters for such models, and a
callable target cannot score (`signal_model="target"` needs a local HF target).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import InputError
from ..steps import separator
from .base import Candidate, PrefixCache, Sample, StepEnd

ENDS = ("delimiter", "eos", "length")


@dataclass
class StepOutput:
    text: str
    token_logprobs: Sequence[float] | None = None
    attentions: Sequence[torch.Tensor] | None = None  # per layer: heads x S x (P + S)
    prefix_len: int | None = None  # P of the attentions
    ended: StepEnd = "delimiter"
    token_texts: Sequence[str] | None = None  # each log-prob's token text (a server's tokens)


StepFn = Callable[..., Sequence["StepOutput | str"]]


class CallableStepModel:
    """Adapts a step-writing callable to the interface the graph's nodes use."""

    tokenizer: Any = None
    context_window = 1 << 30
    num_layers = 0
    can_score = False  # context is text: a given step cannot be re-scored

    def __init__(
        self,
        fn: StepFn,
        *,
        name: str = "callable",
        has_logprobs: bool = False,
        has_attentions: bool = False,
        tokenizer: Any = None,
    ):
        self.fn, self.name = fn, name
        self.has_logprobs, self.has_attentions = has_logprobs, has_attentions
        self.tokenizer = tokenizer  # only used to render chat prompts, if given

    def vocab(self) -> None:
        return None  # steps always pass to the other model as text

    def capture_layers(self, n: int) -> frozenset[int]:
        return frozenset()

    def encode(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def new_prefix(self, prompt: str) -> PrefixCache:
        return PrefixCache(ids=self.encode(prompt))

    def append_text(self, pc: PrefixCache, text: str) -> None:
        pc.extend(self.encode(text))

    def adopt(self, pc: PrefixCache, sample: Sample, row: int) -> None:
        src, r = sample.source(row)
        pc.extend(src.candidates[r].token_ids)

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
        outs = self._write(
            self.decode(pc.ids), n, delimiter=delimiter, max_new_tokens=max_new_tokens,
            temperature=temperature, top_p=top_p, seed=seed,
        )  # fmt: skip
        if len(outs) != n:
            raise ValueError(f"{self.name} returned {len(outs)} steps, {n} were asked for")
        steps = [o if isinstance(o, StepOutput) else StepOutput(text=str(o)) for o in outs]
        candidates, attentions = [], []
        for o in steps:
            candidates.append(self._candidate(o, delimiter, max_new_tokens))
            attentions.append([torch.as_tensor(a, dtype=torch.float32) for a in o.attentions or []])
        prefix = next((o.prefix_len for o in steps if o.prefix_len is not None), len(pc.ids))
        return Sample(candidates, prefix, None, [], None, precomputed=attentions)

    def _write(self, prompt: str, n: int, *, top_p: float, **kw: Any) -> list[StepOutput | str]:
        """The n steps after `prompt`: the user's function (which takes no top_p)."""
        return list(self.fn(prompt, n, **kw))

    def _candidate(self, o: StepOutput, delimiter: str, max_new_tokens: int) -> Candidate:
        """A returned step as a candidate: cut at the delimiter, and at `max_new_tokens`
        characters (this backend's tokens) like any model's step, marked `length` then."""
        if o.ended not in ENDS:
            raise InputError(
                f"{self.name}: ended must be one of {', '.join(ENDS)}, got {o.ended!r}"
            )
        text, ended = o.text.split(delimiter, 1)[0], o.ended
        if len(text + separator(delimiter, ended)) > max_new_tokens:
            text, ended = text[:max_new_tokens], "length"
        lps = [float(x) for x in o.token_logprobs or []]
        scored = int(torch.as_tensor(o.attentions[0]).shape[1]) if o.attentions else len(lps)
        ids = self.encode(text + separator(delimiter, ended))
        pieces = list(o.token_texts) if o.token_texts is not None else None
        return Candidate(text, ids, lps, ended, scored=scored, pieces=pieces)

    def score(self, pc: PrefixCache, step_ids: Sequence[int], capture_layers: frozenset[int]):
        raise NotImplementedError(f"{self.name} cannot score a given step")
