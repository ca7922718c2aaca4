"""The examples run offline on the tiny models (the embedded pair runs them from the CLI)."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from specguard_graph import (
    CallableStepModel,
    SpecGuardChatModel,
    SpecGuardConfig,
    StepOutput,
    build_graph,
    chat_config,
)
from specguard_graph.testing import tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import planner_agent  # noqa: E402
import subgraphs  # noqa: E402
import tool_agent  # noqa: E402

SMALL = SpecGuardConfig(k=2, max_steps=3, max_step_tokens=12)


def test_graph_as_a_node_of_a_parent_with_other_keys(tiny):
    specguard = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder, config=SMALL)
    parent = subgraphs.as_node(specguard.compile())
    out = parent.invoke({"question": "What is 2 + 3?", "student": "5"})
    assert out["student"] == "5" and len(out["steps"]) == 3
    assert out["feedback"].endswith("in 3 steps")


def test_graph_in_a_wrapper_node_mapping_keys(tiny):
    specguard = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder, config=SMALL)
    out = subgraphs.in_wrapper(specguard.compile()).invoke({"problem": "What is 2 + 3?"})
    assert out["worked_steps"] == 3 and 0.0 <= out["target_share"] <= 1.0
    assert "question" not in out  # the parent keeps its own vocabulary


def test_planner_agent_on_tiny_models(tiny):
    agent = planner_agent.build_planner(tiny.draft, tiny.target, tiny.embedder, SMALL)
    out = agent.invoke({"question": "bake bread"})
    assert len(out["steps"]) == 3 and out["recomputed"] <= 3
    assert isinstance(out["checklist"], list)


def test_tool_agent_on_tiny_models_stops_cleanly(tiny):
    cfg = chat_config(max_step_tokens=12, max_total_tokens=12)
    model = SpecGuardChatModel(draft=tiny.draft, target=tiny.target, config=cfg)
    result = tool_agent.run(tool_agent.build_agent(None, None, model=model), "2 + 3?")
    assert result["messages"] and result["messages"][0]["source"] in ("draft", "target")


def test_tool_agent_runs_the_tools_with_create_agent(tiny):
    def draft_fn(prompt, n, **kw):
        done = re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", prompt)
        script = [{"name": "lookup_population", "arguments": {"city": "Paris"}},
                  {"name": "lookup_population", "arguments": {"city": "Berlin"}},
                  {"name": "add", "arguments": {"a": float(done[0]), "b": float(done[-1])}}
                  if done else None]  # fmt: skip
        if len(done) < 3:
            text = "<tool_call>\n" + json.dumps(script[len(done)]) + "\n</tool_call>"
        else:
            text = f"Together they have {done[-1]} people."
        return [StepOutput(text=text, token_logprobs=[-0.1], ended="eos")] * n

    draft = CallableStepModel(draft_fn, has_logprobs=True, tokenizer=tiny_tokenizer())
    model = SpecGuardChatModel(draft=draft, target=draft, config=chat_config(beta=1.0))
    result = tool_agent.run(tool_agent.build_agent(None, None, model=model), "Paris + Berlin?")
    assert [m["calls"][0][0] for m in result["messages"][:3]] == [
        "lookup_population", "lookup_population", "add"]  # fmt: skip
    assert result["answer"] == "Together they have 5980750.0 people."
    assert {m["source"] for m in result["messages"]} == {"draft"}


def test_a_killed_run_resumes_from_its_last_accepted_step(tmp_path):
    """SQLite checkpointer + a real SIGKILL: the restarted process continues, not redoes."""
    db, script = tmp_path / "runs.sqlite", ROOT / "examples" / "persistent_run.py"
    cmd = [sys.executable, str(script), "--db", str(db), "--thread", "t1", "--tiny",
           "--max-steps", "8"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    before = []
    for line in first.stdout:
        event = json.loads(line)
        if event["event"] == "step":
            before.append(event)
        if len(before) == 3:
            first.send_signal(signal.SIGKILL)
            break
    first.wait()
    assert len(before) == 3, "the first process must be killed mid-run"
    assert db.stat().st_mode & 0o777 == 0o600, "checkpoints are readable by their owner only"

    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    events = [json.loads(x) for x in second.stdout.splitlines()]
    assert events[0]["event"] == "resumed"
    saved = events[0]["steps"]
    assert saved >= 2  # at least the steps whose checkpoints were on disk before the kill
    drafts = [e["step"] for e in events if e["event"] == "draft"]
    assert not drafts or min(drafts) >= saved, "an accepted step was drafted again"
    after = [e for e in events if e["event"] == "step"]
    assert after[0]["index"] >= saved - 1 and events[-1]["event"] == "done"

    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(db)) as saver:
        state = saver.get({"configurable": {"thread_id": "t1"}})
    steps = state["channel_values"]["steps"]
    assert len(steps) == 8
    assert [s["text"] for s in steps[: len(before)]] == [e["text"] for e in before]


def test_tool_agent_stops_a_model_that_never_stops_calling(tiny):
    """A model that calls on every turn ends at the example's recursion limit, with what it
    did so far, instead of running for hours."""
    loop = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'

    def draft_fn(prompt, n, **kw):
        return [StepOutput(text=loop, token_logprobs=[-0.1], ended="eos")] * n

    draft = CallableStepModel(draft_fn, has_logprobs=True, tokenizer=tiny_tokenizer())
    model = SpecGuardChatModel(draft=draft, target=draft, config=chat_config(beta=1.0))
    result = tool_agent.run(tool_agent.build_agent(None, None, model=model), "1 + 2?")
    assert result["stopped"] and result["answer"] == ""
    assert len(result["messages"]) == (tool_agent.RECURSION_LIMIT + 1) // 2
    # every call after the first repeats an answered one: the target (here the same
    # function) was asked to write it, and wrote the same call
    assert {m["reason"] for m in result["messages"][1:]} == {
        "repeats a call already made and answered"}  # fmt: skip
