"""A chat model's message as `AIMessageChunk`s, each sent when its text is final.

Who writes final text, and when (`models/tokens.py`): a one-model message token by token as
it is decoded; a SpecGuard message the target rewrites or verifies, token by token as the target
keeps it; a drafted message the graph accepts, whole, once accepted (a draft's tokens are never
streamed: they may still be replaced). So nothing streamed is ever withdrawn.

What of that text is content: the message's content is its text less its call blocks, stripped
(`calls.parse_calls`). A delta is sent only when it is certain to be a prefix of that content:
not while the text could still be a call (a `<tool_call>` block being written, a partial tag at
the end, a message that starts like bare JSON or a Python call), not trailing whitespace (the
end may strip it).

A call goes out as `tool_call_chunk`s, in three pieces: its id and index the moment it opens
(the `<tool_call>` tag, one token for Qwen, or a bare object's `{"name": "`: a client can show
that a call is being written before its name is), its name as soon as the name
is written whole (`"name": "..."` at the head of its block or bare object), then its arguments
when its block or object closes and parses (LangChain parses them back into `tool_calls`); where
calls are is `call_objects.call_segments`, the same reading `invoke` makes. The arguments are
not streamed token by token: LangChain joins a chunk's arguments as partial JSON, so a call cut
at the budget after `{"path": "/ho` would join as a runnable call with a truncated argument. A
call that does not parse goes in the last chunk as an invalid call whose arguments are its block
as written, tags and all (a bare object inside the tags it skipped): text no JSON reading turns
into a call (`calls.parse_json_calls`; `invoke` says the same). The last chunk carries the rest
of the content, the rest of the calls, `response_metadata` and `usage_metadata`, so the joined
chunks are what `invoke` returns (but for an invalid call's parse error: LangChain's chunks have
no field for it).
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

from ..models import tokens
from .call_objects import BLOCK, call_segments, is_bare_head, written_name
from .calls import _LOOKS_LIKE_CALL
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
    if is_bare_head(text) or (_TAG not in text and head[:1] in ("{", "[", "`", "")):
        return ""  # bare call objects, or may be (`call_objects`): content goes in the last chunk
    cut = len(text)
    opened = text.rfind(_TAG)
    if opened != -1 and text.find("</tool_call>", opened) == -1:
        cut = opened  # a block being written
    for n in range(min(len(_TAG) - 1, cut), 0, -1):  # a tag being written
        if _TAG.startswith(text[cut - n : cut]):
            cut -= n
            break
    return BLOCK.sub("", text[:cut]).strip()


class StreamClosed(Exception):
    """Thrown into the generation when the stream's reader has gone: it unwinds the engine's
    loop where it waits, releasing the model."""


class MessageStream:
    """Token ids in, chunks out (`add`), then the last chunk (`finish`)."""

    def __init__(self, decode: Callable[[list[int]], str], prefix: str, calls: str):
        self.decode, self.prefix, self.calls = decode, prefix, calls
        self.ids: list[int] = []
        self.sent = ""
        self.slots: list[dict[str, Any]] = []  # one per <tool_call> block seen, in order

    def text(self, *, whole: bool = False) -> str:
        text = self.prefix + self.decode(self.ids)
        return text if whole else text.rstrip("\ufffd")  # a character still being written

    def add(self, ids: Sequence[int]) -> AIMessageChunk | None:
        """What the text so far settles: a content delta, the name of each call whose name is
        written, and the arguments of each call whose block has just closed and parses (a call
        that does not parse waits for the last chunk, where it is invalid)."""
        self.ids.extend(ids)
        text = self.text()
        safe = safe_content(text, self.calls)
        delta = ""
        if len(safe) > len(self.sent) and safe.startswith(self.sent):
            delta, self.sent = safe[len(self.sent) :], safe
        calls = self._call_chunks(text) if self.calls == "json" else []
        return AIMessageChunk(content=delta, tool_call_chunks=calls) if delta or calls else None

    def _slot(self, b: int) -> dict[str, Any]:
        if b == len(self.slots):
            self.slots.append({"id": _call_id(), "opened": False, "named": False,
                               "closed": False})  # fmt: skip
        return self.slots[b]

    def _call_chunks(self, text: str) -> list[dict[str, Any]]:
        out = []
        for b, segment in enumerate(call_segments(text)[0]):
            slot = self._slot(b)
            if slot["closed"]:
                continue
            piece: dict[str, Any] = {"name": None, "id": None, "index": b, "args": "",
                                     "type": "tool_call_chunk"}  # fmt: skip
            if not slot["opened"] and segment.certain:  # its id when opened, its name to follow
                slot["opened"] = True
                piece["id"] = slot["id"]
            if not slot["named"] and (name := written_name(segment.inner)) is not None:
                slot["named"] = True
                piece["name"] = name
            if segment.closed:
                slot["closed"] = True
                call = segment.call  # None: invalid, its text goes in the last chunk
                if call is not None:
                    slot["call"] = call
                    piece["args"] = json.dumps(call["arguments"], ensure_ascii=False)
                    if not slot["named"]:  # a call whose name could not be read early
                        slot["named"] = True
                        piece["name"] = call["name"]
            if piece["id"] is not None or piece["name"] is not None or piece["args"]:
                out.append(piece)
        return out

    def finish(self, message: AIMessage) -> AIMessageChunk:
        content = message.content if isinstance(message.content, str) else ""
        if not content.startswith(self.sent):  # never expected: streamed text is final text
            raise RuntimeError(f"streamed {self.sent!r}, but the message says {content!r}")
        if self.slots:  # calls sent block by block: the rest follow the message's blocks
            calls = self._rest_by_block(message)
        else:
            calls = [{"name": c["name"], "args": json.dumps(c["args"], ensure_ascii=False),
                      "id": c["id"], "index": i, "type": "tool_call_chunk"}
                     for i, c in enumerate(message.tool_calls)]  # fmt: skip
            calls += [{"name": c.get("name"), "args": c.get("args"), "id": c["id"],
                       "index": len(calls) + i, "type": "tool_call_chunk"}
                      for i, c in enumerate(message.invalid_tool_calls)]  # fmt: skip
        return AIMessageChunk(
            content=content[len(self.sent) :],
            tool_call_chunks=calls,
            response_metadata=dict(message.response_metadata),
            usage_metadata=message.usage_metadata,
            id=message.id,
            chunk_position="last",
        )

    def _rest_by_block(self, message: AIMessage) -> list[dict[str, Any]]:
        """The last chunk's calls, matched to the blocks of the text the stream was fed (every
        token of the message is fed when any is: one writer writes it)."""
        blocks = call_segments(self.text(whole=True))[0]
        if [(s.call["name"], s.call["arguments"]) for s in blocks if s.call is not None] != [
            (c["name"], c["args"]) for c in message.tool_calls
        ] or [s.text for s in blocks if s.call is None] != [
            c["args"] for c in message.invalid_tool_calls
        ]:
            raise RuntimeError("the streamed text's calls are not the message's")
        valid, invalid = iter(message.tool_calls), iter(message.invalid_tool_calls)
        out = []
        for b, segment in enumerate(blocks):
            call = segment.call
            slot, c = self._slot(b), next(valid) if call is not None else next(invalid)
            if "call" in slot:
                continue  # sent when its block closed
            args = json.dumps(c["args"], ensure_ascii=False) if call is not None else c["args"]
            out.append({"name": None if slot["named"] else c["name"],
                        "id": None if slot["opened"] else slot["id"],
                        "args": args, "index": b, "type": "tool_call_chunk"})  # fmt: skip
        return out


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
