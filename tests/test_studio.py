"""`langgraph dev` serves the graph offline and streams the custom step events."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import stop, wait_until_up

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    exe = Path(sys.executable).parent / "langgraph"
    if not exe.exists() and not shutil.which("langgraph"):
        pytest.fail("langgraph-cli[inmem] is a dev dependency: `make setup` installs it")
    port = free_port()
    cfg = tmp_path_factory.mktemp("cfg") / "config.json"
    cfg.write_text(json.dumps({"k": 3, "max_steps": 4, "max_step_tokens": 16}))
    env = {
        **os.environ,
        "SPECGUARD_CONFIG": str(cfg),
        "SPECGUARD_STUDIO_MODELS": "tiny",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "HF_HUB_OFFLINE": "1",
    }
    log = tmp_path_factory.mktemp("studio") / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [
                str(exe),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/ok", proc, f"langgraph dev ({log})")
        yield url
    finally:
        stop(proc)


def test_a_run_through_the_api_streams_the_step_events(server):
    body = {
        "assistant_id": "specguard",
        "input": {"question": "What is 2 + 3?"},
        "stream_mode": ["custom", "values"],
    }
    events, last_values = [], None
    with httpx.stream("POST", f"{server}/runs/stream", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        kind = None
        for line in resp.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind in ("custom", "values"):
                data = json.loads(line.split(":", 1)[1])
                if kind == "custom":
                    events.append(data)
                else:
                    last_values = data
    kinds = {e["event"] for e in events}
    assert {"draft", "select", "grounding", "logprob", "decision", "step", "done"} <= kinds
    steps = [e for e in events if e["event"] == "step"]
    assert last_values is not None and len(last_values["steps"]) == len(steps)
    assert last_values["status"] in ("final", "max_steps", "max_total_tokens")


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
