"""Two ways to use the SpecGuard graph inside your own LangGraph app.

1. As a node: the compiled graph is added to a parent whose state shares its keys
   (`question` in; `answer`, `steps` out) and has keys of its own.
2. In a wrapper node: the parent has its own vocabulary (`problem`, `solution`) and a node
   maps it onto the graph's input and back.

    python examples/subgraphs.py          # on the embedded pair
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from specguard_graph import SpecGuardConfig, build_graph


class TutorState(TypedDict, total=False):
    question: str  # shared with the SpecGuard graph
    answer: str | None  # shared
    steps: Annotated[list[dict[str, Any]], operator.add]  # shared
    student: str  # the parent's own keys
    feedback: str


def as_node(specguard) -> Any:
    """The compiled SpecGuard graph as a node of a parent graph with extra keys."""

    def grade(state: TutorState) -> dict[str, Any]:
        verdict = "correct" if state.get("answer") == state["student"] else "check again"
        n = len(state.get("steps") or [])
        return {"feedback": f"{verdict}: reference {state.get('answer')} in {n} steps"}

    g = StateGraph(TutorState)
    g.add_node("solve", specguard)
    g.add_node("grade", grade)
    g.add_edge(START, "solve")
    g.add_edge("solve", "grade")
    g.add_edge("grade", END)
    return g.compile()


class WorksheetState(TypedDict, total=False):
    problem: str
    solution: str | None
    worked_steps: int
    target_share: float


def in_wrapper(specguard) -> Any:
    """The SpecGuard graph called from a node that maps the parent's keys."""

    def solve(state: WorksheetState) -> dict[str, Any]:
        out = specguard.invoke({"question": state["problem"]})
        steps = out["steps"]
        share = sum(s["source"] == "target" for s in steps) / max(len(steps), 1)
        return {"solution": out["answer"], "worked_steps": len(steps), "target_share": share}

    g = StateGraph(WorksheetState)
    g.add_node("solve", solve)
    g.add_edge(START, "solve")
    g.add_edge("solve", END)
    return g.compile()


def main() -> None:
    from specguard_graph.models.loading import load_embedder, load_lm

    cfg = SpecGuardConfig(k=2, max_steps=8, max_step_tokens=64)
    specguard = build_graph(
        load_lm("draft"), load_lm("target"), embedder=load_embedder(), config=cfg
    ).compile()
    q = "A farmer has 3 baskets with 4 apples each. He gives away 5 apples. How many are left?"
    print(as_node(specguard).invoke({"question": q, "student": "7"})["feedback"])
    print(in_wrapper(specguard).invoke({"problem": q}))


if __name__ == "__main__":
    main()
