"""Served models on a real vLLM server (the CPU build, `make vllm`), serving the embedded 0.5B's
converted directory on 127.0.0.1, started and stopped here. Skipped when the vLLM environment
is absent, unless SPECGUARD_REQUIRE_VLLM=1 (`make test-engines`, which CI runs) says it must
be there."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.errors import InputError, ModelLoadError
from specguard_graph.models.served.child_server import free_port
from specguard_graph.models.served.client import ServedStepModel
from specguard_graph.models.served.verify import verify_served
from specguard_graph.models.served.vllm import VllmServer, vllm_venv
from specguard_graph.models.served.vllm_env import is_built

pytestmark = pytest.mark.engines

Q = {"question": "What is 2 + 3?"}
ARITH = "A shop sells 3 pens for $4. How much do 12 pens cost? Think step by step."


def _model_dir():
    from specguard_graph.models.install.registry import model_dir

    path = model_dir("draft")
    if not path.is_dir():
        pytest.fail(f"{path} is missing: run `specguard models install`")
    return path


def _need_vllm():
    if not is_built(vllm_venv()):
        if os.environ.get("SPECGUARD_REQUIRE_VLLM") == "1":
            pytest.fail(f"no vLLM environment at {vllm_venv()}: run `make vllm`")
        pytest.skip("no vLLM environment (`make vllm`; `make test-engines` requires it)")


@pytest.fixture(scope="module")
def vllm():
    _need_vllm()
    with VllmServer(_model_dir()) as url:
        yield url


def _prefix(model, question=ARITH):
    prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": question}])
    return model.new_prefix(prompt)


def test_the_engine_renders_its_own_chat_template_tools_included(vllm):
    """vLLM publishes no template on a completions route: it renders it (`/tokenize` with
    messages), and the prompt is exactly what the local tokenizer renders. (A tool without a
    description is the one difference: vLLM's request model renders `"description": null`.)"""
    from transformers import AutoTokenizer

    model = ServedStepModel(vllm)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fn = {"name": "add", "description": "Add.", "parameters": schema}
    tools = [{"type": "function", "function": fn}]
    msgs = [{"role": "user", "content": "Add 2."}]
    local = AutoTokenizer.from_pretrained(_model_dir())
    want = local.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    assert model.tokenizer.apply_chat_template(msgs, tools=tools) == want


def test_a_step_cut_at_the_delimiter_drops_the_cut_texts_tokens(vllm):
    """vLLM returns the stop string's tokens and log-probs with a stopped completion; the
    candidate keeps only those of its own text, less the token that carries the delimiter
    (here `:\n\n`), which a local step does not score either."""
    model = ServedStepModel(vllm)
    s = model.sample(_prefix(model), n=1, delimiter="\n\n", max_new_tokens=80, temperature=0.0)
    cand = s.candidates[0]
    assert cand.ended == "delimiter" and cand.text and "\n" not in "".join(cand.pieces)
    assert (
        cand.text.startswith("".join(cand.pieces))
        and len(cand.text) - len("".join(cand.pieces)) < 4
    )
    assert len(cand.token_logprobs) == len(cand.pieces) > 3


def test_eos_and_the_delimiter_are_told_apart(vllm):
    model = ServedStepModel(vllm)
    pc = _prefix(model, "Say hi.")
    s = model.sample(pc, n=1, delimiter="\n\n", max_new_tokens=40, temperature=0.0)
    assert s.candidates[0].ended == "eos" and s.candidates[0].text.strip()


def test_k_4_samples_in_one_request_and_greedy_k_is_one_sample(vllm):
    model = ServedStepModel(vllm)
    pc = _prefix(model)
    hot = model.sample(pc, n=4, delimiter="\n\n", max_new_tokens=24, temperature=1.0, seed=5)
    assert len({c.text for c in hot.candidates}) > 1
    # vLLM refuses n > 1 at temperature 0; greedy samples are one sample, asked for once
    cold = model.sample(pc, n=4, delimiter="\n\n", max_new_tokens=24, temperature=0.0)
    assert len(cold.candidates) == 4 and len({c.text for c in cold.candidates}) == 1


def test_a_k_4_sampled_run_with_a_served_draft(vllm, tiny):
    cfg = SpecGuardConfig(k=4, beta=1.0, tau=0.5, temperature=0.8, max_steps=1,
                          max_step_tokens=16, seed=4)  # fmt: skip
    graph = build_graph(ServedStepModel(vllm), tiny.target, embedder=tiny.embedder, config=cfg)
    step = graph.compile().invoke({"question": ARITH})["steps"][0]
    assert len(step["candidates"]) == 4 and step["logprob"] is not None


def test_a_given_step_is_scored_by_prompt_logprobs_as_it_was_generated(vllm):
    """One echo request scores a step: the log-probs the engine gave while writing it, within
    bfloat16's rounding of a prefill against a decode."""
    model = ServedStepModel(vllm)
    assert model.can_score
    pc = _prefix(model)
    cand = model.sample(pc, n=1, delimiter="\n\n", max_new_tokens=24, temperature=0.0).candidates[0]
    lps, atts = model.score(pc, model.encode(cand.text), frozenset())
    assert atts == [] and len(lps) >= len(cand.token_logprobs) > 3  # the text's last token too
    assert max(abs(a - b) for a, b in zip(lps, cand.token_logprobs, strict=False)) < 0.1


def test_target_side_scoring_runs_the_graph_on_a_served_target(vllm, tiny):
    target = ServedStepModel(vllm)
    cfg = SpecGuardConfig(k=2, beta=1.0, tau=0.0, signal_model="target", max_steps=2,
                          max_step_tokens=16, seed=2)  # fmt: skip
    out = build_graph(tiny.draft, target, embedder=tiny.embedder, config=cfg).compile().invoke(Q)
    assert [s["source"] for s in out["steps"]] == ["draft"] * len(out["steps"])
    assert all(s["logprob"] is not None and s["logprob"] <= 0 for s in out["steps"])


def test_a_served_target_verifies_a_rejected_step_and_writes_its_own_greedy_step(vllm):
    """The candidate the target agrees with costs one request; a bent one keeps the agreed
    prefix and the target writes the rest: the same text as its plain greedy step."""
    model = ServedStepModel(vllm)
    pc = _prefix(model)
    own = model.sample(pc, n=1, delimiter="\n\n", max_new_tokens=60, temperature=0.0)
    text = own.candidates[0].text
    same, stats = verify_served(model, pc, candidate=text, delimiter="\n\n", max_new_tokens=60)
    assert same.candidates[0].text == text and stats.forwards == 1 and stats.kept > 0
    bent = text[: len(text) // 2] + " banana banana"
    fixed, stats = verify_served(model, pc, candidate=bent, delimiter="\n\n", max_new_tokens=60)
    assert fixed.candidates[0].text == text and stats.forwards == 2
    assert 0 < stats.kept < stats.candidate


def test_verify_and_rewrite_give_the_same_run_on_a_served_target(vllm, tiny):
    target = ServedStepModel(vllm)
    base = SpecGuardConfig(k=1, beta=1.0, tau=1.0, max_steps=2, max_step_tokens=16, seed=1)
    outs = {}
    for fallback in ("verify", "rewrite"):
        cfg = base.replace(fallback=fallback)
        graph = build_graph(tiny.draft, target, embedder=tiny.embedder, config=cfg).compile()
        outs[fallback] = graph.invoke({"question": ARITH})
    assert [s["fallback"] for s in outs["verify"]["steps"]] == ["verify"] * 2
    assert outs["verify"]["text"] == outs["rewrite"]["text"]


def test_a_greedy_run_with_draft_and_target_served(vllm):
    draft, target = ServedStepModel(vllm), ServedStepModel(vllm)
    cfg = SpecGuardConfig(k=1, beta=1.0, tau=0.5, max_steps=2, max_step_tokens=24, seed=3)
    out = build_graph(draft, target, config=cfg).compile().invoke({"question": ARITH})
    assert out["status"] in ("final", "max_steps") and out["steps"]
    assert all(s["logprob"] is not None for s in out["steps"])
    assert out["text"].startswith(out["steps"][0]["text"])


def test_four_concurrent_runs_stay_apart(vllm, tiny):
    draft, target = ServedStepModel(vllm), ServedStepModel(vllm)
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


def test_what_vllm_refuses_is_one_line(vllm):
    with pytest.raises(ModelLoadError, match="no model 'nope'") as info:
        ServedStepModel(vllm, model="nope").sample(
            ServedStepModel(vllm).new_prefix("q"), n=1, delimiter="\n", max_new_tokens=4,
            temperature=0.0)  # fmt: skip
    assert "\n" not in str(info.value)
    model = ServedStepModel(vllm)
    long = " ".join(f"w{i}" for i in range(3000))  # past --max-model-len 2048
    with pytest.raises(InputError, match=r"refused the request.*context length") as info:
        model.sample(model.new_prefix(long), n=1, delimiter="\n", max_new_tokens=4,
                     temperature=0.0)  # fmt: skip
    assert "\n" not in str(info.value)
    with pytest.raises(NotImplementedError, match="no attention"):
        model.score(model.new_prefix("q"), model.encode("a"), frozenset({0}))


def test_a_run_whose_vllm_server_dies_resumes_from_its_checkpoint(tiny):
    """The engine is killed (SIGKILL) after the first committed step: the run stops with a
    one-line error, and once a new server is up on the same port it resumes from its
    checkpoint with nothing lost."""
    from langgraph.checkpoint.memory import InMemorySaver

    _need_vllm()
    port = free_port()
    server = VllmServer(_model_dir(), port=port)
    url = server.__enter__()
    try:
        draft, target = (ServedStepModel(url, retries=0, timeout=60) for _ in range(2))
        cfg = SpecGuardConfig(k=1, beta=1.0, tau=0.5, max_steps=4, max_step_tokens=16, seed=3)
        graph = build_graph(draft, target, config=cfg).compile(checkpointer=InMemorySaver())
        run = {"configurable": {"thread_id": "t"}}
        with pytest.raises(ModelLoadError, match="cannot reach the server"):
            for update in graph.stream({"question": ARITH}, run, stream_mode="updates"):
                if "commit_step" in update:
                    server.kill()
        kept = graph.get_state(run).values["steps"]
        assert len(kept) == 1
        server.__exit__()
        server = VllmServer(_model_dir(), port=port)
        server.__enter__()
        out = graph.invoke(None, run)
        assert out["steps"][0] == kept[0] and len(out["steps"]) > 1
    finally:
        server.__exit__()
