"""Tool calls in an assistant message: parsed from the text a model writes, checked against each
tool's JSON schema, and put in one canonical form so k candidates can vote exactly.

Two ways a model writes calls:
- "json": the native tool template of Qwen2.5 and Hermes-style models, one
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block per call, or the same
  objects bare, as small models write them (`call_objects` says where calls are);
- "python": BFCL's prompting format, a Python list of calls `[f(a=1), g.h(b="x")]`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from .call_objects import call_segments, is_bare_head, whole_bare_calls, written_name

CallFormat = Literal["json", "python"]
CALL_FORMATS: tuple[str, ...] = ("json", "python")


@dataclass
class ParsedMessage:
    """What one assistant message says: free text, the calls that parse, the ones that do not."""

    content: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"}
    invalid: list[dict[str, Any]] = field(default_factory=list)  # {"text", "error", "name"?}

    def canonical(self) -> str | None:
        """The calls, order-free, in one string (None: the message makes no valid call)."""
        if not self.calls or self.invalid:
            return None
        keys = sorted(call_key(c["name"], c["arguments"]) for c in self.calls)
        return "[" + ",".join(keys) + "]"


def call_key(name: str, arguments: Any) -> str:
    """One call in canonical form: equal for the same name and arguments in any key order."""
    return json.dumps({"name": name, "arguments": arguments}, sort_keys=True, ensure_ascii=False)


def parse_json_calls(text: str) -> ParsedMessage:
    """Calls where `call_objects` finds them; an invalid call is its text as written (a block
    with its tags)."""
    if "<tool_call>" not in text and not is_bare_head(text):
        if (bare := whole_bare_calls(text)) is not None:
            return ParsedMessage("", bare)
    segments, content = call_segments(text)
    calls = [s.call for s in segments if s.call is not None]
    invalid = [{"text": s.text, "error": s.error, "name": written_name(s.inner)}
               for s in segments if s.call is None]  # fmt: skip
    return ParsedMessage(content.strip(), calls, invalid)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise ValueError("a call's function is not a (dotted) name")


_LOOKS_LIKE_CALL = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\s*\(")


def parse_python_calls(text: str) -> ParsedMessage:
    """`[f(a=1), m.g(b="x")]` (BFCL's prompting answer; its decoder also reads it without the
    brackets). Text that does not start like a call is free text, not a broken call."""
    body = text.strip("`\n ")
    if body.startswith("python\n"):
        body = body[len("python\n") :].strip()
    if not _LOOKS_LIKE_CALL.match(body):
        return ParsedMessage(text.strip())
    wrapped = ("" if body.startswith("[") else "[") + body + ("" if body.endswith("]") else "]")
    try:
        tree = ast.parse(wrapped, mode="eval").body
        if not isinstance(tree, ast.List) or not all(isinstance(e, ast.Call) for e in tree.elts):
            raise ValueError("not a list of calls")
        calls = []
        for call in tree.elts:
            assert isinstance(call, ast.Call)
            if call.args or any(k.arg is None for k in call.keywords):
                raise ValueError("calls take keyword arguments only")
            args = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            calls.append({"name": _dotted(call.func), "arguments": args})
    except (SyntaxError, ValueError) as e:
        return ParsedMessage("", [], [{"text": body, "error": f"{type(e).__name__}: {e}"}])
    return ParsedMessage("", calls)


def parse_calls(text: str, fmt: CallFormat = "json") -> ParsedMessage:
    return parse_python_calls(text) if fmt == "python" else parse_json_calls(text)


def _strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    """An object schema refuses arguments it does not declare unless it says otherwise."""
    out = dict(schema)
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def tool_schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """OpenAI tool dicts -> {name: parameters schema}."""
    out = {}
    for t in tools:
        fn = t.get("function", t)
        out[fn["name"]] = _strict(fn.get("parameters") or {"type": "object", "properties": {}})
    return out


def check_calls(parsed: ParsedMessage, tools: Sequence[Mapping[str, Any]],
                tool_choice: str | None = None) -> str | None:  # fmt: skip
    """Why the message's calls cannot be run as written (None: every call is valid).

    `tool_choice`: None/"auto" (any), "none" (no call), "required" (at least one), or a tool
    name (every call is to it)."""
    if parsed.invalid:
        return f"a tool call does not parse: {parsed.invalid[0]['error']}"
    if tool_choice == "none" and parsed.calls:
        return "called a tool although tool_choice is 'none'"
    if tool_choice not in (None, "auto", "none") and not parsed.calls:
        return "made no tool call although tool_choice requires one"
    schemas = tool_schemas(tools)
    for call in parsed.calls:
        name = call["name"]
        if name not in schemas:
            return f"unknown tool {name!r}"
        if tool_choice not in (None, "auto", "none", "required") and name != tool_choice:
            return f"called {name!r} although tool_choice is {tool_choice!r}"
        error = best_match(Draft202012Validator(schemas[name]).iter_errors(call["arguments"]))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            return f"{name}: {error.message}" + (f" (at {where})" if where else "")
    return None
