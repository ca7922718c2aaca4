"""How many proposals prompt lookup should make per forward for an agent, from recorded runs.

An agent's target writes messages through prompt lookup (`PlainChatModel(lookup=True)`, the
`target-lookup` bench method): each forward checks up to `PROPOSE` tokens that followed the
text's last n tokens earlier in the conversation. This probe replays the target's recorded
messages of a BFCL multi-turn run through the same index, with no model (the tokenizer and the
chat template only), under several proposal policies, and prices each forward by its rows
with `--cost` (a forward of m rows against one of one row; the default is the target's large
layers on the VNNI block kernel, `benchmarks/results/engine/block-copies.txt`: 1, 1.2, 1.55,
1.9, then +0.45 a row). The forwards it counts for the current policy can be compared with the
`forwards` each record holds.

    .venv/bin/python benchmarks/probes/lookup_policy.py \\
        benchmarks/results/bfcl-multi-gguf-lookup/target-lookup.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from specguard_graph.agents.chat_model import SPEC
from specguard_graph.agents.messages import to_template
from specguard_graph.agents.spec import chat_question
from specguard_graph.bench.bfcl import multi_turn as mt
from specguard_graph.models.local.lookup import PROPOSE, NgramIndex

Policy = tuple[int, Callable[[bool], int]]  # n-gram length; proposals given the last forward
POLICIES: dict[str, Policy] = {
    f"{PROPOSE} (current)": (2, lambda full: PROPOSE),
    "1": (2, lambda full: 1),
    "2": (2, lambda full: 2),
    "7": (2, lambda full: 7),
    "1, 3 after a full match": (2, lambda full: 3 if full else 1),
    "2, 5 after a full match": (2, lambda full: 5 if full else 2),
    f"{PROPOSE}, 3-gram": (3, lambda full: PROPOSE),
}


def messages(path: Path, tokenizer: Any) -> Iterator[tuple[list[int], list[int], dict]]:
    """Each recorded assistant message: its prompt's ids, its ids as the template renders it
    (to the end of the turn), and its record."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for line in path.open():
        r = json.loads(line)
        entry, _ = mt.tasks()[r["id"]]
        tools = [convert_to_openai_tool(t) for t in mt.backend_tools(entry, "probe")]
        convo: list[BaseMessage] = []
        for m in (m for t in r["turns"] for m in t["messages"]):
            if m["role"] == "human":
                convo.append(HumanMessage(m["text"]))
            elif m["role"] == "tool":
                convo.append(ToolMessage(m["text"], tool_call_id=f"t{len(convo)}"))
            else:
                prompt = SPEC.render_prompt(chat_question(to_template(convo), tools), tokenizer)
                calls = [{"name": c["name"], "args": c["args"], "id": f"c{len(convo)}{i}"}
                         for i, c in enumerate(m["calls"])]  # fmt: skip
                convo.append(AIMessage(m["text"], tool_calls=calls))
                full = tokenizer.apply_chat_template(to_template(convo), tools=tools,
                                                     tokenize=False)  # fmt: skip
                said = full[len(prompt) :].split("<|im_end|>")[0]
                yield tokenizer.encode(prompt), [*tokenizer.encode(said), end], m


def replay(prompt: list[int], out: list[int], policy: Policy) -> list[tuple[int, int]]:
    """(rows, tokens gained) per forward, as `lookup.greedy` would feed them."""
    n, propose = policy
    seq, index = list(prompt), NgramIndex(n)
    index.add(seq)
    done, full, log = 0, False, []
    while done < len(out):
        prop = index.propose(seq, min(propose(full), len(out) - done - 1))
        agree = next((j for j, t in enumerate(prop) if out[done + j] != t), len(prop))
        new = out[done : done + agree + 1]
        log.append((1 + len(prop), len(new)))
        full = bool(prop) and agree == len(prop)
        start = len(seq)
        seq.extend(new)
        index.add(seq, start)
        done += len(new)
    return log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", type=Path, help="a target-lookup.jsonl of a BFCL multi-turn run")
    ap.add_argument("--cost", type=float, nargs="+", default=[1.0, 1.2, 1.55, 1.9],
                    help="a forward's cost by rows (1, 2, ...), one row = 1")  # fmt: skip
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from specguard_graph.models.loading import resolve
    from specguard_graph.models.tool_template import fix_tokenizer

    # the target's template as the bench renders it; no weights needed
    tokenizer = fix_tokenizer(AutoTokenizer.from_pretrained(str(resolve("target", None))))

    def cost(rows: int) -> float:
        extra = args.cost[-1] - args.cost[-2] if len(args.cost) > 1 else 0.0
        return args.cost[min(rows, len(args.cost)) - 1] + extra * max(0, rows - len(args.cost))

    totals = {name: [0, 0, 0.0] for name in POLICIES}
    recorded = 0
    for prompt, out, record in messages(args.records, tokenizer):
        for name, policy in POLICIES.items():
            log = replay(prompt, out, policy)
            totals[name][0] += len(log)
            totals[name][1] += sum(t for _, t in log)
            totals[name][2] += sum(cost(r) for r, _ in log)
        recorded += (record.get("fed") or {}).get("forwards") or 0
    replayed = totals[f"{PROPOSE} (current)"][0]
    print(f"{args.records}; forwards recorded {recorded}, replayed with the current policy "
          f"{replayed}; cost by rows {args.cost}\n")  # fmt: skip
    print("| proposals per forward | forwards | tokens | tokens per forward | cost × plain |")
    print("|---|---|---|---|---|")
    for name, (fwd, tok, c) in totals.items():
        print(f"| {name} | {fwd} | {tok} | {tok / fwd:.2f} | {c / tok:.3f} |")


if __name__ == "__main__":
    main()
