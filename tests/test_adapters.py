"""Bring-your-own step functions as draft and target."""

import pytest
import torch

from specguard_graph import (
    CallableStepModel,
    ConfigError,
    SpecGuardConfig,
    StepOutput,
    build_graph,
)

Q = {"question": "What is 2 + 3?"}


def scripted_draft(logprob: float):
    def fn(prompt, n, *, delimiter, max_new_tokens, temperature, seed):
        assert prompt.endswith("Answer:\n") or delimiter in prompt
        return [StepOutput(text=f"step {seed}", token_logprobs=[-0.1, logprob])] * n

    return fn


def plain_target(prompt, n, *, delimiter, max_new_tokens, temperature, seed):
    return [f"target step {prompt.count(delimiter)}"] * n


def test_logprob_only_draft_routes_on_its_log_probs():
    draft = CallableStepModel(scripted_draft(-0.5), name="api-draft", has_logprobs=True)
    target = CallableStepModel(plain_target, name="api-target")
    cfg = SpecGuardConfig(k=1, beta=1.0, tau=0.9, max_steps=2)  # -0.5 -> 0.95 >= 0.9
    out = build_graph(draft, target, config=cfg).compile().invoke(Q)
    assert [s["source"] for s in out["steps"]] == ["draft", "draft"]
    assert (
        out["steps"][0]["logprob"] == pytest.approx(-0.5) and out["steps"][0]["grounding"] is None
    )
    draft = CallableStepModel(scripted_draft(-3.0), name="api-draft", has_logprobs=True)
    prompts = []

    def recording_target(prompt, n, **kw):
        prompts.append(prompt)
        return plain_target(prompt, n, **kw)

    target = CallableStepModel(recording_target)
    out = build_graph(draft, target, config=cfg).compile().invoke(Q)
    assert [s["source"] for s in out["steps"]] == ["target", "target"]
    # the second call continues from the accepted first step
    assert prompts[1] == prompts[0] + out["steps"][0]["text"] + "\n\n"


def test_attention_only_draft_routes_on_grounding():
    def fn(prompt, n, *, delimiter, max_new_tokens, temperature, seed):
        att = torch.zeros(1, 2, 3 + 2)
        att[:, :, 0] = 1.0  # all on the prefix: grounding 1 - 0.5 = 0.5 with one layer
        return [StepOutput(text="grounded", attentions=[att], prefix_len=3)] * n

    draft = CallableStepModel(fn, has_attentions=True)
    target = CallableStepModel(plain_target)
    cfg = SpecGuardConfig(k=1, beta=0.0, tau=0.5, grounding_range=(0.0, 1.0), max_steps=1)
    out = build_graph(draft, target, config=cfg).compile().invoke(Q)
    (step,) = out["steps"]
    assert step["source"] == "draft" and step["grounding"] == pytest.approx(0.5)
    out = build_graph(draft, target, config=cfg.replace(tau=0.6)).compile().invoke(Q)
    assert out["steps"][0]["source"] == "target"


def test_missing_signals_must_be_switched_off_explicitly():
    target = CallableStepModel(plain_target)
    no_lp = CallableStepModel(plain_target, name="bare", has_attentions=True)
    with pytest.raises(ConfigError, match="beta=0"):
        build_graph(no_lp, target, config=SpecGuardConfig(k=1))
    no_att = CallableStepModel(plain_target, name="bare", has_logprobs=True)
    with pytest.raises(ConfigError, match="beta=1"):
        build_graph(no_att, target, config=SpecGuardConfig(k=1))
    with pytest.raises(ConfigError, match="no signal"):
        build_graph(CallableStepModel(plain_target), target, config=SpecGuardConfig(k=1))
    with pytest.raises(ConfigError, match="local Hugging Face target"):
        build_graph(no_att, target, config=SpecGuardConfig(k=1, beta=1, signal_model="target"))


def test_callable_draft_with_a_local_target_and_the_vote(tiny):
    texts = ["x = 5", "x = 5", "something else"]

    def fn(prompt, n, *, delimiter, max_new_tokens, temperature, seed):
        return [StepOutput(text=t, token_logprobs=[-0.2]) for t in texts[:n]]

    draft = CallableStepModel(fn, has_logprobs=True)
    cfg = SpecGuardConfig(k=3, beta=1.0, tau=0.5, max_steps=2, max_step_tokens=8)
    out = build_graph(draft, tiny.target, embedder=tiny.embedder, config=cfg).compile().invoke(Q)
    assert [s["text"] for s in out["steps"]] == ["x = 5", "x = 5"]
    assert out["steps"][0]["selected"] == 0
