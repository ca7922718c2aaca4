"""A planner whose plan items are the steps: each item is drafted by the small model and
accepted or recomputed by the large one (`PlanSteps`: one numbered item per line, DONE
ends the plan). A second node turns the accepted plan into a checklist.

    python examples/planner_agent.py "organise a team offsite for 12 people"
"""

from __future__ import annotations

import json
import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from specguard_graph import PlanSteps, SpecGuardConfig, build_graph


class PlannerState(TypedDict, total=False):
    question: str  # the goal, under the name the SpecGuard graph reads
    answer: str | None  # JSON list of plan items
    steps: list[dict[str, Any]]
    checklist: list[str]
    recomputed: int


def build_planner(draft, target, embedder=None, config: SpecGuardConfig | None = None):
    config = config or SpecGuardConfig(k=2, max_steps=12, max_step_tokens=48)
    plan = build_graph(draft, target, embedder=embedder, steps=PlanSteps(), config=config)

    def checklist(state: PlannerState) -> dict[str, Any]:
        items = json.loads(state["answer"]) if state.get("answer") else []
        recomputed = sum(s["source"] == "target" for s in state.get("steps") or [])
        return {"checklist": [f"[ ] {item}" for item in items], "recomputed": recomputed}

    g = StateGraph(PlannerState)
    g.add_node("plan", plan.compile())
    g.add_node("checklist", checklist)
    g.add_edge(START, "plan")
    g.add_edge("plan", "checklist")
    g.add_edge("checklist", END)
    return g.compile()


def main() -> None:
    from specguard_graph.models.loading import load_embedder, load_lm

    goal = " ".join(sys.argv[1:]) or "bake bread at home for the first time"
    agent = build_planner(load_lm("draft"), load_lm("target"), load_embedder())
    out = agent.invoke({"question": goal})
    print("\n".join(out["checklist"]) or "(no plan items)")
    print(f"{out['recomputed']} of {len(out['steps'])} items recomputed by the target")


if __name__ == "__main__":
    main()
