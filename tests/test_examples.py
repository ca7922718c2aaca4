"""The examples run offline on the tiny models (the embedded pair runs them from the CLI)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from langchain_core.messages import HumanMessage

from specguard_graph import CallableStepModel, SpecGuardConfig, StepOutput, build_graph

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
    agent = tool_agent.build_tool_agent(tiny.draft, tiny.target, tiny.embedder, SMALL)
    out = agent.invoke({"task": "2 + 3?", "messages": [HumanMessage("2 + 3?")]})
    assert out.get("status") in ("invalid_call", "final", None)
    assert out["verified"]


def test_tool_agent_executes_accepted_calls_with_toolnode(tiny):
    script = ['{"tool": "add", "args": {"a": 17, "b": 25}}',
              '{"tool": "multiply", "args": {"a": 42, "b": 3}}', '{"final": 126}']  # fmt: skip
    seen = []

    def draft_fn(prompt, n, **kw):
        seen.append(prompt)
        return [StepOutput(text=script[prompt.count("Observation:")], token_logprobs=[-0.1])] * n

    draft = CallableStepModel(draft_fn, has_logprobs=True)
    # a callable's tokens are characters: the longest call is 45, so steps are not cut
    cfg = SpecGuardConfig(k=1, beta=1.0, tau=0.5, max_step_tokens=64)
    agent = tool_agent.build_tool_agent(draft, tiny.target, None, cfg)
    out = agent.invoke({"task": "(17 + 25) * 3?", "messages": [HumanMessage("(17+25)*3?")]})
    assert out["answer"] == "126" and out["status"] == "final"
    observations = [m.content for m in out["messages"] if m.type == "tool"]
    assert observations == ["42.0", "126.0"]  # computed by the ToolNode, not the model
    assert "Observation: 42.0" in seen[1]
    assert [r["source"] for r in out["verified"]] == ["draft"] * 3


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
