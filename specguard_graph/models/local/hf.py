"""The prefix-cache engine: local Hugging Face causal LMs with a cached accepted prefix and
k-way step sampling.

Each run keeps one `PrefixCache` per model: the token ids of prompt + accepted steps and
a KV cache over all but the last of them. Before any model call the cache is reconciled
with the ids by longest common prefix, so only tokens the model has not seen are fed:
a step the model wrote itself is adopted straight from its sampling cache (0 tokens),
a step the other model wrote is fed in one prefill the next time this model is needed.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from ...errors import InputError
from ..base import PrefixCache, Sample
from . import lean_layers
from .capture import ATTN_IMPLEMENTATION, capture_attention
from .decoding import DelimiterWatch, cut_step, decode, feed_long, token_logprobs
from .load import read
from .numerics import Quantize
from .prefix_store import PrefixStore, common_prefix


class LocalCausalLM:
    """A transformers causal LM plus its tokenizer, ready for step-level decoding."""

    def __init__(self, model: PreTrainedModel, tokenizer: Any, *, name: str | None = None):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.model.set_attn_implementation(ATTN_IMPLEMENTATION)
        self.lean = lean_layers.install(self.model)  # transformers' ops, not its call overhead
        gen = getattr(model, "generation_config", None)
        eos: set[int] = set()
        for src in (getattr(gen, "eos_token_id", None), tokenizer.eos_token_id):
            if isinstance(src, int):
                eos.add(src)
            elif src:
                eos.update(int(x) for x in src)
        pad, self.eos_ids = tokenizer.pad_token_id, sorted(eos)
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        self.lock = threading.RLock()  # one forward at a time per model
        # prompts kept across runs (`prefix_store/`): on where reuse is bit-exact
        self.prefix_store = PrefixStore.for_model(model)
        self._pieces: dict[int, str] = {}

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        quantize: Quantize = "none",
    ) -> LocalCausalLM:
        """Load a transformers model directory or a single `.gguf` file, fully offline
        (`load.read`; `quantize` is a CPU weight format from `numerics`)."""
        model, tokenizer = read(path, device=device, dtype=dtype, quantize=quantize)
        return cls(model, tokenizer, name=Path(path).expanduser().name)

    # ---- facts -----------------------------------------------------------------------------
    has_logprobs = has_attentions = can_score = True

    def vocab(self) -> dict[str, int]:
        return dict(self.tokenizer.get_vocab())

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
        if token not in self._pieces:
            self._pieces[token] = str(self.tokenizer.decode([token]))
        return self._pieces[token]

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
            raise InputError(f"context of {len(pc.ids)} tokens plus {new_tokens} new exceeds "
                             f"{self.name}'s window of {self.context_window} tokens")  # fmt: skip

    def reuse(self, pc: PrefixCache, want: Sequence[int]) -> list[int]:
        """Crop the cache to its longest prefix shared with `want`; the tokens it then lacks."""
        if pc.cache is None:
            pc.cache, pc.cache_ids = self.prefix_store.start(want)
            pc.reused_tokens += len(pc.cache_ids)
        keep = common_prefix(pc.cache_ids, want)
        if keep < len(pc.cache_ids):
            pc.cache.crop(keep - len(pc.cache_ids))
            pc.cache_ids = pc.cache_ids[:keep]
        return list(want[keep:])

    @torch.inference_mode()
    def catch_up(self, pc: PrefixCache) -> None:
        """Make the cache hold exactly ids[:-1], feeding only the tokens it lacks."""
        want = pc.ids[:-1]
        new = self.reuse(pc, want)
        if new:
            t0 = time.perf_counter()
            x = torch.tensor([feed_long(self.model, pc.cache, new)], device=self.device)
            self.model(input_ids=x, cache=pc.cache, use_cache=True, logits_to_keep=1)
            pc.prefill_s += time.perf_counter() - t0
            pc.prefill_tokens += len(new)
            pc.cache_ids = list(want)
        if not pc.remembered:  # the prompt, for later runs
            pc.remembered = self.prefix_store.remember(pc.cache_ids, pc.cache)

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
        stop_if: Callable[[float], bool] | None = None,
    ) -> Sample:
        """Draw `n` candidate steps in one batched decode sharing the cached prefix.

        With `fork=False` (n = 1 only) the run's own cache is extended in place: use it when
        the step will be kept whatever happens (the target's recompute); `stop_if`: `decode`'s."""
        if n < 1:
            raise ValueError("n must be >= 1")
        if not fork and n != 1:
            raise ValueError("fork=False needs n == 1")
        self._check_window(pc, max_new_tokens)
        with self.lock:
            self.catch_up(pc)
            cache = pc.cache
            if fork:
                cache = copy.deepcopy(cache)
                if n > 1:
                    cache.batch_repeat_interleave(n)
            prefix = len(pc.ids)
            cap_layers = capture_layers or frozenset()
            with capture_attention(cap_layers) as cap:
                out = decode(
                    self.model, cache, [pc.ids[-1]] * n, max_new_tokens=max_new_tokens,
                    temperature=temperature, top_p=top_p, seed=seed, eos_ids=self.eos_ids,
                    pad_id=self.pad_id, watch=DelimiterWatch(self.piece, delimiter, n),
                    stop_if=stop_if,
                )  # fmt: skip
            total = out.tokens.shape[1]
            pc.decode_tokens += n * total
            if not fork:
                pc.cache = cache
        rows = [out.tokens[row].tolist() for row in range(n)]
        return Sample(
            candidates=[
                cut_step(gen, delimiter, self.eos_ids, self.decode, out.logprobs[row], cut)
                for row, (gen, cut) in enumerate(zip(rows, out.doomed, strict=True))
            ],
            prefix_len=prefix,
            cache=cache,
            cache_ids=[pc.ids + gen[: max(total - 1, 0)] for gen in rows],
            capture=cap if cap_layers else None,
        )

    @torch.inference_mode()
    def next_logits(self, pc: PrefixCache) -> torch.Tensor:
        """The next-token logits after the whole context (a judge's reply): the context's
        last token is fed too, so the cache then covers every id."""
        with self.lock:
            self.catch_up(pc)
            x = torch.tensor([pc.ids[-1:]], device=self.device)
            logits = self.model(input_ids=x, cache=pc.cache, use_cache=True).logits[0, -1]
            pc.cache_ids = [*pc.cache_ids, pc.ids[-1]]
            pc.prefill_tokens += 1
        return logits

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
        with self.lock:
            self.catch_up(pc)
            fed = [pc.ids[-1], *step_ids]
            x = torch.tensor([fed], device=self.device)
            with capture_attention(capture_layers) as cap:
                out = self.model(input_ids=x, cache=pc.cache, use_cache=True)
            pc.prefill_tokens += len(fed)
            pc.cache_ids = pc.cache_ids + fed
        logits = out.logits[0, : len(step_ids)].float()
        target = torch.tensor(step_ids, device=logits.device)
        lps = token_logprobs(logits, target).cpu().tolist()  # decode's formula: same bits
        atts = [cap.rows[layer][0][0, :, 1:, :].cpu() for layer in sorted(capture_layers)]
        return lps, atts
