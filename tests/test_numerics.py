"""CPU weight formats compute one model: the same scores however tokens are fed."""

import copy

import pytest
import torch

from specguard_graph import ModelLoadError
from specguard_graph.models.local import numerics
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.steps import ReasoningSteps
from specguard_graph.testing import FEEDINGS, batch_of_4, feed, greedy, tiny_lm

FAITHFUL = ("int8", "int8x2")  # float32 is not: MKL rounds a 1-row GEMM differently
TEXT = "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May."


@pytest.fixture(scope="module")
def base() -> LocalCausalLM:
    return tiny_lm(layers=4, hidden=128, heads=4, seed=5)


def formatted(base: LocalCausalLM, fmt: str) -> LocalCausalLM:
    return LocalCausalLM(numerics.apply(copy.deepcopy(base.model), fmt, "cpu"), base.tokenizer)


@pytest.mark.parametrize("fmt", ["int8", "int8x2"])
def test_a_token_scores_the_same_however_it_is_fed(base, fmt):
    lm = formatted(base, fmt)
    ids = lm.encode(TEXT) * 2  # 50+ tokens: several chunks of 16
    others = [lm.encode("How many clips did Natalia sell?"), lm.encode("Step 1: 48 / 2 = 24.")]
    one, _ = feed(lm.model, [ids], "one forward")
    for feeding in FEEDINGS[1:]:
        rows = batch_of_4(ids, others * 2) if feeding == "row of 4" else [ids]
        lp, _ = feed(lm.model, rows, feeding)
        assert torch.equal(lp[:1], one), feeding  # bit for bit, not merely close
    conts = {
        tuple(greedy(lm.model, batch_of_4(ids, others * 2) if f == "row of 4" else [ids], f, 12))
        for f in FEEDINGS
    }
    assert len(conts) == 1


@pytest.mark.parametrize("fmt", FAITHFUL)
def test_greedy_steps_do_not_depend_on_k(base, fmt):
    """k greedy rows sampled together are each the single-row greedy step."""
    lm = formatted(base, fmt)
    spec = ReasoningSteps()
    prompt = spec.render_prompt("What is 2 + 3?", lm.tokenizer)
    kw = dict(delimiter="\x00never", max_new_tokens=24, temperature=0.0)
    one = lm.sample(lm.new_prefix(prompt), n=1, **kw).candidates[0]
    four = lm.sample(lm.new_prefix(prompt), n=4, **kw).candidates
    assert all(c.token_ids == one.token_ids for c in four)
    assert all(c.token_logprobs == one.token_logprobs for c in four)


@pytest.mark.parametrize("fmt", FAITHFUL)
def test_gate_and_up_as_one_matrix_compute_the_same_bits(base, fmt, monkeypatch):
    fused = formatted(base, fmt)
    assert all(isinstance(la.mlp, numerics.GatedMLP) for la in fused.model.model.layers)
    monkeypatch.setattr(numerics, "GATED_MLPS", ())
    apart = formatted(base, fmt)
    assert not any(isinstance(m, numerics.GatedMLP) for m in apart.model.modules())
    ids = [fused.encode(TEXT)]
    for feeding in ("one forward", "token by token"):
        assert torch.equal(feed(fused.model, ids, feeding)[0], feed(apart.model, ids, feeding)[0])


def test_int8_weights_are_per_channel_and_close_to_float32(base):
    lin = base.model.model.layers[0].mlp.down_proj
    q = numerics.Int8WeightOnlyLinear(lin)
    w = lin.weight.detach()
    # the scale is a bfloat16 value (applied exactly by the kernel), one per output channel
    assert q.scale.dtype == torch.bfloat16 and q.scale.shape == (w.shape[0],)
    assert int(q.int8_weight().abs().max()) <= 127
    err = (q.dequantized() - w).abs().amax(dim=1)
    assert torch.all(err <= q.scale.float() / 2 + 1e-7)  # rounding, never clipping
    x = torch.randn(3, w.shape[1])
    ref = x.bfloat16().float() @ q.dequantized().T
    torch.testing.assert_close(q(x), ref, rtol=1e-2, atol=1e-2)
    assert q(x).dtype == torch.float32


def test_a_second_int8_term_keeps_the_weight_to_bfloat16_precision(base):
    lin = base.model.model.layers[0].mlp.down_proj
    w = lin.weight.detach()
    one = numerics.Int8WeightOnlyLinear(lin)
    two = numerics.Int8WeightOnlyLinear(lin, terms=2)
    err1 = float((one.dequantized() - w).abs().max())
    err2 = float((two.dequantized() - w).abs().max())
    assert err2 < err1 / 50
    x = torch.randn(5, w.shape[1])
    torch.testing.assert_close(two(x), x.bfloat16().float() @ w.T, rtol=2e-2, atol=2e-2)


def test_the_head_is_quantised_and_the_embedding_stays_float32(base):
    lm = formatted(base, "int8")
    assert isinstance(lm.model.lm_head, numerics.Int8WeightOnlyLinear)
    assert lm.model.model.embed_tokens.weight.dtype == torch.float32


def test_unknown_format_or_device_is_a_load_error(tmp_path):
    with pytest.raises(ValueError, match="quantize must be one of"):
        numerics.apply(torch.nn.Linear(2, 2), "int3", "cpu")
    with pytest.raises(ValueError, match="CPU weight format"):
        numerics.apply(torch.nn.Linear(2, 2), "int8", "cuda")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError):
        LocalCausalLM.load(tmp_path, quantize="int8")


@pytest.mark.parametrize("fmt", FAITHFUL)
def test_log_probs_captured_while_sampling_are_a_scoring_forwards_bit_for_bit(base, fmt):
    """Sampling (k rows, one token per forward) and scoring (one row, the whole step in one
    forward) use one log-prob formula on row-invariant logits: the same bits, on every CPU."""
    lm = formatted(base, fmt)
    prompt = ReasoningSteps().render_prompt("What is 2 + 3?", lm.tokenizer)
    kw = dict(delimiter="\x00never", max_new_tokens=24, temperature=1.0, seed=3)
    s = lm.sample(lm.new_prefix(prompt), n=3, **kw)
    for c in s.candidates:
        lps, _ = lm.score(lm.new_prefix(prompt), c.token_ids[: c.n_scored], frozenset())
        assert lps == c.token_logprobs


def test_the_log_prob_formula_is_row_invariant_at_a_real_vocabulary():
    """151,936 logits a row, as the Qwen pair has: a row's log-prob is the same alone, among
    k rows, or among a step's positions, where log_softmax and logit - logsumexp would differ
    from each other by ~1e-5."""
    from specguard_graph.models.local.decoding import token_logprobs

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(17, 151_936, generator=g) * 4
    ids = torch.randint(0, 151_936, (17,), generator=g)
    every = token_logprobs(logits, ids)
    for lo, hi in [(0, 1), (0, 2), (3, 7), (16, 17)]:
        assert torch.equal(token_logprobs(logits[lo:hi], ids[lo:hi]), every[lo:hi])
    ref = (logits.double().gather(1, ids[:, None])[:, 0] - logits.double().logsumexp(-1)).float()
    torch.testing.assert_close(every, ref, rtol=0, atol=1e-5)
