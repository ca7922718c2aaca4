"""Token log-probs as engines return them on a completions route, and prompt log-probs.

vLLM and SGLang return the classic form (`tokens`, `token_logprobs`, `top_logprobs`,
`text_offset`); llama.cpp's server the chat-style `content` list. With a stop string vLLM's
tokens still include the tokens of the cut stop text, so tokens are cut where the returned
text ends (by offset). With `echo` vLLM also returns `prompt_logprobs`: each prompt token's id,
log-prob and rank (the first has none), so a given step is scored, or checked against the
model's greedy choice token by token, by one request; its `/tokenize` says where the context's
tokens end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Tokens:
    """One completion's tokens: log-prob, text, and where it starts in the returned text."""

    logprobs: list[float]
    texts: list[str]
    offsets: list[int] | None = None

    def within(self, text: str, ended: str) -> Tokens:
        """The tokens of the returned `text` (vLLM also returns those of the cut stop string).
        At the delimiter, the token that carries it is dropped too (`:\n\n` is one token):
        like a local step, the token that ends it has no row."""
        if self.offsets is None:
            return self
        keep = [i for i, o in enumerate(self.offsets) if o < len(text)]
        if ended == "delimiter" and keep and not text.endswith(self.texts[keep[-1]]):
            keep.pop()
        return Tokens([self.logprobs[i] for i in keep], [self.texts[i] for i in keep],
                      [self.offsets[i] for i in keep])  # fmt: skip


def parse(logprobs: Any) -> Tokens | None:
    if logprobs is None:
        return None
    data = logprobs if isinstance(logprobs, dict) else logprobs.model_dump()
    if data.get("token_logprobs") is not None:
        raw = data["token_logprobs"]
        texts, offsets = data.get("tokens") or [""] * len(raw), data.get("text_offset")
        keep = [i for i, x in enumerate(raw) if x is not None]
        return Tokens([float(raw[i]) for i in keep], [str(texts[i]) for i in keep],
                      None if offsets is None else [int(offsets[i]) for i in keep])  # fmt: skip
    if data.get("content") is not None:
        content = data["content"]
        return Tokens([float(t["logprob"]) for t in content],
                      [str(t.get("token")) for t in content])  # fmt: skip
    return None


@dataclass
class PromptTokens:
    """A prompt as the engine tokenized and scored it (vLLM's `prompt_logprobs`): each token's
    id, text and log-prob (None for the first), and whether it was the engine's own top-1."""

    ids: list[int]
    texts: list[str]
    logprobs: list[float | None]
    top1: list[bool]

    def after(self, n: int) -> PromptTokens:
        return PromptTokens(self.ids[n:], self.texts[n:], self.logprobs[n:], self.top1[n:])


def echo(model: Any, prompt: str, first: int | None = None) -> PromptTokens:
    """Every token of `prompt` with its log-prob and whether the model's greedy choice was it
    (one prefill: `echo`, one generated token that is dropped). Raises NotImplementedError
    where the engine gives no prompt log-probs (llama.cpp's server)."""
    r = model._call(model.client.completions.create, model=model.model, prompt=prompt,
                    echo=True, max_tokens=1, temperature=0.0, logprobs=1,
                    extra_body=model.extra_body)  # fmt: skip
    rows = (r.choices[0].model_extra or {}).get("prompt_logprobs") if r.choices else None
    if not rows or rows[0] is not None:
        raise NotImplementedError(f"{model.name} gives no prompt log-probs")
    ids, texts, lps, top1 = [], [], [], []
    for row in rows[1:]:  # the actual token, and the rank-1 one when that is another
        actual = next((k for k, v in row.items() if v.get("rank") != 1), None)
        key = actual if actual is not None else next(iter(row))
        ids.append(int(key))
        texts.append(str(row[key].get("decoded_token") or ""))
        lps.append(float(row[key]["logprob"]))
        top1.append(actual is None)
    if first is None:  # the first token has no row: its id from the tokenizer
        first = tokenize(model, prompt)[0]
    return PromptTokens([first, *ids], ["", *texts], [None, *lps], [False, *top1])


def _post(model: Any, route: str, body: dict[str, Any]) -> Any:
    import httpx

    from ...errors import ModelLoadError

    root = model.base_url.removesuffix("/v1")
    try:
        key = model.client.api_key
        r = httpx.post(root + route, json={"model": model.model, **body}, timeout=60,
                       headers={"Authorization": f"Bearer {key}"} if key else None)  # fmt: skip
        r.raise_for_status()
        return r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ModelLoadError(f"{root}{route}: {' '.join(str(exc).split())[:200]}") from None


def tokenize(model: Any, text: str) -> list[int]:
    """The engine's own token ids of `text`, as its completions route tokenizes a prompt."""
    return [int(t) for t in _post(model, "/tokenize", {"prompt": text})["tokens"]]


def detokenize(model: Any, ids: list[int]) -> str:
    return str(_post(model, "/detokenize", {"tokens": ids})["prompt"]) if ids else ""


def probe(model: Any) -> bool:
    """Whether the engine returns prompt log-probs (vLLM: yes; llama.cpp's server: no)."""
    from ...errors import SpecGuardError

    try:
        return len(echo(model, "Hello, world").ids) > 1
    except (NotImplementedError, SpecGuardError):
        return False


def split(model: Any, context: str, text: str) -> tuple[PromptTokens, list[int]]:
    """`context + text` scored, and the context's token ids: the step's tokens start where the
    two tokenizations part (a token that straddles the boundary counts as the step's)."""
    ctx = tokenize(model, context)
    whole = echo(model, context + text, first=ctx[0] if ctx else None)
    n = next((i for i, (a, b) in enumerate(zip(whole.ids, ctx, strict=False)) if a != b),
             min(len(ctx), len(whole.ids)))  # fmt: skip
    return whole, whole.ids[:n]
