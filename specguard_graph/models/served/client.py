"""A draft or target served behind an OpenAI-compatible completions endpoint: vLLM, SGLang or
llama.cpp's server (`xllamacpp`). The graph's workers then hold no weights.

The context passes as text (the rendered prompt plus the accepted steps), k candidates come
from one request (`n = k`, `stop = [delimiter]`), with each token's log-probability. Engines
return no attention, so the signal is the log-prob one (`beta = 1`), or a local scorer's.
Where the engine gives prompt log-probs (vLLM), the model also scores a given step and, as a
target, verifies a rejected one (`logprobs.py`, `verify.py`).
Which engine gives what: docs/design.md, "Served models".
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import torch

from ...errors import InputError, ModelLoadError
from ...steps import separator
from ..base import Candidate, PrefixCache
from ..callable import CallableStepModel, StepOutput
from .logprobs import parse, probe, split
from .template import server_template

SERVED_PREFIXES = ("http://", "https://")


def is_served(path: object) -> bool:
    """The model-path contract: an http(s) base URL ending in /v1 means a served model."""
    return (
        isinstance(path, str)
        and path.startswith(SERVED_PREFIXES)
        and (path.rstrip("/").endswith("/v1"))
    )


def _ended(choice: Any, tokens: list[str]) -> str:
    """Why the engine stopped: the delimiter, EOS or the token limit. OpenAI's finish_reason
    says "stop" for both of the first two; each engine tells them apart its own way."""
    if choice.finish_reason == "length":
        return "length"
    extra = choice.model_extra or {}
    if "stop_reason" in extra:  # vLLM: the stop string matched, or None at EOS
        return "eos" if extra["stop_reason"] is None else "delimiter"
    if "matched_stop" in extra:  # SGLang: the string matched, or EOS's token id
        return "delimiter" if isinstance(extra["matched_stop"], str) else "eos"
    if tokens and tokens[-1] == "":  # llama.cpp: EOS comes back as the last token, no text
        return "eos"
    return "delimiter"


class ServedStepModel(CallableStepModel):
    """Steps from a served model. `model` defaults to the first id in the server's /v1/models;
    the API key comes from `api_key`, OPENAI_API_KEY or SPECGUARD_API_KEY."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        tokenizer: Any = None,
        timeout: float = 300.0,
        retries: int = 2,
        http_client: Any = None,
        extra_body: dict[str, Any] | None = None,
        prompt_logprobs: bool | None = None,
    ):
        import openai

        key = api_key or os.environ.get("SPECGUARD_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.base_url = base_url.rstrip("/")
        self.client = openai.OpenAI(base_url=self.base_url, api_key=key or "none",
                                    timeout=timeout, max_retries=retries,
                                    http_client=http_client)  # fmt: skip
        # engine-specific request fields (`repeatable`): llama.cpp keeps the prompt's KV for the
        # next request that shares its prefix (an agent's next call); vLLM's automatic prefix
        # caching and SGLang's radix cache need no field, and ignore this one
        self.extra_body = {"cache_prompt": True, **(extra_body or {})}
        self.prompt_logprobs = prompt_logprobs
        self.model = model or self._served_model()
        template = tokenizer or server_template(self.base_url, self.model)
        super().__init__(self._never, name=f"{self.model} @ {self.base_url}", has_logprobs=True,
                         has_attentions=False, tokenizer=template)  # fmt: skip

    @staticmethod
    def _never(*args: Any, **kw: Any) -> list[str]:  # pragma: no cover - `_write` replaces it
        raise NotImplementedError

    def _served_model(self) -> str:
        ids = [m.id for m in self._call(self.client.models.list).data]
        if not ids:
            raise ModelLoadError(f"{self.base_url} serves no model: pass its name")
        return ids[0]

    def _call(self, fn: Any, **kw: Any) -> Any:
        """One request, its failures as one-line errors (retries and backoff: the client's)."""
        import openai

        where = f"{self.base_url}"
        try:
            return fn(**kw)
        except openai.APITimeoutError:
            raise ModelLoadError(f"{where}: the server did not answer in time") from None
        except openai.APIConnectionError:
            raise ModelLoadError(f"{where}: cannot reach the server") from None
        except openai.NotFoundError:
            raise ModelLoadError(
                f"{where}: no model {kw.get('model')!r} (or no such route)"
            ) from None
        except openai.BadRequestError as exc:
            raise InputError(f"{where}: the server refused the request: {_brief(exc)}") from None
        except openai.APIStatusError as exc:
            raise ModelLoadError(f"{where}: HTTP {exc.status_code}: {_brief(exc)}") from None

    def _write(self, prompt: str, n: int, *, delimiter: str, max_new_tokens: int,
               temperature: float, top_p: float, seed: int) -> list[StepOutput | str]:  # fmt: skip
        if temperature == 0.0 and n > 1:  # greedy: k samples are one (vLLM refuses n > 1)
            return self._write(prompt, 1, delimiter=delimiter, max_new_tokens=max_new_tokens,
                               temperature=0.0, top_p=top_p, seed=seed) * n  # fmt: skip
        r = self._call(
            self.client.completions.create, model=self.model, prompt=prompt, n=n,
            stop=[delimiter], max_tokens=max_new_tokens, temperature=temperature,
            top_p=top_p, seed=seed, logprobs=1, extra_body=self.extra_body,
        )  # fmt: skip
        if len(r.choices) != n:  # an engine that ignores `n` (or caps it)
            raise ModelLoadError(f"{self.name}: {len(r.choices)} completions for n={n}")
        return [self._output(choice) for choice in sorted(r.choices, key=lambda c: c.index)]

    def _output(self, choice: Any) -> StepOutput:
        got = parse(choice.logprobs)
        if got is None:
            raise ModelLoadError(f"{self.name}: the response carries no log-probs")
        ended = _ended(choice, got.texts)
        own = got.within(choice.text, ended)
        return StepOutput(text=choice.text, token_logprobs=own.logprobs, token_texts=own.texts,
                          ended=ended)  # fmt: skip

    @property
    def can_score(self) -> bool:  # type: ignore[override]
        """A given step is scored by one request where the engine gives prompt log-probs
        (`prompt_logprobs=None`: asked once, on first use)."""
        if self.prompt_logprobs is None:
            self.prompt_logprobs = probe(self)
        return self.prompt_logprobs

    def score(self, pc: PrefixCache, step_ids: Sequence[int], capture_layers: frozenset[int]
              ) -> tuple[list[float], list[torch.Tensor]]:  # fmt: skip
        """Log-probs of a given step after the context, from one `echo` request (no attention:
        engines return none)."""
        if not self.can_score:
            raise NotImplementedError(f"{self.name} gives no prompt log-probs")
        if capture_layers:
            raise NotImplementedError(f"{self.name} returns no attention")
        whole, ctx = split(self, self.decode(pc.ids), self.decode(step_ids))
        return [float(x) for x in whole.after(len(ctx)).logprobs if x is not None], []

    def _candidate(self, o: StepOutput, delimiter: str, max_new_tokens: int) -> Candidate:
        """The server already stopped at the delimiter or at `max_tokens` of its own tokens:
        no character cut here (the context still passes as text)."""
        lps = [float(x) for x in o.token_logprobs or []]
        ids = self.encode(o.text + separator(delimiter, o.ended))
        # ids are characters (the context passes as text); budgets count the server's tokens
        pieces = list(o.token_texts) if o.token_texts is not None else None
        return Candidate(o.text, ids, lps, o.ended, scored=len(lps), generated=len(lps),
                         pieces=pieces)  # fmt: skip


def repeatable(model: Any) -> Any:
    """The same greedy text for the same context, every time: llama.cpp reuses a cached prompt
    prefix, and a continuation from it differs from an uncached one (gsm8k-184 reached gold from
    a fresh cache and not after a longer prompt shared its prefix); `cache_prompt: false` makes
    each request compute its prompt afresh. vLLM and SGLang ignore the field. Labels need this;
    concurrent requests break it anyway (batch-dependent numerics), so label one at a time.
    A copy: the caller's model keeps its own requests."""
    if not isinstance(model, ServedStepModel):
        return model
    out = copy.copy(model)
    out.extra_body = {**(model.extra_body or {}), "cache_prompt": False}
    return out


def _brief(exc: Exception) -> str:
    """The server's own error message (its JSON `error.message`), on one line."""
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    return " ".join(str(message or getattr(exc, "message", exc)).split())[:200]
