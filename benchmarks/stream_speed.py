"""Streaming on the embedded pair: time to the first streamed token, the cost of streaming
against `invoke`, and `specguard serve` under eight concurrent clients.

Messages (the disk tier of the prefix store off): the README agent's answer (after its multiply
call and the tool's result) and a longer explanation, written by the target alone
(`PlainChatModel`) and by SpecGuard lossless (the target verifies the draft's message; the same
text). Each round calls `invoke` and `stream` on the same input, interleaved, every call cold
(prefix stores emptied first, so the whole prompt is prefilled). Per model: the median time to
the first content chunk against the prompt's prefill plus one decode step plus 50 ms (issue 75's
bound; for SpecGuard, after the draft's whole message), and the median of streamed / invoked
total time, with the joined chunks checked equal to the invoked message.

Server: the target behind `specguard serve`'s app (uvicorn, loopback); eight questions asked
one at a time, then by eight clients at once; the answers must be equal; messages and output
tokens per second both ways.

    .venv/bin/python benchmarks/stream_speed.py --rounds 5
    .venv/bin/python benchmarks/stream_speed.py --bfcl multi_turn_base_0 --rounds 2
    .venv/bin/python benchmarks/stream_speed.py --readme-call --rounds 10 [--tool-choice]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from specguard_graph import PlainChatModel, SpecGuardChatModel, chat_config
from specguard_graph.machine import describe
from specguard_graph.models.loading import load_lm


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


README = [HumanMessage("What is 17 * 23?"),
          AIMessage("", tool_calls=[{"name": "multiply", "args": {"a": 17, "b": 23}, "id": "c1"}]),
          ToolMessage("391.0", tool_call_id="c1", name="multiply")]  # fmt: skip
LONGER = [HumanMessage("Explain in three sentences what a tool call is, for a new programmer.")]


def cold(*lms) -> None:
    for lm in lms:
        lm.prefix_store.clear()


def one_round(model, messages, lms, alone: dict[str, float] | None = None, *,
              calls_count: bool = False) -> dict[str, float]:  # fmt: skip
    """invoke, then stream, each cold. The bound is the streamed call's own prefill plus one
    decode step plus 50 ms; for SpecGuard (`alone`: the target alone's numbers on the same
    message, this round) the draft's whole message comes first, then the target's prefill.
    The first chunk is the first with content (`calls_count`: or a call)."""
    cold(*lms)
    t0 = time.perf_counter()
    invoked = model.invoke(messages)
    t_invoke = time.perf_counter() - t0
    cold(*lms)
    t0 = time.perf_counter()
    first, chunks = None, []
    for c in model.stream(messages):
        if first is None and (c.content or (calls_count and c.tool_call_chunks)):
            first = time.perf_counter() - t0
        chunks.append(c)
    t_stream = time.perf_counter() - t0
    joined = chunks[0]
    for c in chunks[1:]:
        joined = joined + c
    calls = [[(c["name"], c["args"]) for c in m.tool_calls] for m in (joined, invoked)]
    if joined.content != invoked.content or calls[0] != calls[1]:  # ids are per message
        raise SystemExit(f"streamed {joined!r} != invoked {invoked!r}")
    meta, tokens = joined.response_metadata, joined.usage_metadata["output_tokens"]
    if alone is None:  # the target alone: its own clocks
        prefill, step = meta["prefill_s"], meta["decode_s"] / max(tokens, 1)
    else:
        prefill, step = meta["spent"]["draft_s"] + alone["prefill"], alone["step"]
    return {"ttft": first if first is not None else t_stream, "bound": prefill + step + 0.05,
            "ratio": t_stream / t_invoke, "chunks": len(chunks), "tokens": tokens,
            "prompt": joined.usage_metadata["input_tokens"], "prefill": prefill,
            "step": step}  # fmt: skip


def serve_round(target) -> None:
    import openai
    import uvicorn

    from specguard_graph.serve import Served, build_app

    app = build_app({"target": Served(PlainChatModel(lm=target, max_tokens=64))})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=srv.run, daemon=True).start()
    while not srv.started:
        time.sleep(0.05)
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    asks = [[{"role": "user", "content": f"Name one use of the number {i} in daily life."}]
            for i in range(8)]  # fmt: skip

    def ask(m):
        r = c.chat.completions.create(model="target", messages=m)
        return r.choices[0].message.content, r.usage.completion_tokens

    t0 = time.perf_counter()
    alone = [ask(m) for m in asks]
    t_alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, asks))
    t_together = time.perf_counter() - t0
    srv.should_exit = True
    tokens = sum(n for _, n in alone)
    print(f"\nserver, 8 questions: answers equal one at a time and together: {alone == together}")
    print("| clients | seconds | messages/s | output tokens/s |\n|---|---|---|---|")
    for what, t in (("1 at a time", t_alone), ("8 at once", t_together)):
        print(f"| {what} | {t:.1f} | {8 / t:.2f} | {tokens / t:.1f} |")


class _Captured(Exception):
    pass


def first_call(target, task: str):
    """The messages and tools of an agent's first model call on a BFCL multi-turn task (the
    bench's agent: the target alone, BFCL's own prompt)."""
    from specguard_graph.bench.bfcl import multi_turn as mt

    seen: dict = {}
    original = PlainChatModel._generate

    def capture(self, messages, stop=None, run_manager=None, **kwargs):
        seen.update(messages=messages, tools=list(kwargs.get("tools") or ()))
        raise _Captured

    PlainChatModel._generate = capture  # type: ignore[method-assign]
    try:
        mt.run_task(PlainChatModel(lm=target, system_prompt=None), task)
    except _Captured:
        pass
    finally:
        PlainChatModel._generate = original  # type: ignore[method-assign]
    return seen["messages"], seen["tools"]


def call_rounds(model, lm, messages, label: str, rounds: int) -> None:
    """Time to the first streamed chunk (content or a call) of a message, cold, against its
    prefill + one decode step + 50 ms (and how many decode steps after the prefill it came),
    and streamed / invoke time."""
    print(f"{label}; {rounds} rounds, every call cold\n")
    print(
        "| round | prompt tokens | output tokens | first chunk s | prefill + 1 step + 50 ms s | "
        "within | first chunk at decode step | streamed / invoke |\n" + "|---" * 8 + "|"
    )
    rows = []
    for r in range(rounds):
        got = one_round(model, messages, (lm,), calls_count=True)
        got["at"] = (got["ttft"] - got["prefill"]) / got["step"]
        rows.append(got)
        print(f"| {r + 1} | {got['prompt']} | {got['tokens']} | {got['ttft']:.2f} | "
              f"{got['bound']:.2f} | {got['ttft'] <= got['bound']} | {got['at']:.1f} | "
              f"{got['ratio']:.3f} |", flush=True)  # fmt: skip
    med = {k: statistics.median(g[k] for g in rows) for k in ("ttft", "bound", "at", "ratio")}
    print(f"| median | | | {med['ttft']:.2f} | {med['bound']:.2f} | "
          f"{sum(g['ttft'] <= g['bound'] for g in rows)} of {rounds} | {med['at']:.1f} | "
          f"{med['ratio']:.3f} |")  # fmt: skip


def bfcl_rounds(target, task: str, rounds: int) -> None:
    """The first call of a BFCL multi-turn task, by the target alone with BFCL's prompt."""
    messages, tools = first_call(target, task)
    model = PlainChatModel(lm=target, system_prompt=None, max_tokens=96)
    bound_model = model.bind_tools(tools) if tools else model
    call_rounds(bound_model, target, messages, f"BFCL {task}, first call: {len(tools)} tools",
                rounds)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bfcl", metavar="TASK", help="only: the first call of a BFCL multi-turn task")
    ap.add_argument("--readme-call", action="store_true",
                    help="only: the README agent's first message, the target's call")  # fmt: skip
    ap.add_argument("--tool-choice", action="store_true",
                    help="with --readme-call: the call forced (tool_choice)")  # fmt: skip
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["SPECGUARD_PREFIX_DISK"] = "off"  # cold means cold: no prompt from an earlier run
    if args.bfcl:
        print(describe())
        return bfcl_rounds(load_lm("target"), args.bfcl, args.rounds)
    if args.readme_call:
        print(describe())
        target = load_lm("target")
        forced = {"tool_choice": "multiply"} if args.tool_choice else {}
        model = PlainChatModel(lm=target, max_tokens=96).bind_tools([multiply], **forced)
        label = "The README agent's first message (its call" + (", forced)" if forced else ")")
        return call_rounds(model, target, README[:1], label, args.rounds)
    draft, target = load_lm("draft"), load_lm("target")
    print(f"{describe()}; {args.rounds} rounds × 2 messages, every call cold\n")
    models = {
        "target alone": PlainChatModel(lm=target, max_tokens=96),
        "SpecGuard lossless": SpecGuardChatModel(
            draft=draft, target=target,
            config=chat_config(lossless=True, max_step_tokens=96, max_total_tokens=96)),
    }  # fmt: skip
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in models}
    plain, spec = (m.bind_tools([multiply]) for m in models.values())
    for r in range(args.rounds):
        for messages in (README, LONGER):
            alone = one_round(plain, messages, (draft, target))
            rows["target alone"].append(alone)
            rows["SpecGuard lossless"].append(one_round(spec, messages, (draft, target), alone))
        print(f"  round {r + 1} of {args.rounds} done", flush=True)
    print(
        "\n| model | messages | output tokens (median) | first token s (median) | "
        "prefill + 1 step + 50 ms s | first token within it | streamed / invoke time |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, got in rows.items():
        med = {k: statistics.median(g[k] for g in got) for k in got[0]}
        within = sum(g["ttft"] <= g["bound"] for g in got)
        print(
            f"| {name} | {len(got)} | {med['tokens']:.0f} | {med['ttft']:.2f} | "
            f"{med['bound']:.2f} | {within} of {len(got)} | {med['ratio']:.3f} |"
        )
    serve_round(target)


if __name__ == "__main__":
    main()
