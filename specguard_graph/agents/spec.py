"""One assistant message as one step: the StepSpec behind `SpecGuardChatModel` and the BFCL bench.

The graph's question is a JSON document, `chat_question(...)`: the chat messages, the tools
(OpenAI tool dicts), the tool choice and how calls are written. Each model renders it with its
own chat template (`tools=`), so the draft and the target both see their native prompt. A
drafted message whose calls do not parse, name an unknown tool, break a tool's JSON schema or
ignore the tool choice goes to the target whatever its score (`check`); k candidates vote
exactly on their calls in canonical form (`vote_key`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..steps import NEVER
from .calls import CALL_FORMATS, CallFormat, ParsedMessage, check_calls, parse_calls
from .conversation import conversation_check


def chat_question(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = (),
                  tool_choice: str | None = None, calls: CallFormat = "json") -> str:  # fmt: skip
    """The graph's question for one assistant turn (JSON text: state holds JSON-like data)."""
    if calls not in CALL_FORMATS:
        raise InputError(f"calls must be one of {', '.join(CALL_FORMATS)}, got {calls!r}")
    if not messages:
        raise InputError("messages is empty: a chat turn needs at least one message")
    doc = {"messages": list(messages), "tools": list(tools), "tool_choice": tool_choice,
           "calls": calls}  # fmt: skip
    return json.dumps(doc, ensure_ascii=False)


def read_question(question: str) -> dict[str, Any]:
    try:
        doc = json.loads(question)
    except json.JSONDecodeError:
        raise InputError("a chat step's question must be chat_question(...) JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        raise InputError('a chat step\'s question needs a "messages" list')
    return doc


def forced_prefix(tool_choice: str | None, calls: str = "json") -> str:
    """What the assistant turn starts with when a call is required: the model writes the rest."""
    if calls != "json" or tool_choice in (None, "auto", "none"):
        return ""
    if tool_choice == "required":
        return "<tool_call>\n"
    return '<tool_call>\n{"name": ' + json.dumps(tool_choice) + ', "arguments": '


def _parse(doc: Mapping[str, Any], text: str) -> ParsedMessage:
    fmt = doc.get("calls", "json")
    return parse_calls(forced_prefix(doc.get("tool_choice"), fmt) + text, fmt)


@dataclass(frozen=True)
class ChatSteps:
    """A whole assistant message per step (no delimiter: it ends at EOS or its token budget)."""

    name: str = "chat"
    delimiter: str = NEVER

    def render_prompt(self, question: str, tokenizer: Any) -> str:
        doc = read_question(question)
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise InputError("a chat step needs a model with a chat template (tokenizer)")
        choice, fmt = doc.get("tool_choice"), doc.get("calls", "json")
        tools = doc.get("tools") if fmt == "json" and choice != "none" else None
        text = tokenizer.apply_chat_template(
            doc["messages"], tools=tools or None, tokenize=False, add_generation_prompt=True
        )
        return str(text) + forced_prefix(choice, fmt)

    def is_final(self, step: str, *, eos: bool) -> bool:
        return True  # one message, one step

    def parse(self, question: str, text: str) -> ParsedMessage:
        return _parse(read_question(question), text)

    def check(self, question: str, text: str, *, ended: str | None = None) -> str | None:
        """Why this message goes to the target whatever its score (None: its calls are valid,
        it is finished, and it passes the conversation's checks, `conversation.py`; `ended`
        "length": it was cut at its token budget)."""
        doc = read_question(question)
        parsed = _parse(doc, text)
        why = check_calls(parsed, doc.get("tools") or [], doc.get("tool_choice"))
        if why is None and ended == "length":
            why = "the message was cut at its token budget"
        names = [t["function"]["name"] for t in doc.get("tools") or [] if "function" in t]
        return why or conversation_check(doc["messages"], parsed, names)

    def vote_key(self, question: str, text: str) -> str:
        """Equal for two candidates that make the same calls (any order) or say the same text."""
        parsed = self.parse(question, text)
        return parsed.canonical() or "text:" + " ".join(parsed.content.split())

    def extract_answer(self, text: str) -> str | None:
        return text  # the message itself; `parse` reads its calls (it needs the question)
