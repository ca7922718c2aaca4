"""Tool calls in an assistant message: parsed from the text a model writes, checked against each
tool's JSON schema, and put in one canonical form so k candidates can vote exactly.

Two ways a model writes calls:
- "json": the native tool template of Qwen2.5 and Hermes-style models, one
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block per call;
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

CallFormat = Literal["json", "python"]
CALL_FORMATS: tuple[str, ...] = ("json", "python")
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


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


def _loads(raw: str) -> Any:
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


_NAMED = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


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


def _json_call(raw: str) -> dict[str, Any]:
    obj = _loads(raw)
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


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _bare_calls(text: str) -> list[dict[str, Any]] | None:
    """A message that is nothing but call objects (one, a list, or one per line), bare or in a
    ```json fence, as small models write when they skip the tags; None when it is anything else."""
    body = text.strip()
    if m := _FENCE.match(body):
        body = m.group(1)
    if not body.startswith(("{", "[")):
        return None
    try:
        obj = _loads(body)
        items = obj if isinstance(obj, list) else [obj]
    except json.JSONDecodeError:
        try:
            items = [_loads(line) for line in body.splitlines() if line.strip()]
        except json.JSONDecodeError:
            return None
    if not items or not all(isinstance(i, dict) and "name" in i for i in items):
        return None
    try:
        return [_json_call(json.dumps(i)) for i in items]
    except ValueError:
        return None


def json_blocks(text: str) -> list[tuple[re.Match[str], dict[str, Any] | None, str | None]]:
    """Each `<tool_call>` block in order: its match, and its call or why it is invalid (a
    stream matches the blocks it sent to the message's calls by this order)."""
    out: list[tuple[re.Match[str], dict[str, Any] | None, str | None]] = []
    for m in _BLOCK.finditer(text):
        try:
            out.append((m, _json_call(m.group(1).strip()), None))
        except ValueError as e:  # json.JSONDecodeError is one
            out.append((m, None, str(e)))
    return out


def parse_json_calls(text: str) -> ParsedMessage:
    if "<tool_call>" not in text and (bare := _bare_calls(text)) is not None:
        return ParsedMessage("", bare)
    blocks = json_blocks(text)
    calls = [call for _, call, _ in blocks if call is not None]
    # an invalid call is its block as written, tags and all
    invalid = [{"text": m.group(0), "error": error, "name": written_name(m.group(1))}
               for m, call, error in blocks if call is None]  # fmt: skip
    return ParsedMessage(_BLOCK.sub("", text).strip(), calls, invalid)


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
