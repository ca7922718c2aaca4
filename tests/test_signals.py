"""Known-answer tests for the signal math (docs/design.md, "Signal math")."""

import math

import pytest
import torch

from specguard_graph import SpecGuardConfig
from specguard_graph.scoring import decide_step, grounding_score, logprob_score, normalise


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_grounding_hand_computed_one_layer():
    # P = 1, S = 2. Residual: Â = 0.5·A + 0.5·I, rows already stochastic.
    # row0: [0.3, 0.7, 0]    -> m(0) = 0.3
    # row1: [0.1, 0.25, 0.65] -> m(1) = 0.1 + 0.25·0 + 0.65·0 = 0.1
    att = t([[[0.6, 0.4, 0.0], [0.2, 0.5, 0.3]]])
    g, per_token = grounding_score([att], 1)
    assert per_token == pytest.approx([0.3, 0.1])
    assert g == pytest.approx(0.1)


def test_grounding_hand_computed_two_layers_rolls_out():
    # m2(0) = 0.3 + 0.7·0.3 = 0.51; m2(1) = 0.1 + 0.25·0.3 + 0.65·0.1 = 0.24
    att = t([[[0.6, 0.4, 0.0], [0.2, 0.5, 0.3]]])
    g, per_token = grounding_score([att, att], 1)
    assert per_token == pytest.approx([0.51, 0.24])
    assert g == pytest.approx(0.24)


def test_grounding_averages_heads():
    att = t([[[1.0, 0.0]], [[0.0, 1.0]]])  # 2 heads, P = 1, S = 1
    g, _ = grounding_score([att], 1)
    assert g == pytest.approx(0.25)  # mean 0.5 on prefix, halved by the residual


@pytest.mark.parametrize("layers", [1, 2, 3, 5])
def test_grounding_maximum_when_all_on_prefix(layers):
    s, p = 3, 4
    att = torch.zeros(2, s, p + s, dtype=torch.float64)
    att[:, :, 0] = 1.0
    g, per_token = grounding_score([att] * layers, p)
    assert g == pytest.approx(1 - 0.5**layers)
    assert per_token == pytest.approx([1 - 0.5**layers] * s)


def test_grounding_zero_when_all_on_self():
    s, p = 3, 2
    att = torch.zeros(4, s, p + s, dtype=torch.float64)
    for i in range(s):
        att[:, i, p + i] = 1.0
    g, _ = grounding_score([att, att, att], p)
    assert g == 0.0


def test_sparsification_zeroes_small_weights_before_the_residual():
    att = t([[[0.005, 0.995]]])
    assert grounding_score([att], 1, sparsify=0.01)[0] == pytest.approx(0.0)
    assert grounding_score([att], 1, sparsify=0.0)[0] == pytest.approx(0.0025)


def test_grounding_min_is_over_tokens():
    att = t([[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])
    g, per_token = grounding_score([att], 1)
    assert per_token == pytest.approx([0.5, 0.0])
    assert g == 0.0


@pytest.mark.parametrize(
    "shape_or_value, prefix, match",
    [((1, 2, 5), 1, "N=5"), ((2, 3), 1, "heads x S x N"), ((1, 0, 1), 1, "at least one")],
)
def test_grounding_rejects_bad_shapes(shape_or_value, prefix, match):
    with pytest.raises(ValueError, match=match):
        grounding_score([torch.zeros(shape_or_value)], prefix)


def test_grounding_rejects_nan():
    att = t([[[float("nan"), 1.0]]])
    with pytest.raises(ValueError, match="NaN"):
        grounding_score([att], 1)


def test_logprob_is_the_minimum():
    assert logprob_score([-0.1, -2.5, -0.3]) == pytest.approx(-2.5)
    assert logprob_score(torch.tensor([-0.7])) == pytest.approx(-0.7)
    with pytest.raises(ValueError):
        logprob_score([])
    with pytest.raises(ValueError):
        logprob_score([0.5])


def test_normalise_clips_and_maps_linearly():
    assert normalise(-5.0, -10.0, 0.0) == pytest.approx(0.5)
    assert normalise(-20.0, -10.0, 0.0) == 0.0
    assert normalise(float("-inf"), -10.0, 0.0) == 0.0
    assert normalise(3.0, -10.0, 0.0) == 1.0
    with pytest.raises(ValueError):
        normalise(0.0, 1.0, 1.0)


def test_decision_mixes_with_beta_and_flips_exactly_at_tau():
    cfg = SpecGuardConfig(beta=0.3, grounding_range=(0.0, 0.8), logprob_range=(-10.0, 0.0))
    d = decide_step(grounding=0.4, logprob=-5.0, config=cfg)  # g_n = 0.5, lp_n = 0.5
    assert d.grounding_norm == pytest.approx(0.5)
    assert d.logprob_norm == pytest.approx(0.5)
    assert d.score == pytest.approx(0.5)
    at = decide_step(0.4, -5.0, cfg.replace(tau=d.score))
    above = decide_step(0.4, -5.0, cfg.replace(tau=math.nextafter(d.score, 1.0)))
    assert at.accepted and not above.accepted
    d2 = decide_step(grounding=0.8, logprob=-10.0, config=cfg)  # g_n = 1, lp_n = 0
    assert d2.score == pytest.approx(0.7)


def test_a_cut_steps_grounding_reads_only_the_tokens_it_keeps():
    """A program step cut at its closing fence keeps 2 of its 3 sampled tokens; the third (the
    start of an output it made up) attends only to itself. Its ABGV is that of the 2 kept
    tokens alone, as if the tail had never been sampled; an uncut step keeps every row."""
    from specguard_graph.nodes.grounding import kept

    whole = t([[[0.6, 0.4, 0.0, 0.0], [0.2, 0.5, 0.3, 0.0], [0.0, 0.0, 0.0, 1.0]]])
    two = t([[[0.6, 0.4, 0.0], [0.2, 0.5, 0.3]]])
    cut = {"text": "```", "tokens": 2, "dropped": "\n```output\n99\n```"}
    g_cut = grounding_score(kept([whole], 1, cut), 1)[0]
    assert g_cut == pytest.approx(grounding_score([two], 1)[0]) == pytest.approx(0.1)
    assert grounding_score(kept([whole], 1, {"tokens": 3, "dropped": None}), 1)[0] == 0.0
