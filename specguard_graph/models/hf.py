"""Local Hugging Face causal LMs with a cached accepted prefix and k-way step sampling.

Each run keeps one `PrefixCache` per model: the token ids of prompt + accepted steps and
a KV cache over all but the last of them. Before any model call the cache is reconciled
with the ids by longest common prefix, so only tokens the model has not seen are fed:
a step the model wrote itself is adopted straight from its sampling cache (0 tokens),
a step the other model wrote is fed in one prefill the next time this model is needed.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedModel

from ..errors import InputError, ModelLoadError
from . import numerics
from .capture import ATTN_IMPLEMENTATION, AttentionCapture, capture_attention
from .decoding import DelimiterWatch, decode

StepEnd = Literal["delimiter", "eos", "length"]


@dataclass
class PrefixCache:
    """One model's view of one run: context ids and the KV cache over `cache_ids`."""

    ids: list[int]
    cache: Any = None
    cache_ids: list[int] = field(default_factory=list)
    prefill_tokens: int = 0  # tokens fed in catch-up prefills (batch 1)
    decode_tokens: int = 0  # tokens fed while generating (all rows)

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
    row: int
    scored: int | None = None  # set when a backend scores tokens it gives no log-probs for

    @property
    def n_scored(self) -> int:
        return len(self.token_logprobs) if self.scored is None else self.scored


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
        cands = [
            Candidate(c.text, c.token_ids, c.token_logprobs, c.ended, i, c.scored)
            for i, c in enumerate([*self.candidates, *more.candidates])
        ]
        return Sample(cands, self.prefix_len, None, [], None, parts=parts)

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
            att = torch.zeros(heads, s, p + s, dtype=torch.float32)
            for t in range(1, s + 1):  # call 0 is the last prefix token's row
                r = calls[t][row, :, -1, :]
                att[:, t - 1, : r.shape[-1]] = r
            out.append(att)
        return out


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class LocalCausalLM:
    """A transformers causal LM plus its tokenizer, ready for step-level decoding."""

    def __init__(self, model: PreTrainedModel, tokenizer: Any, *, name: str | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.model.set_attn_implementation(ATTN_IMPLEMENTATION)
        gen = getattr(model, "generation_config", None)
        eos: set[int] = set()
        for src in (getattr(gen, "eos_token_id", None), tokenizer.eos_token_id):
            if isinstance(src, int):
                eos.add(src)
            elif src:
                eos.update(int(x) for x in src)
        self.eos_ids = sorted(eos)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        self._lock = threading.RLock()
        self._pieces: dict[int, str] = {}

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        quantize: Literal["none", "int8", "int8x2", "dynamic-int8"] = "none",
    ) -> LocalCausalLM:
        """Load a transformers model directory or a single `.gguf` file, fully offline.

        `quantize` is a CPU weight format from `numerics` ("int8" is the faithful one)."""
        path = Path(path).expanduser()
        if not path.exists():
            raise ModelLoadError(f"model path does not exist: {path}")
        kwargs: dict[str, Any] = {"local_files_only": True}
        if path.is_file():
            if path.suffix != ".gguf":
                raise ModelLoadError(f"not a model directory or .gguf file: {path}")
            src, kwargs["gguf_file"] = str(path.parent), path.name
        else:
            if not (path / "config.json").exists():
                raise ModelLoadError(f"not a model directory (no config.json): {path}")
            src = str(path)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype is None:
            dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        try:
            tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(
                src, dtype=dtype, attn_implementation="sdpa", **kwargs
            )
        except Exception as exc:  # any parse failure of a user file is a load error
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise ModelLoadError(f"cannot load model from {path}: {detail}") from None
        model.to(device)
        try:
            model = numerics.apply(model, quantize, device)
        except ValueError as exc:
            raise ModelLoadError(str(exc)) from None
        return cls(model, tokenizer, name=path.name)

    # ---- facts -----------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def context_window(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 1 << 30))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def capture_layers(self, n: int) -> frozenset[int]:
        """Indices of the last `n` decoder layers (all of them when n exceeds the depth)."""
        return frozenset(range(max(0, self.num_layers - n), self.num_layers))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def piece(self, token: int) -> str:
        """One token's text, decoded once per model (the delimiter watch reads these)."""
        text = self._pieces.get(token)
        if text is None:
            text = self._pieces[token] = str(self.tokenizer.decode([token]))
        return text

    # ---- prefix bookkeeping ---------------------------------------------------------------
    def new_prefix(self, prompt: str) -> PrefixCache:
        ids = self.encode(prompt)
        if not ids:
            raise InputError("the rendered prompt is empty")
        return PrefixCache(ids=ids)

    def append_text(self, pc: PrefixCache, text: str) -> None:
        """Extend the context with text another model wrote; fed lazily on next use."""
        pc.ids = pc.ids + self.encode(text)

    def adopt(self, pc: PrefixCache, sample: Sample, row: int) -> None:
        """Extend the context with this model's own candidate, reusing its KV rows."""
        sample, row = sample.source(row)
        cand = sample.candidates[row]
        cache = sample.cache
        if cache is not None and len(sample.cache_ids) > 1:
            cache.batch_select_indices(torch.tensor([row], device=self.device))
        pc.cache, pc.cache_ids = cache, list(sample.cache_ids[row])
        pc.ids = pc.ids + cand.token_ids
        sample.cache = None

    def _check_window(self, pc: PrefixCache, new_tokens: int) -> None:
        need = len(pc.ids) + new_tokens
        if need > self.context_window:
            raise InputError(
                f"context of {len(pc.ids)} tokens plus {new_tokens} new exceeds "
                f"{self.name}'s window of {self.context_window} tokens"
            )

    @torch.inference_mode()
    def _catch_up(self, pc: PrefixCache) -> None:
        """Make the cache hold exactly ids[:-1], feeding only the tokens it lacks."""
        want = pc.ids[:-1]
        if pc.cache is None:
            pc.cache, pc.cache_ids = DynamicCache(config=self.model.config), []
        keep = _common_prefix(pc.cache_ids, want)
        if keep < len(pc.cache_ids):
            pc.cache.crop(keep - len(pc.cache_ids))
            pc.cache_ids = pc.cache_ids[:keep]
        new = want[keep:]
        if new:
            x = torch.tensor([new], device=self.device)
            self.model(input_ids=x, cache=pc.cache, use_cache=True, logits_to_keep=1)
            pc.prefill_tokens += len(new)
            pc.cache_ids = list(want)

    # ---- step generation -------------------------------------------------------------------
    @torch.inference_mode()
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
        """Draw `n` candidate steps in one batched decode sharing the cached prefix.

        With `fork=False` (n = 1 only) the run's own cache is extended in place: use it when
        the step will be kept whatever happens (the target's recompute)."""
        if n < 1:
            raise ValueError("n must be >= 1")
        if not fork and n != 1:
            raise ValueError("fork=False needs n == 1")
        self._check_window(pc, max_new_tokens)
        with self._lock:
            self._catch_up(pc)
            cache = pc.cache
            if fork:
                cache = copy.deepcopy(cache)
                if n > 1:
                    cache.batch_repeat_interleave(n)
            prefix = len(pc.ids)
            cap_layers = capture_layers or frozenset()
            with capture_attention(cap_layers) as cap:
                out = decode(
                    self.model,
                    cache,
                    [pc.ids[-1]] * n,
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    top_p=top_p,
                    seed=seed,
                    eos_ids=self.eos_ids,
                    pad_id=self.pad_id,
                    watch=DelimiterWatch(self.piece, delimiter, n),
                )
            total = out.tokens.shape[1]
            pc.decode_tokens += n * total
            if not fork:
                pc.cache = cache
        candidates, cache_ids = [], []
        for row in range(n):
            gen = out.tokens[row].tolist()
            cand = self._cut(gen, delimiter, row, out.logprobs[row])
            candidates.append(cand)
            cache_ids.append(pc.ids + gen[: max(total - 1, 0)])
        return Sample(
            candidates=candidates,
            prefix_len=prefix,
            cache=cache,
            cache_ids=cache_ids,
            capture=cap if cap_layers else None,
        )

    def _cut(
        self, gen: list[int], delimiter: str, row: int, logprobs: torch.Tensor | None
    ) -> Candidate:
        eos_at = next((i for i, t in enumerate(gen) if t in self.eos_ids), None)
        body = gen if eos_at is None else gen[:eos_at]
        full = self.decode(body)
        d = full.find(delimiter)
        if d != -1:
            lo, hi = 0, len(body) - 1  # smallest c with the delimiter inside decode(body[:c+1])
            while lo < hi:
                mid = (lo + hi) // 2
                if delimiter in self.decode(body[: mid + 1]):
                    hi = mid
                else:
                    lo = mid + 1
            keep, scored, ended, text = body[: lo + 1], lo, "delimiter", full[:d]
        elif eos_at is not None:
            keep, scored, ended, text = body, len(body), "eos", full
        else:
            keep, scored, ended, text = body, max(len(body) - 1, 0), "length", full
        lps = [] if logprobs is None else logprobs[:scored].tolist()
        return Candidate(text=text, token_ids=keep, token_logprobs=lps, ended=ended, row=row)

    @torch.inference_mode()
    def score(
        self, pc: PrefixCache, step_ids: Sequence[int], capture_layers: frozenset[int]
    ) -> tuple[list[float], list[torch.Tensor]]:
        """Log-probs and attention rows of `step_ids` after the context, in one forward.

        The step's KV stays in the cache: if the step is accepted the next call feeds
        nothing; if not, the common-prefix check crops it."""
        if not step_ids:
            raise ValueError("score needs at least one step token")
        self._check_window(pc, len(step_ids))
        with self._lock:
            self._catch_up(pc)
            fed = [pc.ids[-1], *step_ids]
            x = torch.tensor([fed], device=self.device)
            with capture_attention(capture_layers) as cap:
                out = self.model(input_ids=x, cache=pc.cache, use_cache=True)
            pc.prefill_tokens += len(fed)
            pc.cache_ids = pc.cache_ids + fed
        logits = out.logits[0, : len(step_ids)].float()
        target = torch.tensor(step_ids, device=logits.device).unsqueeze(1)
        lps = torch.log_softmax(logits, dim=-1).gather(1, target).squeeze(1).cpu().tolist()
        atts = [cap.rows[layer][0][0, :, 1:, :].cpu() for layer in sorted(capture_layers)]
        return lps, atts
