"""A LangChain chat model (`ChatOpenAI`, `ChatOllama`, `ChatLlamaCpp`, …) as a step model, for
models people already hold as `BaseChatModel`.

The limit, stated: chat APIs do not continue a half-written assistant turn. The question and
the accepted steps go to the model as one user message that asks for the next step only, so
the model sees the answer so far as quoted text, not as its own words. Token log-probs come
from the response metadata where the provider returns them (`logprobs=True`: OpenAI, vLLM,
llama.cpp); a provider without them is refused unless the config does not need them
(`beta = 0` needs attentions, which no chat API gives, so in practice: log-probs or nothing).
"""

from __future__ import annotations

from typing import Any

from ..errors import ModelLoadError
from .callable import CallableStepModel, StepOutput

ASK = (
    "Here is a problem and the answer written so far. Write only the next step of the answer "
    "(one paragraph), nothing else.\n\n{prompt}"
)


def _logprobs(message: Any) -> list[float] | None:
    meta = getattr(message, "response_metadata", None) or {}
    data = meta.get("logprobs")
    if isinstance(data, dict) and isinstance(data.get("content"), list):
        return [float(t["logprob"]) for t in data["content"]]
    return None


class ChatStepModel(CallableStepModel):
    """Steps from a `BaseChatModel`: k candidates are k calls (`batch`), each with its seed."""

    def __init__(self, chat_model: Any, *, name: str | None = None):
        super().__init__(self._never, name=name or type(chat_model).__name__,
                         has_logprobs=True, has_attentions=False)  # fmt: skip
        self.chat_model = chat_model

    @staticmethod
    def _never(*args: Any, **kw: Any) -> list[str]:  # pragma: no cover - `_write` replaces it
        raise NotImplementedError

    def _write(self, prompt: str, n: int, *, delimiter: str, max_new_tokens: int,
               temperature: float, top_p: float, seed: int) -> list[StepOutput | str]:  # fmt: skip
        calls = [
            self.chat_model.bind(
                stop=[delimiter],
                max_tokens=max_new_tokens,
                temperature=temperature,
                seed=seed + i,
                logprobs=True,
            )
            for i in range(n)
        ]
        ask = ASK.format(prompt=prompt)
        messages = [call.invoke(ask) for call in calls]
        out: list[StepOutput | str] = []
        for m in messages:
            lps = _logprobs(m)
            if lps is None:
                raise ModelLoadError(f"{self.name}: the response carries no log-probs")
            text = m.content if isinstance(m.content, str) else str(m.content)
            reason = (getattr(m, "response_metadata", None) or {}).get("finish_reason")
            ended = "length" if reason == "length" else "delimiter"
            out.append(StepOutput(text=text.strip("\n"), token_logprobs=lps, ended=ended))
        return out
