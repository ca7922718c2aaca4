"""A LangChain agent whose model is SpecGuard: each assistant message (a tool call or the answer)
is drafted by the small model, checked against the tools' schemas and scored, and written by
the large model only when it fails. The agent itself is `langchain.agents.create_agent`,
unchanged, with four ordinary tools.

    python examples/tool_agent.py "Convert 3 miles to km, then add the 5 km I already ran."
"""

from __future__ import annotations

import sys
import time
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from specguard_graph import SpecGuardChatModel, chat_config


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@tool
def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a length between units: m, km, mile, ft."""
    metres = {"m": 1.0, "km": 1000.0, "mile": 1609.344, "ft": 0.3048}
    if from_unit not in metres or to_unit not in metres:
        raise ValueError(f"units must be one of {sorted(metres)}")
    return round(value * metres[from_unit] / metres[to_unit], 4)


@tool
def lookup_population(city: str) -> int:
    """The population of a city (a small offline table)."""
    table = {"paris": 2_102_650, "berlin": 3_878_100, "madrid": 3_332_035}
    return table.get(city.strip().lower(), -1)


TOOLS = [add, multiply, convert_units, lookup_population]
SYSTEM = "Use the tools for every computation, one call at a time. Answer in one sentence."
RECURSION_LIMIT = 16  # a model that keeps calling stops here (seven calls), not hours later


def build_agent(draft: Any, target: Any, *, model: Any = None, tau: float = 0.5) -> Any:
    """The agent with SpecGuard as its model (or any chat model given as `model`)."""
    # a call is at most a few dozen tokens: a message that runs past 128 is a loop, cut early
    cfg = chat_config(tau=tau, max_step_tokens=128, max_total_tokens=128)
    model = model or SpecGuardChatModel(draft=draft, target=target, config=cfg)
    return create_agent(model, TOOLS, system_prompt=SYSTEM)


def run(agent: Any, task: str) -> dict[str, Any]:
    """Run one task; what each message was and who wrote it."""
    from langgraph.errors import GraphRecursionError

    t0 = time.perf_counter()
    out: dict[str, Any] = {"messages": [HumanMessage(task)]}
    stopped = False
    limit = {"recursion_limit": RECURSION_LIMIT}
    try:  # the run's state after every step, so a stopped run still shows what it did
        for state in agent.stream({"messages": out["messages"]}, limit, stream_mode="values"):
            out = state
    except GraphRecursionError:
        stopped = True
    messages = [m for m in out["messages"] if isinstance(m, AIMessage)]
    return {
        "answer": "" if stopped else out["messages"][-1].content,
        "stopped": stopped,
        "latency_s": time.perf_counter() - t0,
        "messages": [
            {
                "source": m.response_metadata.get("source", "model"),
                "calls": [(c["name"], c["args"]) for c in m.tool_calls],
                "text": m.content,
                "reason": m.response_metadata.get("reason"),
            }
            for m in messages
        ],
    }


def main() -> None:
    from specguard_graph.models.loading import load_lm

    task = " ".join(sys.argv[1:]) or "Convert 3 miles to km, then add the 5 km I already ran."
    result = run(build_agent(load_lm("draft"), load_lm("target")), task)
    for m in result["messages"]:
        why = f"  ({m['reason']})" if m["reason"] else ""
        print(f"{m['source']:6}  {m['calls'] or m['text']!r}{why}")
    print(f"answer: {result['answer']}  ({result['latency_s']:.1f} s)")


if __name__ == "__main__":
    main()
