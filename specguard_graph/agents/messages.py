"""LangChain messages <-> the chat-template dicts the models render, and a parsed message back
into an `AIMessage` with `tool_calls` / `invalid_tool_calls`."""

from __future__ import annotations

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
                    {"type": "function", "id": c.get("id"),
                     "function": {"name": c["name"], "arguments": c["args"]}}
                    for c in m.tool_calls
                ]  # fmt: skip
            out.append(entry)
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "content": _text(m), "name": m.name,
                        "tool_call_id": m.tool_call_id})  # fmt: skip
        else:
            raise InputError(f"cannot render a {type(m).__name__} in a chat template")
    return out


def from_template(messages: Sequence[dict[str, Any]]) -> list[BaseMessage]:
    """`to_template`'s dicts back as LangChain messages (for a chat model that writes a step)."""
    out: list[BaseMessage] = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            out.append(SystemMessage(content))
        elif role == "user":
            out.append(HumanMessage(content))
        elif role == "assistant":
            calls = [_from_call(c) for c in m.get("tool_calls") or []]
            out.append(AIMessage(content, tool_calls=calls))
        else:
            out.append(ToolMessage(content, tool_call_id=m.get("tool_call_id") or _call_id(),
                                   name=m.get("name")))  # fmt: skip
    return out


def _from_call(c: dict[str, Any]) -> dict[str, Any]:
    fn = c["function"]
    return {"name": fn["name"], "args": fn["arguments"], "id": c.get("id") or _call_id()}


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
    return {"name": call.get("name"), "args": call["text"], "id": _call_id(),
            "error": call["error"], "type": "invalid_tool_call"}  # fmt: skip


def finish_reason(parsed: ParsedMessage, ended: str | None) -> str:
    if ended == "length":
        return "length"
    return "tool_calls" if parsed.calls else "stop"
