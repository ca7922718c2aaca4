"""A LangChain agent (`create_agent`, four tools: examples/tool_agent.py) on the embedded pair,
with SpecGuard as its model and with the target alone as its model (`PlainChatModel`),
interleaved per task; then the README's agent quickstart (one tool, `chat_config()`) the same
way. Every run is bounded by its recursion limit.

.venv/bin/python benchmarks/agent_task.py [--rounds 1] [--tau 0.5]

Prints per task and model: right or wrong, the model calls, who wrote each message, whether
the run was stopped at its limit, the latency; then the median latency ratio SpecGuard / target.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

import tool_agent

from specguard_graph import PlainChatModel, SpecGuardChatModel, chat_config
from specguard_graph.machine import describe
from specguard_graph.models.loading import load_lm

TASKS = [
    ("What is the combined population of Paris and Berlin?", 5_980_750),
    ("Convert 3 miles to km, then add the 5 km I already ran. How many km in total?", 9.828),
    ("What is (17 + 25) * 3?", 126),
]


def right(answer: str, gold: float) -> bool:
    numbers = [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*", answer)]
    return any(abs(x - gold) <= 0.01 * max(1.0, abs(gold)) for x in numbers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tau", type=float, default=0.5)
    ap.add_argument("--ablation", action="store_true",
                    help="only the quickstart, with each fix taken away in turn")  # fmt: skip
    args = ap.parse_args()
    draft, target = load_lm("draft"), load_lm("target")
    print(describe())
    if args.ablation:
        return ablation(draft, target)
    cfg = chat_config(tau=args.tau, max_step_tokens=128, max_total_tokens=128)
    models = {
        "specguard": SpecGuardChatModel(draft=draft, target=target, config=cfg),
        "target": PlainChatModel(lm=target, max_tokens=128),
    }
    ratios = []
    for r in range(args.rounds):
        for task, gold in TASKS:
            latency = {}
            for name, model in models.items():
                out = tool_agent.run(tool_agent.build_agent(None, None, model=model), task)
                msgs = out["messages"]
                drafted = sum(m["source"] == "draft" for m in msgs) if name == "specguard" else 0
                latency[name] = out["latency_s"]
                ok = right(out["answer"], gold)
                shown = [m["calls"] or m["text"][:60] for m in msgs]
                print(f"[{r}] {name:9} {out['latency_s']:6.1f} s  right={ok}  calls={len(msgs)} "
                      f"drafted={drafted}/{len(msgs)}  stopped={out['stopped']}  {shown}",
                      flush=True)  # fmt: skip
            ratios.append(latency["specguard"] / latency["target"])
        for name, model in quickstart_models(draft, target).items():
            out = quickstart(model)
            ok = right(out["answer"], 391)
            print(f"[{r}] quickstart {name:9} {out['latency_s']:6.1f} s  right={ok}  "
                  f"calls={out['calls']}  sources={out['sources']}  "
                  f"answer={out['answer'][:60]!r}", flush=True)  # fmt: skip
    print(f"median latency SpecGuard / target as the agent's model: {statistics.median(ratios):.2f}"
          f" over {len(ratios)} runs (tau {args.tau})")  # fmt: skip


def ablation(draft, target) -> None:  # type: ignore[no-untyped-def]
    """What the fixed template, the default system prompt and the conversation checks each
    change on the README quickstart: every variant takes one of them away."""
    from specguard_graph.agents import spec
    from specguard_graph.models.tool_template import DOUBLED, SINGLE

    fixed = {lm: lm.tokenizer.chat_template for lm in (draft, target)}
    variants = {
        "as shipped": {},
        "no system prompt": {"system_prompt": None},
        "the doubled-brace template": {"template": True},
        "no conversation checks": {"checks": False},
    }
    for label, change in variants.items():
        for name, model in quickstart_models(draft, target).items():
            if "system_prompt" in change:
                model.system_prompt = None
            if change.get("checks") is False and name == "target":
                continue  # the target alone runs no checks
            for lm in (draft, target):
                lm.tokenizer.chat_template = (fixed[lm].replace(SINGLE, DOUBLED)
                                              if change.get("template") else fixed[lm])  # fmt: skip
            checks = spec.conversation_check
            if change.get("checks") is False:
                spec.conversation_check = lambda *args: None
            try:
                out = quickstart(model)
            finally:
                spec.conversation_check = checks
            ok = right(out["answer"], 391)
            print(f"{label:27} {name:9} {out['latency_s']:6.1f} s  right={ok}"
                  f"  calls={out['calls']}  sources={out['sources']}  "
                  f"answer={out['answer'][:50]!r}", flush=True)  # fmt: skip
    for lm in (draft, target):
        lm.tokenizer.chat_template = fixed[lm]


def quickstart_models(draft, target):  # type: ignore[no-untyped-def]
    return {"specguard": SpecGuardChatModel(draft=draft, target=target, config=chat_config()),
            "target": PlainChatModel(lm=target)}  # fmt: skip


def quickstart(model) -> dict:  # type: ignore[no-untyped-def]
    """The README's agent example as written: one tool, recursion limit 12."""
    import time

    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langgraph.errors import GraphRecursionError

    agent = create_agent(model, [tool_agent.multiply])
    t0 = time.perf_counter()
    try:
        out = agent.invoke({"messages": [("user", "What is 17 * 23?")]}, {"recursion_limit": 12})
        answer = out["messages"][-1].content
        msgs = [m for m in out["messages"] if isinstance(m, AIMessage)]
    except GraphRecursionError:
        answer, msgs = "", []
    return {"answer": answer, "latency_s": time.perf_counter() - t0, "calls": len(msgs),
            "sources": [m.response_metadata.get("source") for m in msgs]}  # fmt: skip


if __name__ == "__main__":
    main()
