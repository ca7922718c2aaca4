"""Checks that read the conversation, not only the drafted message: what multi-turn agent runs
showed the draft getting wrong while its calls still parsed and fit their schemas.

- A call identical to one already made and answered (the README agent's `multiply(17, 23)`,
  made again on every turn; BFCL tasks repeating `mkdir` on a folder that exists).
- An empty message (no text, no call): an agent reads it as a final answer of nothing.
- Text that plays another role (`<tool_response>...`, `Human: ...`): after a failed call the
  small models often wrote the tool's or the user's next turn themselves instead of calling.
- A call and then its made-up result: on BFCL the draft wrote
  `{"name": "mkdir", "arguments": {...}} {"response": "None"}` on every turn after the first.
  The call parses (`call_objects`); the JSON after it, the message's content, is the tool's turn
  written by the draft.
- A call to a bound tool written in the text where the parser reads no call (inside a sentence),
  which an agent reads as a final answer.

Each returns a fixed reason (`REASONS`), so evidence can count how often each one fired. A
message these checks send to the target is written by the target: it may make the same call
again (a repeat after `cd` is right), the check only takes the decision from the draft.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .calls import ParsedMessage, call_key

REPEAT = "repeats a call already made and answered"
EMPTY = "the message is empty"
IMPERSONATION = "the message writes a tool's or the user's turn"
UNREAD_CALL = "the message writes a call in its text that does not parse as one"
REASONS = (REPEAT, EMPTY, IMPERSONATION, UNREAD_CALL)
_CALL_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')
_ROLE_PLAY = re.compile(r"<tool_response>|</tool_response>|^\s*(Human|User|Tool)\s*:", re.M)


def answered_calls(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """The calls of earlier assistant messages that a tool message answered."""
    out: set[str] = set()
    for i, m in enumerate(messages):
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        later = messages[i + 1 :]
        ids = {r.get("tool_call_id") for r in later if r.get("role") == "tool"}
        for c in m["tool_calls"]:
            fn = c.get("function") or c
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    continue
            if c.get("id") in ids or (c.get("id") is None and ids):
                out.add(call_key(fn.get("name"), args))
    return out


def conversation_check(messages: Sequence[Mapping[str, Any]], parsed: ParsedMessage,
                       tools: Sequence[str] = ()) -> str | None:  # fmt: skip
    """Why this drafted message goes to the target, read against the conversation (`tools`:
    the bound tools' names)."""
    if not parsed.calls and not parsed.invalid and not parsed.content.strip():
        return EMPTY
    if _ROLE_PLAY.search(parsed.content):
        return IMPERSONATION
    if parsed.calls and parsed.content.lstrip().startswith(("{", "[")):
        return IMPERSONATION  # a call, then what the tool would answer
    if not parsed.calls and any(n in tools for n in _CALL_NAME.findall(parsed.content)):
        return UNREAD_CALL
    done = answered_calls(messages)
    if any(call_key(c["name"], c["arguments"]) in done for c in parsed.calls):
        return REPEAT
    return None
