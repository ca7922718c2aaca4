"""A tool-using agent whose tool calls are the steps: each call (one JSON line) is drafted
by the small model and accepted or recomputed by the large one (`ToolCallSteps`), then the
accepted call is executed by a LangGraph `ToolNode` and its result fed back.

    python examples/tool_agent.py "What is (17 + 25) * 3?"
"""

from __future__ import annotations

import operator
import sys
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from specguard_graph import SpecGuardConfig, ToolCallSteps, build_graph


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


TOOLS = [add, multiply]
SPEC = ToolCallSteps(tools=tuple(f"{t.name}(a, b)" for t in TOOLS))


class AgentState(TypedDict, total=False):
    task: str
    messages: Annotated[list[AnyMessage], add_messages]
    answer: str | None
    status: str
    verified: Annotated[list[dict[str, Any]], operator.add]  # per call: who wrote it, its score


def transcript(state: AgentState) -> str:
    """The task plus every call and observation so far, as the models will continue it."""
    lines = [state["task"]]
    for m in state.get("messages") or []:
        if isinstance(m, ToolMessage):
            lines.append(f"Observation: {m.content}")
    return "\n".join(lines)


def build_tool_agent(draft, target, embedder=None, config: SpecGuardConfig | None = None,
                     max_calls: int = 6):  # fmt: skip
    # a turn ends at the first JSON line (ToolCallSteps.is_final); a few steps of lead-in
    # (a code fence, a remark) are allowed before it
    config = config or SpecGuardConfig(k=2, max_steps=4, max_step_tokens=48)
    propose_step = build_graph(draft, target, embedder=embedder, steps=SPEC, config=config)
    propose_step = propose_step.compile()

    def propose(state: AgentState) -> dict[str, Any]:
        out = propose_step.invoke({"question": transcript(state)})
        step = out["steps"][-1]
        record = {k: step[k] for k in ("text", "source", "score")}
        call = SPEC.parse(step["text"])
        if call is None or not ({"final"} <= call.keys() or {"tool", "args"} <= call.keys()):
            return {"status": "invalid_call", "verified": [record]}
        if "final" in call:
            return {"answer": str(call["final"]), "status": "final", "verified": [record]}
        msg = AIMessage(
            content=step["text"],
            tool_calls=[{"name": call["tool"], "args": call["args"], "id": uuid.uuid4().hex}],
        )
        return {"messages": [msg], "verified": [record]}

    def route(state: AgentState) -> str:
        if state.get("status"):
            return END
        calls = sum(isinstance(m, AIMessage) for m in state.get("messages") or [])
        return "tools" if calls <= max_calls else END

    g = StateGraph(AgentState)
    g.add_node("propose", propose)
    g.add_node("tools", ToolNode(TOOLS))
    g.add_edge(START, "propose")
    g.add_conditional_edges("propose", route, ["tools", END])
    g.add_edge("tools", "propose")
    return g.compile()


def main() -> None:
    from specguard_graph.models.loading import load_embedder, load_lm

    task = " ".join(sys.argv[1:]) or "What is (17 + 25) * 3?"
    agent = build_tool_agent(load_lm("draft"), load_lm("target"), load_embedder())
    out = agent.invoke({"task": task, "messages": [HumanMessage(task)]})
    for record in out.get("verified", []):
        print(f"{record['source']:6} score={record['score']}  {record['text']}")
    print("answer:", out.get("answer"), "status:", out.get("status", "max_calls"))


if __name__ == "__main__":
    main()
