"""Any LangChain chat model (ChatOpenAI, ChatOllama, a provider's) as the draft or the target of
`SpecGuardChatModel`: its messages become step text the graph reads like a local model's.

A chat API takes messages and tools, not a rendered prompt, so this writer's "tokenizer" renders
the question as JSON (`QuestionAsPrompt`), and the writer calls `bind_tools(...).invoke(...)`
and writes the reply back as `<tool_call>` blocks. Token log-probs come from the response where
the provider returns them (`logprobs=True`); without them a drafted message has no log-prob
signal and goes to the target (a chat model that gives none is best used as the target).
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage

from ..models.callable import StepOutput
from ..models.chat import ChatStepModel, _logprobs
from .messages import from_template


class QuestionAsPrompt:
    """Renders a chat turn as JSON, so the writer gets the messages and tools back intact."""

    chat_template = "json"

    def apply_chat_template(self, messages: list[dict[str, Any]], *, tools: Any = None,
                            **kw: Any) -> str:  # fmt: skip
        return json.dumps({"messages": messages, "tools": tools or []}, ensure_ascii=False)


def _choice(forced: str) -> str | None:
    """The tool choice a forced prefix stands for (ChatSteps.forced_prefix, read back)."""
    if not forced:
        return None
    if forced == "<tool_call>\n":
        return "required"
    return json.loads(forced.removeprefix('<tool_call>\n{"name": ').removesuffix(', "arguments": '))


def as_text(message: AIMessage) -> str:
    """The reply as the native template writes it: content, then one block per call."""
    blocks = [
        "<tool_call>\n" + json.dumps({"name": c["name"], "arguments": c["args"]},
                                     ensure_ascii=False) + "\n</tool_call>"
        for c in message.tool_calls
    ]  # fmt: skip
    text = message.text if isinstance(message.text, str) else str(message.content)
    return "\n".join([t for t in [text.strip(), *blocks] if t])


class ChatModelWriter(ChatStepModel):
    """Whole messages from a `BaseChatModel` (ChatStepModel writes one step of a reasoning
    answer); k candidates are k calls, each with its own seed."""

    def __init__(self, chat_model: Any, *, name: str | None = None):
        super().__init__(chat_model, name=name)
        self.tokenizer = QuestionAsPrompt()

    def _write(self, prompt: str, n: int, *, delimiter: str, max_new_tokens: int,
               temperature: float, top_p: float, seed: int) -> list[StepOutput | str]:  # fmt: skip
        doc, end = json.JSONDecoder().raw_decode(prompt)
        forced = prompt[end:]
        model = self.chat_model
        if doc["tools"]:
            model = model.bind_tools(doc["tools"], tool_choice=_choice(forced))
        out: list[StepOutput | str] = []
        messages = from_template(doc["messages"])
        for i in range(n):
            reply = model.invoke(messages, temperature=temperature, seed=seed + i,
                                 max_tokens=max_new_tokens)  # fmt: skip
            text = as_text(reply)
            if forced and text.startswith(forced):
                text = text[len(forced) :]  # the graph adds the forced start back
            reason = (reply.response_metadata or {}).get("finish_reason")
            out.append(StepOutput(text=text, token_logprobs=_logprobs(reply),
                                  ended="length" if reason == "length" else "eos"))  # fmt: skip
        return out
