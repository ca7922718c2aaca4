"""`langgraph dev` serves the graph offline and streams the custom step events and each step as
a message."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import stop, wait_until_up

from specguard_graph.models.served.llamacpp import LlamaServer, free_port

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def langgraph_dev(tmp: Path, config: dict, **env_extra: str):
    """`langgraph dev` on a free port, serving studio.py with `config` and `env_extra`."""
    exe = Path(sys.executable).parent / "langgraph"
    if not exe.exists() and not shutil.which("langgraph"):
        pytest.fail("langgraph-cli[inmem] is a dev dependency: `make setup` installs it")
    port = free_port()
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(config))
    env = {**os.environ, "SPECGUARD_CONFIG": str(cfg), "LANGGRAPH_CLI_NO_ANALYTICS": "1",
           "LANGGRAPH_NO_VERSION_CHECK": "true", "HF_HUB_OFFLINE": "1", **env_extra}  # fmt: skip
    log = tmp / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen([str(exe), "dev", "--no-browser", "--no-reload", "--host",
                                 "127.0.0.1", "--port", str(port)], cwd=ROOT, env=env,
                                stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/ok", proc, f"langgraph dev ({log})")
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = {"k": 3, "max_steps": 4, "max_step_tokens": 16}
    with langgraph_dev(tmp_path_factory.mktemp("studio"), config,
                       SPECGUARD_STUDIO_MODELS="tiny") as url:  # fmt: skip
        yield url


def run_events(server: str, body: dict):
    """(event, data) of a run streamed through the API's server-sent events."""
    with httpx.stream("POST", f"{server}/runs/stream", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        kind = None
        for line in resp.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                yield kind, json.loads(line.split(":", 1)[1])


def test_a_run_through_the_api_streams_the_step_events(server):
    body = {
        "assistant_id": "specguard",
        "input": {"question": "What is 2 + 3?"},
        "stream_mode": ["custom", "values"],
    }
    events, last_values = [], None
    for kind, data in run_events(server, body):
        if kind == "custom":
            events.append(data)
        elif kind == "values":
            last_values = data
    kinds = {e["event"] for e in events}
    assert {"draft", "select", "grounding", "logprob", "decision", "step", "done"} <= kinds
    steps = [e for e in events if e["event"] == "step"]
    assert last_values is not None and len(last_values["steps"]) == len(steps)
    assert last_values["status"] in ("final", "max_steps", "max_total_tokens")


def test_the_served_graph_streams_each_step_as_a_message(server):
    body = {
        "assistant_id": "specguard",
        "input": {"question": "What is 2 + 3?"},
        "context": {"tau": 1.01, "max_steps": 2},  # every step written by the target
        "stream_mode": ["messages-tuple", "values"],
    }
    texts: dict[str, str] = {}
    counts: dict[str, int] = {}
    last_values = None
    for kind, data in run_events(server, body):
        if kind == "messages":
            message, meta = data
            assert meta["langgraph_node"] == "target_recompute"
            texts[message["id"]] = texts.get(message["id"], "") + message["content"]
            counts[message["id"]] = counts.get(message["id"], 0) + 1
        elif kind == "values":
            last_values = data
    steps = last_values["steps"]
    assert steps and len(texts) == len(steps)
    for step, text in zip(steps, texts.values(), strict=True):
        assert text.startswith(step["text"])
    assert max(counts.values()) > 1  # token by token, not whole


def test_studio_shows_the_per_run_settings_and_a_run_can_set_them(server):
    found = httpx.post(f"{server}/assistants/search", json={"graph_id": "specguard"}, timeout=30)
    assistant = found.json()[0]["assistant_id"]
    schemas = httpx.get(f"{server}/assistants/{assistant}/schemas", timeout=30).json()
    fields = schemas["context_schema"]["properties"]
    assert {"tau", "beta", "k", "temperature", "max_steps"} <= set(fields)
    body = {
        "assistant_id": "specguard",
        "input": {"question": "What is 2 + 3?"},
        "context": {"tau": 0.0, "k": 1, "max_steps": 2},
    }
    out = httpx.post(f"{server}/runs/wait", json=body, timeout=120).json()
    assert [s["source"] for s in out["steps"]] == ["draft", "draft"]
    assert all(len(s["candidates"]) == 1 for s in out["steps"])


def test_a_parent_graph_calls_the_served_graph_through_remote_graph(tmp_path):
    """Scale-out: the graph runs under LangGraph's server with served models (the worker
    holds no LLM weights); a parent graph calls it as a node through RemoteGraph."""
    from typing import TypedDict

    from langgraph.graph import START, StateGraph
    from langgraph.pregel.remote import RemoteGraph

    from specguard_graph.models.install.installer import gguf_path
    from specguard_graph.models.install.registry import DRAFT

    if not gguf_path(DRAFT).exists():
        pytest.fail(f"{gguf_path(DRAFT)} is missing: run `specguard models install`")
    config = {"k": 2, "beta": 1.0, "max_steps": 3, "max_step_tokens": 24, "seed": 1}
    with (
        LlamaServer(gguf_path(DRAFT), parallel=2, ctx=1024) as llm,
        langgraph_dev(tmp_path, config, SPECGUARD_DRAFT=llm, SPECGUARD_TARGET=llm) as url,
    ):

        class Parent(TypedDict, total=False):
            question: str
            answer: str | None
            steps: list

        remote = RemoteGraph("specguard", url=url)
        parent = StateGraph(Parent)
        parent.add_node("specguard", remote)
        parent.add_edge(START, "specguard")
        out = parent.compile().invoke({"question": "What is 2 + 3?"})
    assert 1 <= len(out["steps"]) <= 3
    assert all(s["logprob"] is not None and s["grounding"] is None for s in out["steps"])
