"""End to end on the embedded Qwen2.5-Coder 0.5B/1.5B pair (int8 on CPU)."""

import pytest

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.steps import ReasoningSteps

pytestmark = pytest.mark.real
QUESTION = "A farmer has 3 baskets with 4 apples each. He gives away 5 apples. How many are left?"


def test_real_pair_draft_branch_then_target_branch(real_pair):
    draft, target, embedder = real_pair
    cfg = SpecGuardConfig(k=2, max_steps=2, max_step_tokens=24, tau=0.0, seed=0)
    out = (
        build_graph(draft, target, embedder=embedder, config=cfg)
        .compile()
        .invoke({"question": QUESTION})
    )
    assert [s["source"] for s in out["steps"]] == ["draft", "draft"][: len(out["steps"])]
    for s in out["steps"]:
        assert s["text"].strip(), "a real model writes real text"
        assert 0.0 < s["grounding"] <= 0.875 and s["logprob"] < 0.0
    assert out["counts"].get("target_tokens", 0) == 0

    cfg = cfg.replace(k=1, max_steps=1, tau=1.0)
    out = build_graph(draft, target, config=cfg).compile().invoke({"question": QUESTION})
    (step,) = out["steps"]
    assert step["source"] == "target" and step["text"].strip()
    assert out["counts"]["target_tokens"] > 0


def test_real_draft_signals_equal_a_scoring_forward(real_pair):
    """fp32: the captured signals are exactly a separate forward's. int8 (the CPU default):
    torch's dynamic quantisation scales activations per call, so numbers shift with the batch
    (k rows vs one scoring pass) but stay close to the fp32 model's."""
    from specguard_graph.models.loading import load_lm

    int8, _, _ = real_pair
    fp32 = load_lm("draft", quantize="none")
    spec = ReasoningSteps()
    layers = fp32.capture_layers(3)

    def sampled(lm):
        pc = lm.new_prefix(spec.render_prompt(QUESTION, lm.tokenizer))
        return lm.sample(
            pc, n=2, delimiter="\n\n", max_new_tokens=16, temperature=0.7, capture_layers=layers
        )

    s = sampled(fp32)
    c = s.candidates[0]
    fresh = fp32.new_prefix(spec.render_prompt(QUESTION, fp32.tokenizer))
    lps, atts = fp32.score(fresh, c.token_ids[: c.n_scored], layers)
    assert lps == pytest.approx(c.token_logprobs, abs=1e-3)
    for a, b in zip(s.attentions(0), atts, strict=True):
        assert (a - b).abs().max() < 1e-3

    q = sampled(int8).candidates[0]
    fresh = fp32.new_prefix(spec.render_prompt(QUESTION, fp32.tokenizer))
    ref, _ = fp32.score(fresh, q.token_ids[: q.n_scored], layers)
    diffs = sorted(abs(a - b) for a, b in zip(ref, q.token_logprobs, strict=True))
    assert diffs[len(diffs) // 2] < 0.2, diffs
