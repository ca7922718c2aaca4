"""Served models: a real llama.cpp server (xllamacpp, the embedded 0.5B GGUF) on 127.0.0.1,
started and stopped here, behind the OpenAI-compatible completions route."""

import os
import socket
import subprocess
import sys

import pytest
from conftest import stop, wait_until_up
from typer.testing import CliRunner

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.cli import app
from specguard_graph.errors import ModelLoadError
from specguard_graph.models.served import ServedStepModel, is_served

SERVER = """
import sys, time, xllamacpp
p = xllamacpp.CommonParams()
p.model.path, p.port, p.n_ctx, p.n_parallel = sys.argv[1], int(sys.argv[2]), 4096, 4
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = 2
server = xllamacpp.Server(p)
print("ready", flush=True)
while True:
    time.sleep(60)
"""
Q = {"question": "What is 2 + 3?"}


@pytest.fixture(scope="module")
def served():
    from specguard_graph.models.install import gguf_path
    from specguard_graph.models.registry import DRAFT

    gguf = gguf_path(DRAFT)
    if not gguf.exists():
        if os.environ.get("SPECGUARD_SKIP_REAL") == "1":
            pytest.skip("the embedded GGUF is not installed")
        pytest.fail(f"{gguf} is missing: run `specguard models install`")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(gguf), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/health", proc, "the llama.cpp server")
        yield f"{url}/v1"
    finally:
        stop(proc)


def test_the_model_path_contract():
    assert is_served("http://127.0.0.1:8000/v1") and is_served("https://host/api/v1/")
    assert not is_served("http://127.0.0.1:8000") and not is_served("/models/v1")
    assert not is_served(None)


def test_served_draft_and_target_run_the_graph(served):
    draft = ServedStepModel(served)
    target = ServedStepModel(served)
    assert draft.model.endswith(".gguf")  # the name the server lists
    cfg = SpecGuardConfig(k=2, beta=1.0, tau=0.6, max_steps=3, max_step_tokens=48, seed=3)
    from specguard_graph.models.loading import load_embedder

    graph = build_graph(draft, target, embedder=load_embedder(), config=cfg).compile()
    out = graph.invoke(Q)
    assert out["status"] in ("final", "max_steps") and out["steps"]
    for s in out["steps"]:
        assert s["logprob"] is not None and s["logprob"] <= 0 and len(s["candidates"]) == 2
        assert s["source"] in ("draft", "target")
    assert out["text"].startswith(out["steps"][0]["text"])
    # the served prompt is the local one: llama.cpp publishes the GGUF's chat template
    assert draft.tokenizer is not None and "<|im_start|>" in draft.tokenizer.chat_template


def test_served_target_with_a_local_draft(served, tiny):
    target = ServedStepModel(served)
    cfg = SpecGuardConfig(k=2, tau=1.0, max_steps=2, max_step_tokens=16, seed=1)
    out = build_graph(tiny.draft, target, embedder=tiny.embedder, config=cfg).compile().invoke(Q)
    assert [s["source"] for s in out["steps"]] == ["target", "target"]  # τ = 1: all recomputed
    assert all(s["grounding"] is not None for s in out["steps"])  # the local draft's signals
    assert all(s["text"] for s in out["steps"])


def test_an_unreachable_server_is_one_line():
    with pytest.raises(ModelLoadError, match="cannot reach the server"):
        ServedStepModel("http://127.0.0.1:9/v1", retries=0, timeout=5)
    res = CliRunner().invoke(app, ["solve", "--draft", "http://127.0.0.1:9/v1", "--k", "1",
                                   "--beta", "1", "q"])  # fmt: skip
    assert res.exit_code == 2 and res.stderr.startswith("error:") and "cannot reach" in res.stderr


def test_a_served_draft_needs_beta_1_without_attentions(served):
    res = CliRunner().invoke(app, ["solve", "--draft", served, "--target", served, "--k", "1",
                                   "q"])  # fmt: skip
    assert res.exit_code == 2 and "set beta=1" in res.stderr, res.output
