"""The graph: wiring, both routing branches, stop rules, events, state hygiene."""

import itertools
import json

import pytest

from specguard_graph import NODES, ConfigError, InputError, SpecGuardConfig, build_graph
from specguard_graph.graph import route_after_ask, route_after_decide, route_after_step
from specguard_graph.steps import ReasoningSteps

Q = {"question": "Natalia sold 48 clips in April and half as many in May. How many in total?"}


def run(tiny, stream=False, steps=None, **cfg):
    base = dict(k=3, max_steps=4, max_step_tokens=16, seed=1)
    base.update(cfg)
    config = SpecGuardConfig.make(**base)
    graph = build_graph(
        tiny.draft, tiny.target, embedder=tiny.embedder, steps=steps, config=config
    ).compile()
    if not stream:
        return graph.invoke(Q)
    events, out = [], None
    for mode, data in graph.stream(Q, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(data)
        else:
            out = data
    return out, events


def test_graph_has_exactly_its_nodes_and_parallel_scorers(tiny):
    g = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder)
    assert set(g.nodes) == set(NODES)
    drawn = g.compile().get_graph()
    edges = {(e.source, e.target) for e in drawn.edges}
    assert {
        ("select_consistent", "score_grounding"),
        ("select_consistent", "score_logprob"),
        ("score_grounding", "decide"),
        ("score_logprob", "decide"),
        ("decide", "target_recompute"),
        ("decide", "draft_k"),
        ("decide", "commit_step"),
        ("decide", "ask_person"),
        ("commit_step", "draft_k"),
        ("target_recompute", "draft_k"),
        ("ask_person", "commit_step"),
        ("ask_person", "target_recompute"),
    } <= edges


def test_one_compiled_graph_takes_tau_and_k_per_run(tiny):
    """Per-run settings travel in the runtime context: no rebuild, the build-time config is
    the default, and a bad or impossible per-run value is a ConfigError naming it."""
    config = SpecGuardConfig(k=2, max_steps=3, max_step_tokens=12, seed=1, tau=0.5)
    graph = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder, config=config).compile()
    low = graph.invoke(Q, context={"tau": 0.0})
    high = graph.invoke(Q, context={"tau": 1.0})
    assert [s["source"] for s in low["steps"]] == ["draft"] * 3
    assert [s["source"] for s in high["steps"]] == ["target"] * 3
    assert all(s["reason"].endswith("< tau 1.0") for s in high["steps"])
    one = graph.invoke(Q, context={"k": 1, "tau": 0.0, "max_steps": 2})
    assert [len(s["candidates"]) for s in one["steps"]] == [1, 1]
    assert [len(s["candidates"]) for s in low["steps"]] == [2, 2, 2]  # default k again
    with pytest.raises(ConfigError, match="tau"):
        graph.invoke(Q, context={"tau": -0.5})
    no_vote = build_graph(tiny.draft, tiny.target, config=config.replace(k=1)).compile()
    with pytest.raises(ConfigError, match="embedder"):
        no_vote.invoke(Q, context={"k": 3})


def test_tau_zero_accepts_every_draft_step_without_target_compute(tiny):
    out = run(tiny, tau=0.0)
    assert [s["source"] for s in out["steps"]] == ["draft"] * len(out["steps"])
    assert all(s["accepted"] for s in out["steps"])
    assert out["counts"].get("target_tokens", 0) == 0
    assert out["timing"].get("target_s", 0) == 0
    # the target was never run: not even a catch-up prefill
    assert all(s["fed"]["target_prefill"] == 0 for s in out["steps"])


def test_tau_one_recomputes_every_step_with_the_target(tiny):
    out = run(tiny, tau=1.0)
    steps = out["steps"]
    assert [s["source"] for s in steps] == ["target"] * len(steps)
    assert all(not s["accepted"] and s["reason"].startswith("score") for s in steps)
    assert out["counts"]["target_steps"] == len(steps)
    assert out["counts"]["target_tokens"] == sum(s["tokens"] for s in steps)


def test_routing_functions():
    assert route_after_decide({"decision": {"accepted": False}}) == "target_recompute"
    assert route_after_decide({"decision": {"accepted": False, "ask": True}}) == "ask_person"
    assert route_after_decide({"decision": {"accepted": True}}) == "commit_step"
    assert route_after_step({}) == "draft_k"
    assert route_after_step({"status": "max_steps"}) == "__end__"
    asked = {"step": 1, "accepted": True}
    assert route_after_ask({"steps": [{}], "decision": asked}) == "commit_step"
    assert route_after_ask({"steps": [{}], "decision": {**asked, "accepted": False}}) == (
        "target_recompute"
    )
    assert route_after_ask({"steps": [{}, {}], "decision": asked}) == "draft_k"  # edit is in
    assert route_after_ask({"steps": [{}, {}], "decision": asked, "status": "final"}) == "__end__"


def test_trace_matches_the_json_contract(tiny):
    out = run(tiny, tau=0.3)
    json.dumps(out)  # JSON-like state only
    assert out["status"] in ("final", "max_steps", "max_total_tokens")
    assert set(out["timing"]) >= {"total_s", "draft_s", "verify_s"}
    for i, s in enumerate(out["steps"]):
        assert s["index"] == i
        assert {"text", "source", "grounding", "logprob", "score", "accepted", "candidates"} <= set(
            s
        )
        assert len(s["candidates"]) == 3
        if s["score"] is not None:
            assert 0.0 <= s["score"] <= 1.0
            assert 0.0 <= s["grounding"] <= 1 - 0.5**3 + 1e-9
    assert out["counts"]["steps"] == len(out["steps"])
    assert out["text"].startswith(out["steps"][0]["text"])


def test_max_steps_and_max_total_tokens_stop_with_a_status(tiny):
    out = run(tiny, tau=0.0, max_steps=2)
    assert out["status"] == "max_steps" and len(out["steps"]) == 2
    out = run(tiny, tau=0.0, max_steps=40, max_step_tokens=10, max_total_tokens=30)
    assert out["status"] == "max_total_tokens"
    assert sum(s["tokens"] for s in out["steps"]) <= 30


def test_final_step_ends_the_run_and_extracts_the_answer(tiny):
    class EveryStepFinal(ReasoningSteps):
        def is_final(self, step, *, eos):
            return True

        def extract_answer(self, text):
            return "42"

    out = run(tiny, tau=0.0, steps=EveryStepFinal())
    assert out["status"] == "final" and len(out["steps"]) == 1 and out["answer"] == "42"
    out = run(tiny, tau=1.0, steps=EveryStepFinal())
    assert out["status"] == "final" and out["steps"][0]["source"] == "target"


def test_every_node_streams_its_event(tiny):
    out, events = run(tiny, stream=True, tau=0.5, max_steps=3)
    kinds = [e["event"] for e in events]
    for kind in ("draft", "select", "grounding", "logprob", "decision", "step", "done"):
        assert kind in kinds
    drafts = [e for e in events if e["event"] == "draft"]
    assert all(len(e["candidates"]) == 3 for e in drafts)
    decisions = [e for e in events if e["event"] == "decision"]
    assert [d["accepted"] for d in decisions] == [s["source"] == "draft" for s in out["steps"]]


def test_signal_model_target_scores_with_one_target_forward(tiny):
    out = run(tiny, tau=0.0, signal_model="target", max_steps=3)
    steps = out["steps"]
    prompt_minus_one = steps[0]["fed"]["draft_prefill"]
    for s in steps:
        assert s["source"] == "draft" and s["fed"]["target_decode"] == 0
        if s["ended"] == "eos":
            continue
        # one forward over [last context token] + scored tokens; the accepted step's KV is
        # then reused, so nothing of the prefix is fed again at the next step
        expected = s["tokens"] + (prompt_minus_one if s["index"] == 0 else 0)
        assert s["fed"]["target_prefill"] == expected


def test_prefix_is_never_reencoded(tiny):
    out = run(tiny, tau=0.6, max_steps=6)
    steps = out["steps"]
    assert {s["source"] for s in steps} == {"draft", "target"}, "needs both branches"
    prompt_minus_one = steps[0]["fed"]["draft_prefill"]
    unseen_by_target, target_started = 0, False
    for i, s in enumerate(steps):
        if i:
            prev = steps[i - 1]
            # the draft is fed only a step the target wrote (its own are adopted from KV)
            assert s["fed"]["draft_prefill"] == (
                prev["tokens"] if prev["source"] == "target" else 0
            )
        if s["source"] == "target":
            # the target catches up lazily, in one prefill of exactly what it has not seen
            first = 0 if target_started else prompt_minus_one
            assert s["fed"]["target_prefill"] == first + unseen_by_target
            unseen_by_target, target_started = 0, True
        else:
            assert s["fed"]["target_prefill"] == 0
            unseen_by_target += s["tokens"]


def test_k1_needs_no_embedder_and_k2_does(tiny):
    cfg = SpecGuardConfig(k=1, max_steps=2, max_step_tokens=8)
    out = build_graph(tiny.draft, tiny.target, config=cfg).compile().invoke(Q)
    assert len(out["steps"]) == 2 and all(len(s["candidates"]) == 1 for s in out["steps"])
    with pytest.raises(ConfigError, match="embedder"):
        build_graph(tiny.draft, tiny.target, config=cfg.replace(k=2))


@pytest.mark.parametrize("question", ["", "   ", 17])
def test_bad_questions_raise_a_typed_error(tiny, question):
    graph = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder).compile()
    with pytest.raises(InputError):
        graph.invoke({"question": question})


def test_a_lost_session_is_rebuilt_from_the_state(tiny):
    """A checkpoint resumed in a new process has no KV caches: the run must continue."""
    from langgraph.checkpoint.memory import InMemorySaver

    config = SpecGuardConfig(k=2, max_steps=4, max_step_tokens=12, tau=0.5)
    builder = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder, config=config)
    graph = builder.compile(
        checkpointer=InMemorySaver(), interrupt_after=["commit_step", "target_recompute"]
    )
    thread = {"configurable": {"thread_id": "t1"}}
    graph.invoke(Q, thread)
    first = graph.get_state(thread).values["steps"]
    # a second graph object = new sessions, as after a restart
    graph2 = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder, config=config).compile(
        checkpointer=graph.checkpointer
    )
    out = graph2.invoke(None, thread)
    assert out["steps"][: len(first)] == first
    assert len(out["steps"]) == 4


def test_interrupt_on_reject_lets_the_caller_accept_edit_or_recompute(tiny):
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    cfg = SpecGuardConfig(k=2, tau=1.0, max_steps=3, max_step_tokens=10,
                          interrupt_on_reject=True)  # fmt: skip
    graph = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder, config=cfg).compile(
        checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "hitl"}}
    out = graph.invoke(Q, thread)
    (pause,) = out["__interrupt__"]
    assert (
        pause.value["step"] == 0 and "score" in pause.value and pause.value["candidate"] is not None
    )
    out = graph.invoke(Command(resume="accept"), thread)
    assert out["__interrupt__"][0].value["step"] == 1
    out = graph.invoke(Command(resume={"edit": "So May had 24 clips."}), thread)
    assert out["__interrupt__"][0].value["step"] == 2
    out = graph.invoke(Command(resume="recompute"), thread)
    assert "__interrupt__" not in out
    sources = [s["source"] for s in out["steps"]]
    assert sources == ["draft", "human", "target"]
    assert out["steps"][0]["reason"] == "accepted by the caller"
    assert out["steps"][1]["text"] == "So May had 24 clips."
    assert "So May had 24 clips.\n\n" in out["text"]


def test_adaptive_draws_the_vote_only_inside_the_band(tiny):
    # band 0: every first candidate is decided at once; one candidate per step
    out, events = run(tiny, stream=True, k=3, tau=0.6, adaptive_band=0.0, max_steps=3)
    assert all(len(s["candidates"]) == 1 for s in out["steps"])
    assert not any(e.get("widen") for e in events if e["event"] == "decision")
    # band 1: every step is uncertain; the other k - 1 are drawn and the vote runs on all k
    out, events = run(tiny, stream=True, k=3, tau=0.6, adaptive_band=1.0, max_steps=3)
    assert all(len(s["candidates"]) == 3 for s in out["steps"])
    drafts = [e for e in events if e["event"] == "draft"]
    assert [len(e["candidates"]) for e in drafts] == [1, 3] * len(out["steps"])
    widened = [e for e in events if e["event"] == "decision" and e.get("widen")]
    assert len(widened) == len(out["steps"])
    assert route_after_decide({"decision": {"accepted": False, "widen": True}}) == "draft_k"
    # the first candidate stays candidate 0: the vote extends the draw, it does not redo it
    first = [e["candidates"][0] for e in drafts]
    assert first[0::2] == first[1::2]
    # an accepted candidate from either draw is adopted from its own KV rows
    steps = out["steps"]
    for prev, cur in itertools.pairwise(steps):
        if prev["source"] == "draft":
            assert cur["fed"]["draft_prefill"] == 0


def test_resuming_a_paused_step_emits_no_event_twice(tiny):
    """Only ask_person re-runs on resume, and it emits nothing before it pauses."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    cfg = SpecGuardConfig(k=2, tau=1.0, max_steps=2, max_step_tokens=10, interrupt_on_reject=True)
    graph = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder, config=cfg).compile(
        checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "once"}}
    events, command = [], Q
    for _ in range(3):
        events += list(graph.stream(command, thread, stream_mode="custom"))
        command = Command(resume="recompute")
    decisions = [e["step"] for e in events if e["event"] == "decision"]
    steps = [e["index"] for e in events if e["event"] == "step"]
    assert decisions == [0, 1] and steps == [0, 1]
    assert "ask" not in events[[e["event"] for e in events].index("decision")]


def test_beta_one_captures_no_attention_and_scores_no_grounding(tiny, monkeypatch):
    seen = []
    sample = type(tiny.draft).sample

    def spy(self, pc, **kw):
        seen.append(kw.get("capture_layers"))
        return sample(self, pc, **kw)

    monkeypatch.setattr(type(tiny.draft), "sample", spy)
    out = run(tiny, beta=1.0, tau=0.0)
    assert seen and all(not layers for layers in seen)
    assert all(s["grounding"] is None and s["source"] == "draft" for s in out["steps"])
    seen.clear()
    run(tiny, beta=0.3, tau=0.0)
    assert any(layers for layers in seen)  # the paper's mix captures as it samples


def test_beta_one_scores_a_step_on_the_target_without_attention(tiny, monkeypatch):
    seen = []
    score = type(tiny.target).score

    def spy(self, pc, ids, layers):
        seen.append(layers)
        return score(self, pc, ids, layers)

    monkeypatch.setattr(type(tiny.target), "score", spy)
    out = run(tiny, beta=1.0, tau=0.0, signal_model="target")
    assert seen and all(not layers for layers in seen)
    assert all(s["logprob"] is not None for s in out["steps"] if s["tokens"] > 1)
    seen.clear()
    run(tiny, beta=0.3, tau=0.0, signal_model="target")
    assert any(layers for layers in seen)
