"""BFCL v4 multi-turn (`multi_turn_base`), offline, run the way an agent builder runs an agent.

Each task's user turns go, one after another, to a LangGraph agent (`create_agent` with a
checkpointer: the conversation carries over from turn to turn) whose model is the method: the
target alone, the draft alone (`PlainChatModel`), the target through prompt lookup
(`target-lookup`: the target's own messages in fewer forwards), or SpecGuard
(`SpecGuardChatModel`). The agent's tools are BFCL's own backend classes from the wheel
(GorillaFileSystem, TwitterAPI, ...), executed by BFCL's own `execute_multi_turn_func_call`; a
turn ends when the model makes no call, as in BFCL's FC inference loop, or after BFCL's step
limit (the task is then failed, as BFCL's `force_quit`). The prompt follows BFCL's Qwen FC
handler: the model's own chat template with the tools, and no system prompt of ours. Grading is
BFCL's `multi_turn_checker` (state and responses, turn by turn); per-turn success is the number
of leading turns it passes.

Datasets: `bfcl-multi` (tasks 10-199: the test split) and `bfcl-multi-dev` (tasks 0-9).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ...errors import InputError
from . import bfcl, tools

CATEGORY = "multi_turn_base"
DEV = 10  # the first tasks are the dev split
SPLITS = {"bfcl-multi": "test", "bfcl-multi-dev": "dev"}
PLAIN = ("target", "draft", "target-lookup")  # one model alone (`PlainChatModel`)
MODEL_METHODS = (*PLAIN, "specguard", "specguard-lossless")
# what a task record keeps of each message's response_metadata
KEPT = ("source", "reason", "checked", "score", "draft_text", "time_s", "fed", "timing",
        "spent", "prefill_s", "decode_s")  # fmt: skip


def is_multi_turn(dataset: str | None) -> bool:
    return bool(dataset) and dataset in SPLITS


@lru_cache(maxsize=1)
def _checker() -> Any:
    bfcl()  # the wheel on sys.path, its stand-ins in place
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils

    return multi_turn_checker, multi_turn_utils, MAXIMUM_STEP_LIMIT


@lru_cache(maxsize=1)
def tasks() -> dict[str, tuple[dict[str, Any], list[list[str]]]]:
    """Every task by id: (BFCL's entry with its function docs, the ground-truth calls)."""
    b = bfcl()
    answers = {a["id"]: a["ground_truth"] for a in b.utils.load_ground_truth_entry(CATEGORY)}
    return {e["id"]: (e, answers[e["id"]]) for e in b.utils.load_dataset_entry(CATEGORY)}


def problems(dataset: str) -> list[dict[str, str]]:
    if dataset not in SPLITS:
        raise InputError(f"--dataset {dataset!r}: expected one of {', '.join(SPLITS)}")
    ids = sorted(tasks(), key=lambda i: int(i.rsplit("_", 1)[1]))
    ids = ids[:DEV] if SPLITS[dataset] == "dev" else ids[DEV:]
    return [{"id": i, "question": i, "answer": json.dumps(tasks()[i][1]),
             "grader": "bfcl-multi"} for i in ids]  # fmt: skip


def call_string(name: str, args: dict[str, Any]) -> str:
    """A call as BFCL's FC handlers hand it to the executor: `f(a='x', b=2)`."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"


def backend_tools(entry: dict[str, Any], instance: str) -> list[Any]:
    """LangChain tools that run on BFCL's backend instances for this task and run."""
    from langchain_core.tools import StructuredTool

    _, utils, _ = _checker()

    def runner(name: str) -> Callable[..., str]:
        def run(**kwargs: Any) -> str:
            out, _ = utils.execute_multi_turn_func_call(
                [call_string(name, kwargs)], entry["initial_config"], entry["involved_classes"],
                instance, entry["id"],
            )  # fmt: skip
            return out[0]

        return run

    out = []
    for spec in tools(entry["function"], native=True):
        fn = spec["function"]
        out.append(StructuredTool.from_function(
            func=runner(fn["name"]), name=fn["name"], description=fn.get("description", ""),
            args_schema=fn["parameters"],
        ))  # fmt: skip
    return out


def _message(m: Any) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, ToolMessage

    if isinstance(m, AIMessage):
        meta = m.response_metadata or {}
        return {"role": "assistant", "text": m.text, "calls": [
            {"name": c["name"], "args": c["args"]} for c in m.tool_calls],
            "invalid": len(m.invalid_tool_calls), **{k: meta.get(k) for k in KEPT}}  # fmt: skip
    role = "tool" if isinstance(m, ToolMessage) else m.type
    return {"role": role, "text": m.text if isinstance(m.text, str) else str(m.content)}


def run_task(model: Any, task_id: str) -> dict[str, Any]:
    """One task through a `create_agent` agent on `model`: the record `specguard bench` keeps."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.errors import GraphRecursionError

    entry, _ = tasks()[task_id]
    _, _, limit = _checker()
    run = f"run_{uuid.uuid4().hex[:12]}"  # BFCL keys backend instances by model name and task
    agent = create_agent(model, backend_tools(entry, run), checkpointer=InMemorySaver())
    # one call at a time, in the message's order, as BFCL's harness runs them: the backends
    # keep state (a login, then a message sent), and an agent's tool node would run them in
    # parallel threads, so `send_message` could run before the `message_login` it follows
    config = {"configurable": {"thread_id": run}, "recursion_limit": 2 * limit + 2,
              "max_concurrency": 1}  # fmt: skip
    turns, seen, quit_at, t0 = [], 0, None, time.perf_counter()
    for i, user in enumerate(entry["question"]):
        t = time.perf_counter()
        try:
            agent.invoke({"messages": user}, config)
        except GraphRecursionError:
            quit_at = i  # BFCL's force_quit: more than its step limit in one turn
        messages = agent.get_state(config).values["messages"]
        new = [_message(m) for m in messages[seen:]]
        seen = len(messages)
        decoded = [[call_string(c["name"], c["args"]) for c in m["calls"]]
                   for m in new if m["role"] == "assistant" and m["calls"]]  # fmt: skip
        turns.append({"messages": new, "decoded": decoded, "latency_s": time.perf_counter() - t})
        if quit_at is not None:
            break
    return {"turns": turns, "force_quit": quit_at, "latency_s": time.perf_counter() - t0,
            "text": "", "answer": None}  # fmt: skip


def check(task_id: str, decoded: list[list[list[str]]], gold: list[list[str]]) -> dict[str, Any]:
    checker, _, _ = _checker()
    entry, _ = tasks()[task_id]
    name = f"check_{uuid.uuid4().hex[:12]}"  # fresh backend instances for every check
    return checker.multi_turn_checker(decoded, gold, entry, CATEGORY, name)


def grade(gold: str, task_id: str, result: dict[str, Any]) -> dict[str, Any]:
    """BFCL's verdict, and how many leading turns pass its checker."""
    truth = json.loads(gold)
    decoded = [t["decoded"] for t in result["turns"]]
    decoded += [[] for _ in range(len(truth) - len(decoded))]
    if result.get("force_quit") is not None:
        verdict = {"valid": False, "error_type": "multi_turn:force_quit"}
    else:
        verdict = check(task_id, decoded, truth)
    turns_ok = 0
    for n in range(1, len(truth) + 1):
        if not check(task_id, decoded[:n], truth[:n])["valid"]:
            break
        turns_ok = n
    return {"valid": bool(verdict["valid"]), "error_type": verdict.get("error_type"),
            "turns_ok": turns_ok, "turns": len(truth)}  # fmt: skip


def check_names(names: list[str]) -> None:
    """Every method is one an agent can run as its model (before any model loads)."""
    from ...errors import ConfigError

    bad = [n for n in names if n not in (*PLAIN, "specguard-lossless")
           and n.partition("@")[0] != "specguard"]  # fmt: skip
    if bad:
        raise ConfigError(f"BFCL multi-turn runs {', '.join(MODEL_METHODS)} (with @overrides); "
                          f"not {', '.join(bad)}")  # fmt: skip


def agent_model(name: str, draft: Any, target: Any) -> Any:
    """The agent's model for a method name: `target`, `draft`, `target-lookup`,
    `specguard-lossless`, or `specguard[@tau=..+...]` (chat_config's fields). No system prompt
    of ours: BFCL's."""
    from ...agents.chat_model import SpecGuardChatModel, chat_config
    from ...agents.plain import PlainChatModel
    from ..methods import parse

    if name in PLAIN:
        return PlainChatModel(lm=draft if name == "draft" else target, system_prompt=None,
                              lookup=name == "target-lookup")  # fmt: skip
    check_names([name])
    if name == "specguard-lossless":
        config = chat_config(lossless=True)
    else:
        config = chat_config(**parse(name)[1])
    return SpecGuardChatModel(draft=draft, target=target, config=config, system_prompt=None)


def solvers(names: list[str], draft: Any, target: Any) -> dict[str, Callable[[str], dict]]:
    models = {name: agent_model(name, draft, target) for name in names}  # bad names fail here
    return {name: (lambda task_id, m=m: run_task(m, task_id)) for name, m in models.items()}
