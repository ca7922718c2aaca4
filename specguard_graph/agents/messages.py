"""LangChain messages <-> the chat-template dicts the models render, and a parsed message back
into an `AIMessage` with `tool_calls` / `invalid_tool_calls`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ..errors import InputError
from .calls import ParsedMessage


def _text(message: BaseMessage) -> str:
    return message.text if isinstance(message.text, str) else str(message.content)


def to_template(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The dicts chat templates read (Qwen2.5's wants call arguments as objects, not strings)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append({"role": "system", "content": _text(m)})
        elif isinstance(m, HumanMessage):
            out.append({"role": "user", "content": _text(m)})
        elif isinstance(m, AIMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": _text(m)}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {"type": "function", "function": {"name": c["name"], "arguments": c["args"]}}
                    for c in m.tool_calls
                ]
            out.append(entry)
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "content": _text(m), "name": m.name})
        else:
            raise InputError(f"cannot render a {type(m).__name__} in a chat template")
    return out


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def to_ai_message(parsed: ParsedMessage, **extra: Any) -> AIMessage:
    """An AIMessage whose calls a `ToolNode` runs as they are; unparsable ones stay visible."""
    return AIMessage(
        content=parsed.content,
        tool_calls=[
            {"name": c["name"], "args": c["arguments"], "id": _call_id(), "type": "tool_call"}
            for c in parsed.calls
        ],
        invalid_tool_calls=[_invalid(c) for c in parsed.invalid],
        **extra,
    )


def _invalid(call: dict[str, Any]) -> dict[str, Any]:
    return {"name": None, "args": call["text"], "id": _call_id(), "error": call["error"],
            "type": "invalid_tool_call"}  # fmt: skip


def finish_reason(parsed: ParsedMessage, ended: str | None) -> str:
    if ended == "length":
        return "length"
    return "tool_calls" if parsed.calls else "stop"


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)
