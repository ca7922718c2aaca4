"""The lean decoder layers compute transformers' forward bit for bit, on every format and
feeding, and stack a GGUF model's q/k(/v) projections without a second copy of them."""

from __future__ import annotations

import copy

import gguf
import pytest
import torch
from torch import nn

from specguard_graph.models.loading import load_lm
from specguard_graph.models.local import int8_kernel, lean_layers, numerics
from specguard_graph.models.local.blocks import BlockLinear
from specguard_graph.models.local.capture import capture_attention
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.models.local.kv_cache import new_cache
from specguard_graph.testing import tiny_lm


@torch.inference_mode()
def _feedings(model: nn.Module, ids: list[int]) -> list[torch.Tensor]:
    """Logits of a prefill, three one-token decodes, a 4-token chunk, and 3 rows decoded in a
    batch (a fork of the cache), plus the attention rows captured on the last two layers."""
    layers = frozenset({model.config.num_hidden_layers - 2, model.config.num_hidden_layers - 1})
    cache = new_cache(model.config)
    with capture_attention(layers) as cap:
        out = [model(input_ids=torch.tensor([ids[:-7]]), cache=cache, use_cache=True).logits]
        for t in ids[-7:-4]:
            out.append(model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits)
        out.append(model(input_ids=torch.tensor([ids[-4:]]), cache=cache, use_cache=True).logits)
        cache.batch_repeat_interleave(3)
        x = torch.tensor([[ids[0]], [ids[1]], [ids[2]]])
        out.append(model(input_ids=x, cache=cache, use_cache=True).logits)
    return out + [r for layer in sorted(layers) for r in cap.rows[layer]]


def _glued(model: nn.Module) -> list[bool]:
    """Which layers run the C++ glue (`kernels/layer.cpp`) between their kernel calls."""
    return [la.__dict__.get("_glue") is not None for la in model.model.layers]


def _same_as_transformers(lm: LocalCausalLM, ids: list[int], glued: bool = True) -> None:
    assert lm.lean, "the model was not made lean"
    assert _glued(lm.model) == [glued] * len(lm.model.model.layers)
    lean = _feedings(lm.model, ids)
    lean_layers.uninstall(lm.model)
    try:
        ref = _feedings(lm.model, ids)
    finally:
        assert lean_layers.install(lm.model)
    assert len(lean) == len(ref)
    for a, b in zip(lean, ref, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("fmt", "hidden", "glued"), [
    ("none", 0, False),  # torch's Linears: the Python ops
    ("int8", 0, False),  # int8 rows padded to whole blocks: the Python ops
    ("int8", 128, True),  # every projection whole blocks: the C++ glue, q, k and v apart
])  # fmt: skip
def test_lean_layers_compute_transformers_forward_bit_for_bit(tiny, fmt, hidden, glued):
    base = tiny_lm(layers=2, hidden=hidden, heads=4, seed=5) if hidden else tiny.target
    lm = LocalCausalLM(numerics.apply(copy.deepcopy(base.model), fmt, "cpu"), base.tokenizer)
    ids = lm.encode("Natalia sold 48 clips in April and half as many in May.")
    _same_as_transformers(lm, ids, glued=glued)


def test_a_copy_of_a_lean_model_runs_its_own_layers(tiny):
    lm = tiny.draft
    assert lm.lean
    clone = copy.deepcopy(lm.model)
    assert all(la.forward.__self__ is la for la in clone.model.layers)
    with torch.no_grad():  # a change to the copy's weights shows in the copy's logits only
        clone.model.layers[0].self_attn.o_proj.weight.mul_(2.0)
    x = torch.tensor([lm.encode("How many clips?")])
    with torch.inference_mode():
        assert not torch.equal(clone(input_ids=x).logits, lm.model(input_ids=x).logits)


def test_a_hooked_model_keeps_transformers_forward(tiny):
    model = copy.deepcopy(tiny.target.model)
    lean_layers.uninstall(model)
    model.model.layers[1].mlp.register_forward_hook(lambda *args: None)
    assert not lean_layers.install(model)
    assert "forward" not in model.model.layers[0].__dict__


def test_a_lean_forward_that_differs_from_transformers_is_not_installed(tiny, monkeypatch):
    """As after a transformers upgrade whose layer issues other ops: its own forward stays."""
    model = copy.deepcopy(tiny.target.model)
    lean_layers.uninstall(model)
    rope = lean_layers._rope
    monkeypatch.setattr(lean_layers, "_rope", lambda x, cos, sin: rope(x, cos, sin) * 1.0000001)
    assert not lean_layers.agrees(model, model.model.layers[0])
    assert not lean_layers.install(model)
    assert all("forward" not in la.__dict__ for la in model.model.layers)
    monkeypatch.setattr(lean_layers, "_rope", rope)
    assert lean_layers.install(model)


def _blocks(lin: nn.Linear, fmt: gguf.GGMLQuantizationType) -> BlockLinear:
    """`lin` as GGUF blocks of `fmt`, quantised by the gguf package."""
    raw = gguf.quants.quantize(lin.weight.detach().numpy(), fmt)
    return BlockLinear(torch.from_numpy(raw), int(fmt), lin.in_features, lin.bias)


@pytest.mark.parametrize("v_fmt", ["Q8_0", "Q5_0", "int8"])
def test_stacked_projections_compute_transformers_forward(v_fmt):
    """q, k and v in one block type stack all three; v in another (or int8, where a file's
    tensor is in no block format the kernel reads) leaves it out."""
    lm = tiny_lm(layers=2, hidden=128, heads=4, seed=3)
    q8 = gguf.GGMLQuantizationType.Q8_0
    for layer in lm.model.model.layers:
        at = layer.self_attn
        at.q_proj, at.k_proj = _blocks(at.q_proj, q8), _blocks(at.k_proj, q8)
        at.v_proj = (numerics.Int8WeightOnlyLinear(at.v_proj) if v_fmt == "int8"
                     else _blocks(at.v_proj, gguf.GGMLQuantizationType[v_fmt]))  # fmt: skip
        at.o_proj = _blocks(at.o_proj, q8)  # and the rest in blocks: the C++ glue runs them
        layer.mlp = numerics.GatedMLP(layer.mlp, lambda name, lin: _blocks(lin, q8))
    lm = LocalCausalLM(lm.model, lm.tokenizer)
    assert [la.self_attn.fused_parts for la in lm.model.model.layers] == [
        3 if v_fmt == "Q8_0" else 2
    ] * 2
    _same_as_transformers(lm, lm.encode("Step 1: 48 / 2 = 24 clips in May. Step 2: 48 + 24 = 72."))


def test_stack_refuses_parts_it_cannot_keep_bit_for_bit_and_leaves_them_as_they_were():
    lin = tiny_lm(layers=1, hidden=64, heads=4, seed=3).model.model.layers[0].self_attn
    q8, q5 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q5_0
    q, k = _blocks(lin.q_proj, q8), _blocks(lin.k_proj, q8)
    before = [p.panels for p in (q, k)]
    with pytest.raises(ValueError, match="one block type"):
        BlockLinear.stack([q, _blocks(lin.v_proj, q5)])
    with pytest.raises(ValueError, match="one block type"):  # one bias and one none
        BlockLinear.stack([q, BlockLinear(k.codes(), int(q8), k.in_features)])
    assert all(p.panels is b for p, b in zip((q, k), before, strict=True))
    stacked = BlockLinear.stack([q, k])
    x = torch.randn(3, q.in_features)
    assert torch.equal(stacked(x), torch.cat([q(x), k(x)], dim=-1))
    assert q.panels.data_ptr() == stacked.panels.data_ptr()


@pytest.fixture(scope="module")
def draft_gguf():
    return load_lm("draft", quantize="gguf")


def test_the_gguf_draft_stacks_q_and_k_and_computes_transformers_forward(draft_gguf):
    lm = draft_gguf
    for layer in lm.model.model.layers:
        at = layer.self_attn
        fused = at.fused_proj
        assert isinstance(fused, BlockLinear) and at.fused_parts in (2, 3)
        parts = [at.q_proj, at.k_proj, at.v_proj][: at.fused_parts]
        assert fused.out_features == sum(p.out_features for p in parts)
        start = fused.panels.data_ptr()  # the parts are views of the stacked panels
        for p in parts:
            assert p.panels.data_ptr() == start
            start += p.panels.nbytes
    ids = lm.encode("Benny saw a 10-foot shark with 2 6-inch remoras attached to it. " * 3)
    _same_as_transformers(lm, ids)


@pytest.fixture(scope="module")
def glued_int8():
    base = tiny_lm(layers=2, hidden=128, heads=4, seed=5)
    return LocalCausalLM(numerics.apply(base.model, "int8", "cpu"), base.tokenizer)


def test_a_copy_of_a_glued_model_runs_its_own_weights(glued_int8):
    """The glue holds the layer's tensors; a deepcopy's glue must hold the copy's."""
    lm = glued_int8
    clone = copy.deepcopy(lm.model)
    assert _glued(clone) == [True, True]
    o = clone.model.layers[0].self_attn.o_proj
    assert any(t is o.scale32 for t in clone.model.layers[0]._glue[1][0])
    x = torch.tensor([lm.encode("How many clips?")])
    with torch.inference_mode():
        before = lm.model(input_ids=x).logits
        o.scale32.mul_(2.0)
        assert not torch.equal(clone(input_ids=x).logits, before)
        assert torch.equal(lm.model(input_ids=x).logits, before)


def test_glue_that_differs_from_transformers_is_not_installed(glued_int8, monkeypatch):
    """A C++ glue that rounds one op differently fails the check at load: no lean layers."""
    model = copy.deepcopy(glued_int8.model)
    lean_layers.uninstall(model)
    kernel = int8_kernel.load()

    class Off:  # the kernel, with layer_post's output one ulp-ish off
        def __getattr__(self, name):
            return getattr(kernel, name)

        def layer_post(self, *args):
            return kernel.layer_post(*args) * 1.0000001

    monkeypatch.setattr(int8_kernel, "load", Off)
    assert not lean_layers.install(model)
    assert all("forward" not in la.__dict__ and "_glue" not in la.__dict__
               for la in model.model.layers)  # fmt: skip
    monkeypatch.undo()
    assert lean_layers.install(model)
    assert _glued(model) == [True, True]
