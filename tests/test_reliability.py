"""Faults and load: NaN logits, cut steps, concurrent runs on one model pair."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import torch

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.testing import tiny_lm

QUESTIONS = ["What is 2 + 3?", "Name three primes.", "How many legs do 4 cats have?"]
VOLATILE = ("time_s", "spent")  # wall-clock seconds


def stable(result):
    steps = [{k: v for k, v in s.items() if k not in VOLATILE} for s in result["steps"]]
    return steps, result.get("answer"), result["status"], result["counts"]


def graph_for(tiny, **cfg):
    base = dict(k=3, tau=0.7, max_steps=4, max_step_tokens=12, seed=5)
    base.update(cfg)
    return build_graph(
        tiny.draft, tiny.target, embedder=tiny.embedder, config=SpecGuardConfig(**base)
    ).compile()


def test_concurrent_threads_and_async_match_serial_runs(tiny):
    graph = graph_for(tiny)
    serial = [stable(graph.invoke({"question": q})) for q in QUESTIONS]
    assert {s["source"] for r in serial for s in r[0]} == {"draft", "target"}
    with ThreadPoolExecutor(3) as pool:
        threaded = list(pool.map(lambda q: stable(graph.invoke({"question": q})), QUESTIONS))
    assert threaded == serial

    async def together():
        return await asyncio.gather(*(graph.ainvoke({"question": q}) for q in QUESTIONS))

    assert [stable(r) for r in asyncio.run(together())] == serial


def test_runs_never_share_sessions(tiny):
    graph = graph_for(tiny)
    a = graph.invoke({"question": QUESTIONS[0]})
    b = graph.invoke({"question": QUESTIONS[0]})
    assert stable(a) == stable(b)  # a finished run leaves nothing behind that changes the next


def test_nan_logits_route_the_step_to_the_target_and_say_why(tiny):
    broken = tiny_lm(layers=4, hidden=64, heads=4, seed=0)
    with torch.no_grad():
        broken.model.lm_head.weight[7, :] = float("nan")
    cfg = SpecGuardConfig(k=2, tau=0.0, max_steps=2, max_step_tokens=8)
    graph = build_graph(broken, tiny.target, embedder=tiny.embedder, config=cfg).compile()
    events = [e for e in graph.stream({"question": "2 + 2?"}, stream_mode="custom")]
    decisions = [e for e in events if e["event"] == "decision"]
    assert decisions and all(not d["accepted"] for d in decisions)
    assert all("NaN" in d["reason"] for d in decisions)
    steps = [e for e in events if e["event"] == "step"]
    assert all(s["source"] == "target" for s in steps)


def test_a_cut_step_is_scored_decided_and_marked(tiny):
    out = graph_for(tiny, max_step_tokens=3, tau=0.0, max_steps=3).invoke({"question": "2+2?"})
    cut = [s for s in out["steps"] if s["cut"]]
    assert cut, "3-token steps must be cut"
    for s in cut:
        assert s["ended"] == "length" and s["score"] is not None and s["accepted"]
