"""Property-based tests of the signal math (hypothesis)."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specguard_graph import SpecGuardConfig
from specguard_graph.scoring import decide_step, grounding_score, normalise


@st.composite
def attention_rows(draw):
    """Valid causal attention rows: heads x S x (P + S), each row a distribution."""
    layers = draw(st.integers(1, 4))
    heads = draw(st.integers(1, 3))
    prefix = draw(st.integers(0, 5))
    steps = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    peaky = draw(st.floats(0.1, 20.0))
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(layers):
        logits = torch.randn(heads, steps, prefix + steps, generator=gen, dtype=torch.float64)
        mask = torch.ones(steps, prefix + steps, dtype=torch.bool).tril(prefix)
        att = torch.softmax((peaky * logits).masked_fill(~mask, -math.inf), dim=-1)
        out.append(att)
    return out, prefix, layers


@settings(max_examples=200, deadline=None)
@given(attention_rows(), st.sampled_from([0.0, 0.01, 0.2]))
def test_grounding_stays_in_its_range(data, sparsify):
    atts, prefix, layers = data
    g, per_token = grounding_score(atts, prefix, sparsify=sparsify)
    bound = 1 - 0.5**layers
    assert 0.0 <= g <= bound + 1e-12
    assert all(0.0 <= m <= bound + 1e-12 for m in per_token)
    assert g == min(per_token)
    if prefix == 0:
        assert g == 0.0  # nothing to ground on


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 5), st.integers(1, 3))
def test_grounding_extremes(layers, heads, prefix, steps):
    on_prefix = torch.zeros(heads, steps, prefix + steps, dtype=torch.float64)
    on_prefix[:, :, prefix - 1] = 1.0
    g, _ = grounding_score([on_prefix] * layers, prefix)
    assert math.isclose(g, 1 - 0.5**layers, rel_tol=1e-12)
    on_self = torch.zeros(heads, steps, prefix + steps, dtype=torch.float64)
    for t in range(steps):
        on_self[:, t, prefix + t] = 1.0
    assert grounding_score([on_self] * layers, prefix)[0] == 0.0


@given(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.floats(-100, 0), st.floats(0.001, 100))
def test_normalisation_is_monotone_and_bounded(a, b, lo, width):
    hi = lo + width
    na, nb = normalise(a, lo, hi), normalise(b, lo, hi)
    assert 0.0 <= na <= 1.0
    if a <= b:
        assert na <= nb


@given(st.floats(0.0, 0.875), st.floats(-10.0, 0.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_decision_flips_exactly_at_tau(g, lp, beta, tau):
    cfg = SpecGuardConfig(beta=beta, tau=tau)
    d = decide_step(g, lp, cfg)
    assert 0.0 <= d.score <= 1.0
    assert d.accepted == (d.score >= tau)
    assert decide_step(g, lp, cfg.replace(tau=d.score)).accepted
    if d.score < 1.0:
        assert not decide_step(g, lp, cfg.replace(tau=math.nextafter(d.score, 2.0))).accepted
