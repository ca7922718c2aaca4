"""The OpenAI chat-completions wire format: requests read into LangChain messages and tools,
messages and chunks written back, errors that name the field.

Unknown fields are ignored, as OpenAI's API ignores them; a field that is there but wrong is a
400 whose `error.param` names it (`RequestError`)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from pydantic import BaseModel, ConfigDict, ValidationError


class RequestError(ValueError):
    """A request the server refuses with 400 (`param`: the field at fault)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": "invalid_request_error",
                          "param": self.param, "code": None}}  # fmt: skip


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Function(_Loose):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Loose):
    type: Literal["function"]
    function: Function


class CallFunction(_Loose):
    name: str
    arguments: str


class ToolCall(_Loose):
    id: str
    type: Literal["function"] = "function"
    function: CallFunction


class Message(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class ChatRequest(_Loose):
    model: str
    messages: list[Message]
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None


def read_request(raw: bytes) -> ChatRequest:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    try:
        req = ChatRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"])
        raise RequestError(f"{param}: {first['msg']}", param) from None
    if not req.messages:
        raise RequestError("messages must hold at least one message", "messages")
    return req


def _text(content: str | list[dict[str, Any]] | None, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for i, part in enumerate(content):
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise RequestError(f"only text content parts are read, got {part.get('type')!r}",
                               f"{where}.content.{i}")  # fmt: skip
        parts.append(part["text"])
    return "".join(parts)


def to_messages(req: ChatRequest) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i, m in enumerate(req.messages):
        where = f"messages.{i}"
        text = _text(m.content, where)
        if m.role in ("system", "developer"):
            out.append(SystemMessage(text))
        elif m.role == "user":
            out.append(HumanMessage(text))
        elif m.role == "assistant":
            calls = []
            for j, c in enumerate(m.tool_calls or []):
                try:
                    args = json.loads(c.function.arguments or "{}")
                except json.JSONDecodeError:
                    param = f"{where}.tool_calls.{j}.function.arguments"
                    raise RequestError("a call's arguments must be JSON", param) from None
                calls.append({"name": c.function.name, "args": args, "id": c.id})
            out.append(AIMessage(text, tool_calls=calls))
        else:
            if not m.tool_call_id:
                raise RequestError("a tool message needs tool_call_id", f"{where}.tool_call_id")
            out.append(ToolMessage(text, tool_call_id=m.tool_call_id, name=m.name))
    return out


def tool_dicts(req: ChatRequest) -> list[dict[str, Any]]:
    return [t.model_dump(exclude_none=True) for t in req.tools or []]


def tool_choice(req: ChatRequest) -> str | None:
    """OpenAI's tool_choice as LangChain's `bind_tools` reads it, checked against the tools."""
    choice, names = req.tool_choice, [t.function.name for t in req.tools or []]
    if choice is None or choice == "auto":
        return None
    if choice in ("none", "required"):
        if choice == "required" and not names:
            raise RequestError("tool_choice 'required' needs tools", "tool_choice")
        return choice  # type: ignore[return-value]
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(name, str) or name not in names:
        raise RequestError(f"tool_choice names no tool of this request: {choice!r}",
                           "tool_choice")  # fmt: skip
    return name


def _calls(message: AIMessage) -> list[dict[str, Any]]:
    return [{"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
            for c in message.tool_calls]  # fmt: skip


def _usage(message: AIMessage) -> dict[str, int] | None:
    u = message.usage_metadata
    if not u:
        return None
    return {"prompt_tokens": u["input_tokens"], "completion_tokens": u["output_tokens"],
            "total_tokens": u["total_tokens"]}  # fmt: skip


def _meta(message: AIMessage) -> dict[str, Any]:
    return json.loads(json.dumps(message.response_metadata, default=str))


class Reply:
    """One completion's ids and clock, and its message in both shapes."""

    def __init__(self, model: str):
        self.id, self.model, self.created = f"chatcmpl-{uuid.uuid4().hex}", model, int(time.time())
        self._ids: dict[int, str] = {}  # a call's id, from the chunk that opened it

    def _call_delta(self, c: Any) -> dict[str, Any] | None:
        """A call's first delta names it (id, type, name), as OpenAI's does: a chunk that only
        opens a call (its id, before its name is written) is held; the next deltas add to its
        arguments."""
        if c["id"] is not None and c["name"] is None and not c["args"]:
            self._ids[c["index"]] = c["id"]
            return None
        if c["name"] is None:
            return {"index": c["index"], "function": {"arguments": c["args"] or ""}}
        return {"index": c["index"], "id": c["id"] or self._ids.get(c["index"]),
                "type": "function",
                "function": {"name": c["name"], "arguments": c["args"] or ""}}  # fmt: skip

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def completion(self, message: AIMessage) -> dict[str, Any]:
        meta = message.response_metadata
        calls = _calls(message)
        body = {**self._head("chat.completion"), "choices": [{
            "index": 0, "finish_reason": meta.get("finish_reason", "stop"),
            "message": {"role": "assistant", "content": message.content or None,
                        **({"tool_calls": calls} if calls else {})},
        }], "usage": _usage(message), "specguard": _meta(message)}  # fmt: skip
        return body

    def chunk(self, piece: AIMessageChunk, first: bool) -> dict[str, Any]:
        delta: dict[str, Any] = {"role": "assistant"} if first else {}
        if piece.content:
            delta["content"] = piece.content
        if calls := [d for c in piece.tool_call_chunks if (d := self._call_delta(c)) is not None]:
            delta["tool_calls"] = calls
        last = piece.chunk_position == "last"
        out = {**self._head("chat.completion.chunk"), "choices": [{
            "index": 0, "delta": delta,
            "finish_reason": piece.response_metadata.get("finish_reason") if last else None,
        }]}  # fmt: skip
        if last:
            out["usage"] = _usage(piece)  # type: ignore[arg-type]
            out["specguard"] = _meta(piece)  # type: ignore[arg-type]
        return out
