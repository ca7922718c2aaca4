"""One local model alone as a LangChain chat model: the baseline an agent builder compares
SpecGuard with (the target alone, or the draft alone), on the same prompt, parser and prefix
store, so that only who writes the message differs.

Each message is one greedy decode to the end of the turn; the prompt is the model's own chat
template (`ChatSteps.render_prompt`), and its calls are parsed as SpecGuard's are.

`lookup=True` writes the same message in fewer forwards: the next few tokens are proposed from
an n-gram match in the conversation so far (prompt-lookup decoding, `models/local/lookup.py`)
and checked in one forward. An agent's calls repeat the tool names, argument names and values
its prompt already holds, and no draft has to prefill the conversation, which is most of an
agent's cost. Exact only where a token scores the same inside a chunk as fed alone (the
row-invariant formats), so other models refuse it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ..errors import ConfigError
from ..models.local import lookup
from .chat_model import SPEC, ToolChatModel
from .messages import finish_reason, to_ai_message


class PlainChatModel(ToolChatModel):
    """`lm` (a `LocalCausalLM`) writes every message itself, greedily; `response_metadata`
    says what it fed (`fed`) and how long the prefill and the decode took. `lookup`: the same
    message through prompt-lookup proposals (module doc)."""

    lm: Any
    max_tokens: int = 256
    lookup: bool = False

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)  # then checked outside pydantic: the error stays a ConfigError
        if self.lookup:
            lookup.require_exact(self.lm, "lookup=True")

    @property
    def _llm_type(self) -> str:
        return "specguard-plain"

    all_final = True  # every token it keeps is the message's: each streams as it is decoded

    def stream_writer(self) -> Any:
        return self.lm

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        *,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if stop or kwargs:
            raise ConfigError(f"PlainChatModel takes no stop sequences or {', '.join(kwargs)}")
        question = self.question(messages, tools, tool_choice)
        t0 = time.perf_counter()
        pc = self.lm.new_prefix(SPEC.render_prompt(question, self.lm.tokenizer))
        with self.lm.lock:  # the prefill on its own clock (`sample` then feeds nothing more)
            self.lm.catch_up(pc)
        t1 = time.perf_counter()
        cand, forwards = lookup.greedy_candidate(self.lm, pc, max_new_tokens=self.max_tokens,
                                                 lookup=self.lookup)  # fmt: skip
        parsed = SPEC.parse(question, cand.text)
        fed = {"prefill": pc.prefill_tokens, "decode": pc.decode_tokens,
               "reused": pc.reused_tokens}  # fmt: skip
        if forwards is not None:
            fed["forwards"] = forwards
        meta = {"model_name": getattr(self.lm, "name", "local"), "source": "plain",
                "finish_reason": finish_reason(parsed, cand.ended), "fed": fed,
                "time_s": time.perf_counter() - t0, "prefill_s": t1 - t0,
                "decode_s": time.perf_counter() - t1}  # fmt: skip
        n_in = len(pc.ids)  # the prompt (sample leaves the context as it was)
        usage = {"input_tokens": n_in, "output_tokens": cand.n_tokens,
                 "total_tokens": n_in + cand.n_tokens}  # fmt: skip
        message = to_ai_message(parsed, response_metadata=meta, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])
