"""A LangChain agent (`create_agent`, four tools: examples/tool_agent.py) on the embedded pair,
with SpecGuard as its model and with the target alone as its model, interleaved per task.

.venv/bin/python benchmarks/agent_task.py [--rounds 1] [--tau 0.5]

Prints per task and model: the messages (who wrote each), the share drafted, the latency and
whether the answer holds the right number; then the median latency ratio SpecGuard / target.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

import tool_agent

from specguard_graph import SpecGuardChatModel, chat_config
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
    args = ap.parse_args()
    print(describe())
    draft, target = load_lm("draft"), load_lm("target")
    # the target alone: the target drafts for itself and every message is accepted (beta = 1:
    # no attention captured); a message it writes that fails the check is written again
    alone, cfg = chat_config(tau=0.0, beta=1.0), chat_config(tau=args.tau)
    models = {
        "specguard": SpecGuardChatModel(draft=draft, target=target, config=cfg),
        "target": SpecGuardChatModel(draft=target, target=target, config=alone),
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
                print(f"[{r}] {name:9} {out['latency_s']:6.1f} s  right={ok}  "
                      f"drafted={drafted}/{len(msgs)}  {shown}", flush=True)  # fmt: skip
            ratios.append(latency["specguard"] / latency["target"])
    print(f"median latency SpecGuard / target as the agent's model: {statistics.median(ratios):.2f}"
          f" over {len(ratios)} runs (tau {args.tau})")  # fmt: skip


if __name__ == "__main__":
    main()
