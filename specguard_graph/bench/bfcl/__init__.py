"""BFCL v4 (Berkeley Function Calling Leaderboard) from the `bfcl-eval` wheel, read as data.

The wheel's dependency list cannot be installed beside torch (it pins numpy 1.26.4 and pulls a
dozen provider SDKs), so it is extracted into the cache and its own modules are imported from
there with two stand-ins: the provider-handler registry (`constants.model_config`, which imports
every SDK) and the Java / JavaScript parsers (tree-sitter). Everything this project uses from it
is BFCL's own code: the data and answers, the language hint added to each function, the
prompting system prompt, the function-doc conversion, the prompting decoder and `ast_checker`.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import types
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...models.install.installer import download, wheel_dir

BFCL = ("bfcl-eval", "2026.3.23",
        "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a")  # fmt: skip
# single-turn categories graded by AST with Python calls
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
              "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
              "live_irrelevance", "live_relevance")  # fmt: skip
# the model names the stub registry knows: prompting calls keep BFCL's dotted names, native
# tool calls have them as underscores (tool names allow no dots), as BFCL's FC handlers do
PROMPTING, NATIVE = "specguard-prompting", "specguard-fc"


@dataclass
class _Config:  # the one field of BFCL's ModelConfig the checker reads
    underscore_to_dot: bool


def _stub(name: str, **attrs: Any) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


def _unsupported(*args: Any, **kwargs: Any) -> Any:
    raise InputError("Java and JavaScript BFCL categories are not supported (Python calls only)")


def root() -> Path:
    """The extracted wheel (once per version, in the cache next to the downloaded wheels)."""
    out = wheel_dir().parent / f"bfcl_eval-{BFCL[1]}"
    if not (out / ".complete").exists():
        (wheel,) = download([BFCL])
        with zipfile.ZipFile(wheel) as z:
            z.extractall(out)
        (out / ".complete").write_text(BFCL[2])
    return out


@lru_cache(maxsize=1)
def bfcl() -> types.SimpleNamespace:
    """BFCL's own functions, imported from the extracted wheel."""
    path = root()
    # BFCL makes result/score folders under its project root on import: keep them in the cache
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(path / "project"))
    if str(path) not in sys.path:
        sys.path.append(str(path))
    _stub("bfcl_eval.constants.model_config",
          MODEL_CONFIG_MAPPING={PROMPTING: _Config(False), NATIVE: _Config(True)})  # fmt: skip
    _stub("bfcl_eval.model_handler.parser.java_parser", parse_java_function_call=_unsupported)
    _stub("bfcl_eval.model_handler.parser.js_parser", parse_javascript_function_call=_unsupported)
    from bfcl_eval import utils
    from bfcl_eval.constants.enums import Language, ModelStyle
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.model_handler import utils as handler_utils

    return types.SimpleNamespace(
        ast_checker=ast_checker, Language=Language, ModelStyle=ModelStyle,
        GORILLA_TO_OPENAPI=GORILLA_TO_OPENAPI, handler=handler_utils, utils=utils,
    )  # fmt: skip


def _any_free(schema: dict[str, Any], original: dict[str, Any]) -> None:
    """BFCL maps its type "any" to "string" for OpenAI; a schema check must accept any value."""
    for key, prop in (original.get("properties") or {}).items():
        if prop.get("type") == "any":
            schema["properties"][key].pop("type", None)
        elif isinstance(prop.get("properties"), dict):
            _any_free(schema["properties"][key], prop)


def tools(functions: list[dict[str, Any]], *, native: bool) -> list[dict[str, Any]]:
    """BFCL function docs -> OpenAI tool dicts (BFCL's `convert_to_tool`); `native=False` keeps
    the dotted names a prompting model writes."""
    b = bfcl()
    converted = b.handler.convert_to_tool(functions, b.GORILLA_TO_OPENAPI,
                                          b.ModelStyle.OPENAI_COMPLETIONS)  # fmt: skip
    out = []
    for fn, original in zip(converted, functions, strict=True):
        fn = fn.get("function", fn)
        _any_free(fn["parameters"], original["parameters"])
        if not native:
            fn["name"] = original["name"]
        out.append({"type": "function", "function": fn})
    return out


def entries(category: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(entry, possible answer) pairs of one category, the language hint added as BFCL does."""
    if category not in CATEGORIES:
        raise InputError(f"unknown BFCL category {category!r}; known: {', '.join(CATEGORIES)}")
    b = bfcl()
    data = b.utils.load_dataset_entry(category, include_language_specific_hint=True)
    if "irrelevance" in category or "relevance" in category:
        return [(e, None) for e in data]
    answers = {a["id"]: a for a in b.utils.load_ground_truth_entry(category)}
    return [(e, answers[e["id"]]) for e in data]


def prompt_messages(entry: dict[str, Any], *, native: bool) -> list[dict[str, Any]]:
    """The first turn as the model sees it: in prompting mode with BFCL's system prompt (the
    functions and the `[func(a=1)]` format); natively the tools go to the chat template."""
    messages = copy.deepcopy(entry["question"][0])
    if native:
        return messages
    b = bfcl()
    return b.handler.system_prompt_pre_processing_chat_model(messages, entry["function"],
                                                             entry["id"])  # fmt: skip


DEV_PER_CATEGORY = 10  # the first items of each category calibrate; the rest test
_SPLITS = {"bfcl": (False, "test"), "bfcl-dev": (False, "dev"), "bfcl-fc": (True, "test"),
           "bfcl-fc-dev": (True, "dev")}  # fmt: skip


def is_bfcl(dataset: str | None) -> bool:
    return bool(dataset) and dataset.partition(":")[0] in _SPLITS  # type: ignore[union-attr]


def problems(dataset: str) -> list[dict[str, str]]:
    """`bfcl[-fc][-dev]:CAT[,CAT...]`: prompting (BFCL's system prompt, `[f(a=1)]`) or native
    tool calls (`-fc`), the test split or the dev split (`-dev`), categories interleaved."""
    from ...agents.spec import chat_question

    kind, _, cats = dataset.partition(":")
    if kind not in _SPLITS or not cats.strip():
        raise InputError(f"--dataset {dataset!r}: expected bfcl[-fc][-dev]:CATEGORY[,CATEGORY...]"
                         f" (categories: {', '.join(CATEGORIES)})")  # fmt: skip
    native, split = _SPLITS[kind]
    columns = []
    for category in [c.strip() for c in cats.split(",") if c.strip()]:
        items = entries(category)
        items = items[:DEV_PER_CATEGORY] if split == "dev" else items[DEV_PER_CATEGORY:]
        column = []
        for entry, answer in items:
            question = chat_question(prompt_messages(entry, native=native),
                                     tools(entry["function"], native=native),
                                     calls="json" if native else "python")  # fmt: skip
            gold = {"category": category, "functions": entry["function"],
                    "ground_truth": answer["ground_truth"] if answer else None}  # fmt: skip
            column.append({"id": entry["id"], "question": question, "answer": json.dumps(gold),
                           "grader": "bfcl"})  # fmt: skip
        columns.append(column)
    return [c[i] for i in range(max(map(len, columns), default=0)) for c in columns if i < len(c)]


def decode(text: str, *, native: bool) -> list[dict[str, Any]]:
    """The calls as BFCL's checker reads them, `[{name: {arg: value}}]`; raises when BFCL's
    prompting decoder cannot read the text. Native calls are the chat model's parsed calls (what
    an agent would run; BFCL's Qwen FC handler likewise drops blocks that do not parse)."""
    from ...agents.calls import parse_calls

    if native:
        return [{c["name"]: c["arguments"]} for c in parse_calls(text, "json").calls]
    return bfcl().handler.default_decode_ast_prompting(text)


def grade(gold: str, question: str, text: str) -> dict[str, Any]:
    """BFCL's verdict on one answer: {"valid", "error_type"}, as its eval runner decides it."""
    from ...agents.spec import read_question

    b, g = bfcl(), json.loads(gold)
    category = g["category"]
    native = read_question(question).get("calls") == "json"
    model = NATIVE if native else PROMPTING
    try:
        decoded = decode(text, native=native)
    except Exception as e:  # BFCL's runner: any decoder failure is "no valid call"
        decoded, failed = None, f"ast_decoder:decoder_failed ({type(e).__name__})"
    else:
        failed = None
    if "irrelevance" in category:
        no_call = failed is not None or b.utils.is_empty_output(decoded)
        return {"valid": no_call, "error_type": None if no_call else "irrelevance_error"}
    if "relevance" in category:
        call = failed is None and not b.utils.is_empty_output(decoded)
        return {"valid": call, "error_type": None if call else "relevance_error"}
    if failed is not None:
        return {"valid": False, "error_type": failed}
    if not b.utils.is_function_calling_format_output(decoded):
        return {"valid": False, "error_type": "ast_decoder:decoder_wrong_output_format"}
    r = b.ast_checker(g["functions"], decoded, g["ground_truth"], b.Language.PYTHON, category,
                      model)  # fmt: skip
    return {"valid": bool(r["valid"]), "error_type": None if r["valid"] else r.get("error_type")}
