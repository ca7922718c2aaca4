"""A chat model's message as `AIMessageChunk`s, each sent when its text is final.

Who writes final text, and when (`models/tokens.py`): a one-model message token by token as
it is decoded; a SpecGuard message the target rewrites or verifies, token by token as the target
keeps it; a drafted message the graph accepts, whole, once accepted (a draft's tokens are never
streamed: they may still be replaced). So nothing streamed is ever withdrawn.

What of that text is content: the message's content is its text less its call blocks, stripped
(`calls.parse_calls`). A delta is sent only when it is certain to be a prefix of that content:
not while the text could still be a call (a `<tool_call>` block being written, a partial tag at
the end, a message that starts like bare JSON or a Python call), not trailing whitespace (the
end may strip it). A call is sent as a `tool_call_chunk` (name and JSON arguments; LangChain
parses them back into `tool_calls`) as soon as its block closes and parses; the last chunk
carries the rest of the content, the rest of the calls, `response_metadata` and
`usage_metadata`, so the joined chunks are what `invoke` returns. One
exception, LangChain's: it reads a chunk's arguments as partial JSON, so a call that does not
parse but whose text reads as a JSON object (cut mid-way) would join as a runnable call; such
a call travels in `response_metadata["invalid_tool_calls"]` instead (the parse error is lost in
chunks either way).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from greenlet import getcurrent, greenlet
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.utils.json import parse_partial_json

from ..models import tokens
from .calls import _BLOCK, _LOOKS_LIKE_CALL, _json_call
from .messages import _call_id

_TAG = "<tool_call>"
_MAYBE_CALL = re.compile(r"^\[?\s*([A-Za-z_][\w.]*\s*)?$")  # could still become `f(`


def safe_content(text: str, calls: str) -> str:
    """The longest prefix of the final content that `text` (the message so far) settles."""
    if calls == "python":  # content is the whole text unless it reads as calls
        body = text.strip("`\n ")
        if text.lstrip().startswith("`") or _MAYBE_CALL.match(body) or _LOOKS_LIKE_CALL.match(body):
            return ""
        return text.strip()
    head = text.lstrip()
    if _TAG not in text and head[:1] in ("{", "[", "`", ""):
        return ""  # may be bare call objects (`calls._bare_calls`)
    cut = len(text)
    opened = text.rfind(_TAG)
    if opened != -1 and text.find("</tool_call>", opened) == -1:
        cut = opened  # a block being written
    for n in range(min(len(_TAG) - 1, cut), 0, -1):  # a tag being written
        if _TAG.startswith(text[cut - n : cut]):
            cut -= n
            break
    return _BLOCK.sub("", text[:cut]).strip()


class StreamClosed(Exception):
    """Thrown into the generation when the stream's reader has gone: it unwinds the engine's
    loop where it waits, releasing the model."""


def _stays_invalid(args: Any) -> bool:
    """Does LangChain keep this text an invalid call when it joins chunks?"""
    if not args:
        return False
    try:
        return not isinstance(parse_partial_json(args), dict)
    except Exception:
        return True


class MessageStream:
    """Token ids in, chunks out (`add`), then the last chunk (`finish`)."""

    def __init__(self, decode: Callable[[list[int]], str], prefix: str, calls: str):
        self.decode, self.prefix, self.calls = decode, prefix, calls
        self.ids: list[int] = []
        self.sent = ""
        self.blocks = 0  # closed <tool_call> blocks looked at
        self.early: list[dict[str, Any]] = []  # calls sent before the end, in order

    def add(self, ids: Sequence[int]) -> AIMessageChunk | None:
        """What the text so far settles: a content delta, and each call whose block has just
        closed and parses (a call that does not parse waits for the last chunk: it will be
        invalid there, and a chunk cannot take a call back)."""
        self.ids.extend(ids)
        text = self.prefix + self.decode(self.ids).rstrip("\ufffd")  # a character being written
        safe = safe_content(text, self.calls)
        delta = ""
        if len(safe) > len(self.sent) and safe.startswith(self.sent):
            delta, self.sent = safe[len(self.sent) :], safe
        calls = self._closed_calls(text) if self.calls == "json" else []
        return AIMessageChunk(content=delta, tool_call_chunks=calls) if delta or calls else None

    def _closed_calls(self, text: str) -> list[dict[str, Any]]:
        closed = [m for m in _BLOCK.finditer(text) if m.group(0).endswith("</tool_call>")]
        out = []
        for m in closed[self.blocks :]:
            self.blocks += 1
            try:
                call = _json_call(m.group(1).strip())
            except ValueError:
                continue
            out.append({"name": call["name"], "id": _call_id(), "index": len(self.early),
                        "args": json.dumps(call["arguments"], ensure_ascii=False),
                        "type": "tool_call_chunk"})  # fmt: skip
            self.early.append(call)
        return out

    def finish(self, message: AIMessage) -> AIMessageChunk:
        content = message.content if isinstance(message.content, str) else ""
        if not content.startswith(self.sent):  # never expected: streamed text is final text
            raise RuntimeError(f"streamed {self.sent!r}, but the message says {content!r}")
        done = len(self.early)
        if [(c["name"], c["arguments"]) for c in self.early] != [
            (c["name"], c["args"]) for c in message.tool_calls[:done]
        ]:
            raise RuntimeError("the calls sent early are not the message's first calls")
        calls = [{"name": c["name"], "args": json.dumps(c["args"], ensure_ascii=False),
                  "id": c["id"], "index": done + i, "type": "tool_call_chunk"}
                 for i, c in enumerate(message.tool_calls[done:])]  # fmt: skip
        # LangChain reads a chunk's arguments as partial JSON: an invalid call whose text would
        # read as an object would join as a call, so it travels in the metadata instead
        kept = [c for c in message.invalid_tool_calls if _stays_invalid(c.get("args"))]
        first = len(message.tool_calls)
        calls += [{"name": c.get("name"), "args": c.get("args"), "id": c["id"],
                   "index": first + i, "type": "tool_call_chunk"}
                  for i, c in enumerate(kept)]  # fmt: skip
        meta = dict(message.response_metadata)
        if moved := [c for c in message.invalid_tool_calls if c not in kept]:
            meta["invalid_tool_calls"] = moved
        return AIMessageChunk(
            content=content[len(self.sent) :],
            tool_call_chunks=calls,
            response_metadata=meta,
            usage_metadata=message.usage_metadata,
            id=message.id,
            chunk_position="last",
        )


def stream_message(
    generate: Callable[[], ChatResult],
    stream: MessageStream,
    run_manager: CallbackManagerForLLMRun | None,
) -> Iterator[ChatGenerationChunk]:
    """Run `generate` (a chat model's `_generate`) under a token sink and yield its message as
    chunks as its text becomes final.

    The generation runs in a greenlet on the caller's own thread, switching back at every final
    token: on another thread its torch calls would start a second OpenMP team, and with more
    team threads than cores libgomp throttles every later forward (docs/numerics.md, "One
    OpenMP team"). If the reader closes the stream early, the generation is unwound at once."""
    child = greenlet(lambda: _generate_under_sink(generate))
    child.gr_context = contextvars.copy_context()  # the caller's context: LangGraph's config too
    try:
        ids = child.switch()
        while not child.dead:
            if (piece := stream.add(ids)) is not None:
                chunk = ChatGenerationChunk(message=piece)
                if run_manager is not None:
                    run_manager.on_llm_new_token(piece.content, chunk=chunk)  # type: ignore[arg-type]
                yield chunk
            ids = child.switch()
        result = ids  # what the greenlet returned
    finally:  # also when the reader closes the generator early
        if not child.dead:
            with contextlib.suppress(StreamClosed):
                child.throw(StreamClosed("the stream's reader is gone"))
    last = stream.finish(result.generations[0].message)
    chunk = ChatGenerationChunk(message=last)
    if run_manager is not None:
        run_manager.on_llm_new_token(last.content, chunk=chunk)  # type: ignore[arg-type]
    yield chunk


def _generate_under_sink(generate: Callable[[], ChatResult]) -> ChatResult:
    """(In the generation's greenlet.) Each final token's ids go to the reader's greenlet."""

    def put(ids: list[int]) -> None:
        getcurrent().parent.switch(ids)

    with tokens.sink(put):
        return generate()
