"""JSON call objects in the text a model writes: one object read as a call, its name read as soon
as it is written, and where a message's calls are (`call_segments`).

Where calls are, in the native ("json") format:
- `<tool_call>` blocks, anywhere in the message (Qwen2.5's and Hermes' template);
- bare objects at the head of the message. Small models skip the tags. A message that starts
  `{"name": "` (or `[{"name": "`, bare or in a ```json fence) is a call message from its first
  characters on, as llama.cpp's Hermes/Qwen parser reads it: its leading objects are calls (one
  that does not parse as a call is an invalid one; an object left open or not JSON is invalid
  with the rest of the text), the sequence ends at an object that names no tool or at anything
  that is not an object, and what follows is content, its `<tool_call>` blocks calls. The 1.5B
  target and the 0.5B draft often write a call and then the tool's imagined answer,
  `{"name": "mkdir", ...}` then `{"response": "None"}`: the call is the call. Decided by the
  head, so a stream sends a bare call's name when it is written and never takes it back;
- any other message that is nothing but call objects (named after its arguments, doubled braces,
  one per line) is calls, read when it ends (`whole_bare_calls`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NAMED = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_OPENS = re.compile(r'\s*\{\s*"name"\s*:\s*"')
_HEAD = re.compile(r'\s*(```(?:json)?\s*)?(\[)?(?=\s*\{\s*"name"\s*:\s*")')
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def loads(raw: str) -> Any:
    """JSON, or the doubled braces `{{...}}` that Qwen2.5-Coder's own chat template shows in
    its tool-call instruction (and the model then copies)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raw = raw.strip()
        if not (raw.startswith("{{") and raw.endswith("}}")):
            raise
        # the object after the first brace; the closing braces it doubled may be one or two
        # more (`{{"name": "f", "arguments": {"a": 1}}}}` is seen as often as `...}}}`)
        obj, end = json.JSONDecoder().raw_decode(raw[1:])
        if raw[1 + end :].strip("}"):
            raise
        return obj


def written_name(raw: str) -> str | None:
    """The tool a call's text names as soon as its name is written whole (a call object that
    starts `{"name": "..."`), before its arguments: what a stream can send first."""
    m = _NAMED.match(raw)
    if m is None:
        return None
    try:
        return json.loads(f'"{m.group(1)}"')
    except json.JSONDecodeError:
        return None


def json_call(raw: str) -> dict[str, Any]:
    obj = loads(raw)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError('a call is a JSON object with a "name"')
    if written_name(raw) not in (None, obj["name"]):  # JSON keeps a repeated key's last value
        raise ValueError("the call names its tool twice")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        args = json.loads(args)
    if not isinstance(args, dict):
        raise ValueError("the arguments are not a JSON object")
    return {"name": obj["name"], "arguments": args}


@dataclass(frozen=True)
class Segment:
    """One call as written: `text` (an invalid call's text: a block with its tags), `inner` (the
    object's text), `closed` (its end is written: more text cannot change it)."""

    text: str
    inner: str
    closed: bool
    call: dict[str, Any] | None
    error: str | None
    bare: bool = False  # an object at the message's head, not a `<tool_call>` block

    @property
    def certain(self) -> bool:
        """A call whatever is written next: a block (its tag is written), or a bare object
        that opens `{"name": "` (a later bare object may still name no tool and end the calls)."""
        return not self.bare or _OPENS.match(self.inner) is not None


def _read(inner: str, closed: bool, text: str | None = None) -> Segment:
    try:
        return Segment(text or inner, inner, closed, json_call(inner.strip()), None)
    except ValueError as e:  # json.JSONDecodeError is one
        return Segment(text or inner, inner, closed, None, str(e))


# an invalid bare call reads as the block it would be, tags added: text that no JSON reading
# turns into a call (LangChain joins a streamed call's arguments as partial JSON, and the object
# as written, `{"name": "f", "arguments": "a=1"}` or cut at the budget, would join runnable)
_TAGGED = "<tool_call>\n{}{}"


def _bare_head(text: str) -> tuple[list[Segment], int]:
    """The bare call objects a message starts with, and where the text after them starts."""
    head = _HEAD.match(text)
    if head is None:
        return [], 0
    fenced, listed, pos = head.group(1), head.group(2), head.end()
    out, decoder = [], json.JSONDecoder()
    while True:
        start = len(text) - len(text[pos:].lstrip(" \t\r\n,"))
        if not text.startswith("{", start):
            break
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as e:  # left open, or not JSON: the rest is one invalid call
            rest = text[start:]
            if fenced and rest.rstrip().endswith("```"):
                rest = rest.rstrip()[:-3].rstrip()
            out.append(Segment(_TAGGED.format(rest, ""), rest, False, None, str(e), bare=True))
            return out, len(text)
        if not isinstance(obj, dict) or "name" not in obj:
            break  # not a call: the sequence ends, content starts
        inner = text[start:end]
        out.append(replace(_read(inner, True, _TAGGED.format(inner, "\n</tool_call>")), bare=True))
        pos = end
    rest = text[pos:].lstrip(" \t\r\n,")
    for close in ("]" if listed else "", "```" if fenced else ""):
        if close and rest.startswith(close):
            rest = rest[len(close) :].lstrip()
    return out, len(text) - len(rest)


def is_bare_head(text: str) -> bool:
    """The message starts as bare call objects (its calls are then read from its head)."""
    return _HEAD.match(text) is not None


def call_segments(text: str) -> tuple[list[Segment], str]:
    """The message's calls in order (bare head objects, then `<tool_call>` blocks), and its
    text outside them: the content, before stripping."""
    bare, after = _bare_head(text)
    rest = text[after:]
    blocks = [_read(m.group(1), m.group(0).endswith("</tool_call>"), m.group(0))
              for m in BLOCK.finditer(rest)]  # fmt: skip
    return bare + blocks, BLOCK.sub("", rest)


def whole_bare_calls(text: str) -> list[dict[str, Any]] | None:
    """A message that is nothing but call objects (one, a list, or one per line), bare or in a
    ```json fence, as small models write when they skip the tags; None when it is anything else."""
    body = text.strip()
    if m := _FENCE.match(body):
        body = m.group(1)
    if not body.startswith(("{", "[")):
        return None
    try:
        obj = loads(body)
        items = obj if isinstance(obj, list) else [obj]
    except json.JSONDecodeError:
        try:
            items = [loads(line) for line in body.splitlines() if line.strip()]
        except json.JSONDecodeError:
            return None
    if not items or not all(isinstance(i, dict) and "name" in i for i in items):
        return None
    try:
        return [json_call(json.dumps(i)) for i in items]
    except ValueError:
        return None
