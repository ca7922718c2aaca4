"""End to end on the embedded Qwen2.5-Coder 0.5B/1.5B pair (on a CPU, the default format: each
model's own GGUF blocks)."""

import pytest
import torch

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.steps import ReasoningSteps

pytestmark = pytest.mark.real
QUESTION = "A farmer has 3 baskets with 4 apples each. He gives away 5 apples. How many are left?"


def test_the_default_format_of_the_installed_pair_is_its_gguf_blocks(real_pair):
    from specguard_graph.bench.run import weights
    from specguard_graph.models.local import int8_kernel

    draft, target, _ = real_pair
    want = "gguf" if int8_kernel.load() is not None else "int8"
    assert weights(draft, target) == f"{want}/{want}"


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
    """The CPU default computes one model: the log-probs and attention rows captured while
    sampling two rows are a separate one-row scoring forward's bit for bit, on AVX2 and
    AVX-512 alike (one log-prob formula, row-invariant kernels), and close to float32's (int8
    weights move near-ties only)."""
    from specguard_graph.models.loading import load_lm

    draft, _, _ = real_pair
    spec = ReasoningSteps()
    layers = draft.capture_layers(3)

    def prefix(lm):
        return lm.new_prefix(spec.render_prompt(QUESTION, lm.tokenizer))

    s = draft.sample(prefix(draft), n=2, delimiter="\n\n", max_new_tokens=16, temperature=0.7,
                     capture_layers=layers)  # fmt: skip
    c = s.candidates[0]
    lps, atts = draft.score(prefix(draft), c.token_ids[: c.n_scored], layers)
    assert lps == c.token_logprobs
    for a, b in zip(s.attentions(0), atts, strict=True):
        assert torch.equal(a, b)

    fp32 = load_lm("draft", quantize="none")
    ref, _ = fp32.score(prefix(fp32), c.token_ids[: c.n_scored], layers)
    diffs = sorted(abs(a - b) for a, b in zip(ref, c.token_logprobs, strict=True))
    assert diffs[len(diffs) // 2] < 0.05, diffs


def test_token_level_sd_reproduces_the_target_exactly(real_pair):
    """Greedy speculative decoding is lossless only if the target's verification forward (many
    tokens) computes what its plain decode (one token) does: the default format must."""
    from specguard_graph.bench.methods import assisted, plain

    draft, target, _ = real_pair
    sd = assisted(target, draft, max_tokens=48)(QUESTION)
    alone = plain(target, max_tokens=48)(QUESTION)
    assert sd["text"] == alone["text"] and sd["tokens"] == alone["tokens"]
