"""Tiny offline models for tests: real transformers / sentence-transformers objects.

The tokenizer is a byte-level BPE trained here on a few sentences, so any text encodes
and nothing is downloaded. The LMs are random Qwen2 models whose weights are shaped so
runs look like real ones: a constant direction in the residual stream acts as a bias on
the logits, making "\\n" (so blank-line steps) and EOS reasonably likely.

`feed` and `greedy` give the same tokens to a model in different ways (`FEEDINGS`): the check
behind "faithful numerics". A model computes one function only if a token's scores do not
depend on how it was fed: alone after a cache (decode), inside a chunk (a catch-up prefill, a
verification forward), or as one row of a batch (k-sampling). `benchmarks/fidelity.py`
measures this on the real pair, and the tests assert it on the tiny models for every CPU
weight format but dynamic int8.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import StaticEmbedding
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import DynamicCache, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from .models.embedder import SentenceEmbedder
from .models.local.hf import LocalCausalLM
from .models.local.kv_cache import new_cache

_CORPUS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
    "How many clips did Natalia sell altogether in April and May?",
    "Step 1: 48 / 2 = 24 clips in May.\n\nStep 2: 48 + 24 = 72.\n\nThe answer is \\boxed{72}.",
    "1. Gather the data\n2. Compute the total\n3. Check the result\nDONE",
    '{"tool": "add", "args": {"a": 2, "b": 3}}\n{"final": 5}',
    "Please reason step by step, and put your final answer within \\boxed{}.",
]
_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@lru_cache(maxsize=1)
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with a chat template, built offline in milliseconds."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=_CHAT_TEMPLATE,
    )


def tiny_lm(
    *,
    layers: int,
    hidden: int,
    heads: int,
    seed: int,
    newline_bias: float = 0.4,
    eos_bias: float = -0.1,
    init_range: float = 0.1,
    constant: float = 40.0,
) -> LocalCausalLM:
    """A random Qwen2 causal LM on the tiny tokenizer (see the module docstring); `constant=0`
    drops the residual direction, for a model that can learn (it otherwise swamps every
    position's state after the norm)."""
    tok = tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=4096,
        initializer_range=init_range,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = constant  # constant residual direction
        model.lm_head.weight[:, 0] = 0.0
        newline = tok.convert_tokens_to_ids("Ċ")
        model.lm_head.weight[newline, 0] = newline_bias
        model.lm_head.weight[tok.eos_token_id, 0] = eos_bias
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return LocalCausalLM(model, tok, name=f"tiny-qwen2-{layers}L")


def tiny_exact_lm(newline_bias: float = 0.4) -> LocalCausalLM:
    """A tiny LM on the row-invariant int8 format, where reuse is exact: its prefix store (and
    disk tier), prompt lookup and verification are on, as on the embedded pair."""
    from .models.local import numerics

    base = tiny_lm(layers=3, hidden=64, heads=4, seed=3, init_range=0.3,
                   newline_bias=newline_bias)  # fmt: skip
    return LocalCausalLM(numerics.apply(base.model, "int8", "cpu"), base.tokenizer)


def tiny_embedder(dim: int = 32, seed: int = 0) -> SentenceEmbedder:
    """A sentence-transformers StaticEmbedding (mean of random token vectors)."""
    torch.manual_seed(seed)
    static = StaticEmbedding(tiny_tokenizer(), embedding_dim=dim)
    return SentenceEmbedder(SentenceTransformer(modules=[static], device="cpu"))


@dataclass(frozen=True)
class TinyModels:
    draft: LocalCausalLM
    target: LocalCausalLM
    embedder: SentenceEmbedder

    def __iter__(self):  # allows `draft, target, embedder = tiny_models()`
        return iter((self.draft, self.target, self.embedder))


def tiny_models(seed: int = 0) -> TinyModels:
    """A draft (4 layers), a target (6 layers, wider) and an embedder, all offline."""
    return TinyModels(
        draft=tiny_lm(layers=4, hidden=64, heads=4, seed=seed),
        # greedy decoding of a random model would repeat a blank line forever: no newline bias
        target=tiny_lm(layers=6, hidden=96, heads=6, seed=seed + 1, newline_bias=0.0),
        embedder=tiny_embedder(seed=seed),
    )


FEEDINGS = ("one forward", "token by token", "chunks of 16", "row of 4")


def batch_of_4(row: list[int], others: list[list[int]]) -> list[list[int]]:
    """`row` first, then three other texts cut or cycled to its length (no padding needed)."""
    n = len(row)
    return [row] + [(o * (n // len(o) + 1))[:n] for o in others[:3]]


@torch.inference_mode()
def feed(
    model: Any, rows: list[list[int]], feeding: str, start: int = 0
) -> tuple[torch.Tensor, DynamicCache]:
    """Float32 log-probs (rows x T x V) after every position of `rows` fed in `feeding`
    ("row of 4" means the caller batched the rows), and the cache they leave. The first
    `start` positions (a prompt) are fed as one forward whatever `feeding` says."""
    if feeding not in FEEDINGS:
        raise ValueError(f"feeding must be one of {', '.join(FEEDINGS)}")
    x = torch.tensor(rows, device=next(model.parameters()).device)
    step = {"token by token": 1, "chunks of 16": 16}.get(feeding, x.shape[1])
    cache = new_cache(model.config)
    cuts = sorted({0, *range(start, x.shape[1], step)})  # 0..start is one forward
    outs = []
    for lo, hi in zip(cuts, [*cuts[1:], x.shape[1]], strict=True):
        out = model(input_ids=x[:, lo:hi], cache=cache, use_cache=True)
        outs.append(torch.log_softmax(out.logits.float(), dim=-1))
    return torch.cat(outs, dim=1), cache


@torch.inference_mode()
def greedy(model: Any, rows: list[list[int]], feeding: str, new_tokens: int) -> list[int]:
    """Row 0's greedy continuation after its prompt is fed in `feeding`, decoding all rows."""
    lp, cache = feed(model, rows, feeding)
    nxt = lp[:, -1].argmax(-1, keepdim=True)
    out = [int(nxt[0, 0])]
    for _ in range(new_tokens - 1):
        logits = model(input_ids=nxt, cache=cache, use_cache=True).logits[:, -1]
        nxt = logits.float().argmax(-1, keepdim=True)
        out.append(int(nxt[0, 0]))
    return out
