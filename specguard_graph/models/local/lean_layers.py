"""Decoder layers that run transformers' own arithmetic without its per-call machinery.

Why: on the CPU a decode step of the 0.5B draft spends ~2/3 of its time in the block kernel;
much of the rest is two dozen small torch ops per layer, a few microseconds each, and
transformers' machinery around them (module calls, hub wrappers, keyword plumbing, the
attention lookup). The lean forward below issues the same torch ops, in the same order, on the
same tensors as `Qwen2DecoderLayer.forward` (so every logit is the same bits: `tests/
test_lean_layers.py` compares them to transformers' forward on prefill, decode, batched rows
and captured attention), and calls the Linears' `forward` directly.

On GGUF blocks (`blocks.BlockLinear`) the query and key projections (and the value one where
its block type matches) also run as one kernel call over their stacked panels: each output is
its own fixed sum, so each is the same bits as in its own layer, and the per-call cost is paid
once. The stacked panels are the only copy: the projections keep views of them.

Where every projection of a layer runs one of the project's kernels (GGUF blocks, or int8
rows in whole blocks) the ops between the kernel calls are issued from C++ instead
(`kernels/layer.cpp`, `_glue`): the same ATen ops in the same order, so the same bits again,
without the interpreter and the Python bindings around each (the cache update and the
attention stay here). The check at load runs what will run: the glue where there is one.

Measured (`benchmarks/probes/lean_ab.py`, docs/numerics.md): a one-token forward on the GGUF
blocks at 0.76x (draft) and 0.87x (target) transformers' layers' time with the glue (0.90x and
0.94x with the Python ops).
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

from . import int8_kernel, numerics
from .blocks.linear import BlockLinear
from .capture import ATTN_IMPLEMENTATION, capture_attention_forward
from .numerics import GatedMLP, Int8WeightOnlyLinear

LAYERS = ("Qwen2DecoderLayer",)
"""Decoder layer classes whose forward `lean_forward` reproduces op for op."""

NORMS = ("Qwen2RMSNorm",)


def _rms(norm: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """`Qwen2RMSNorm.forward`, op for op."""
    dtype = h.dtype
    h = h.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + norm.variance_epsilon)
    return norm.weight * h.to(dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`apply_rotary_pos_emb` for one tensor (elementwise, so q and k may share one call)."""
    half = x.shape[-1] // 2
    return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)


def _mlp(mlp: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if type(mlp) is GatedMLP:
        gu, n = mlp.gate_up.forward(x), mlp.intermediate
        return mlp.down_proj.forward(mlp.act_fn(gu[..., :n]) * gu[..., n:])
    return mlp(x)


def lean_forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: Any = None,
    use_cache: bool | None = False,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """`Qwen2DecoderLayer.forward` (bound to a layer by `install`)."""
    at = self.self_attn
    glue = self.__dict__.get("_glue")
    if glue is not None and not numerics.ROUND_ACTIVATIONS:
        kernel, (pre, post) = int8_kernel.load(), glue
        q, k, v = kernel.layer_pre(hidden_states, *position_embeddings, *pre)
        if cache is not None:
            k, v = cache.update(k, v, at.layer_idx)
        out, _ = capture_attention_forward(at, q, k, v, attention_mask, scaling=at.scaling)
        return kernel.layer_post(out, hidden_states, *post)
    residual = hidden_states
    x = _rms(self.input_layernorm, hidden_states)
    shape = (*x.shape[:-1], -1, at.head_dim)
    cos, sin = position_embeddings
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    fused = at._modules.get("fused_proj")
    if fused is not None:  # q, k (and v) in one kernel call, rotated in one pass
        heads = fused.forward(x).view(shape).transpose(1, 2)
        nq, nk = at.q_proj.out_features // at.head_dim, at.k_proj.out_features // at.head_dim
        qk = _rope(heads[:, : nq + nk], cos, sin)
        q, k = qk[:, :nq], qk[:, nq:]
        v = heads[:, nq + nk :] if at.fused_parts == 3 else None
    else:
        q = _rope(at.q_proj.forward(x).view(shape).transpose(1, 2), cos, sin)
        k = _rope(at.k_proj.forward(x).view(shape).transpose(1, 2), cos, sin)
        v = None
    if v is None:
        v = at.v_proj.forward(x).view(shape).transpose(1, 2)
    if cache is not None:
        k, v = cache.update(k, v, at.layer_idx)
    out, _ = capture_attention_forward(at, q, k, v, attention_mask, scaling=at.scaling)
    out = at.o_proj.forward(out.reshape(*x.shape[:-1], -1).contiguous())
    hidden_states = residual + out
    residual = hidden_states
    x = _rms(self.post_attention_layernorm, hidden_states)
    return residual + _mlp(self.mlp, x)


_NONE = torch.empty(0)  # an absent bias or scale, for the C++ glue


def _proj(lin: nn.Module) -> tuple[list[torch.Tensor], list[int]] | None:
    """A projection as the C++ glue takes it, where it runs one of the project's kernels."""
    bias = _NONE if lin.bias is None else lin.bias
    if type(lin) is BlockLinear:
        return [lin.panels, _NONE, bias], [lin.fmt, lin.out_features, lin.isa, lin.act]
    if type(lin) is Int8WeightOnlyLinear and lin._direct:
        return [lin.weight_blocks, lin.scale32, bias], [-1, lin.out_features, 0, 0]
    return None


def _glue(layer: nn.Module) -> tuple[tuple, tuple] | None:
    """`layer`'s arguments for the kernel's `layer_pre` and `layer_post` (plain tensors and
    numbers, so a deepcopy of the model copies them with its own), or None where its parts
    are not all the project's kernels."""
    at, mlp = layer.self_attn, layer.mlp
    if int8_kernel.load() is None or type(mlp) is not GatedMLP:
        return None
    if type(mlp.act_fn).__name__ not in ("SiLU", "SiLUActivation"):
        return None
    fused = at._modules.get("fused_proj")
    if fused is None:  # q, k and v apart
        parts, pre_lins = 1, [at.q_proj, at.k_proj, at.v_proj]
    else:  # q and k stacked, and v too or after them
        parts, pre_lins = at.fused_parts, [fused] + ([at.v_proj] if at.fused_parts == 2 else [])
    projs = [_proj(p) for p in [*pre_lins, at.o_proj, mlp.gate_up, mlp.down_proj]]
    if any(p is None for p in projs):
        return None
    heads = [at.head_dim, at.q_proj.out_features // at.head_dim]
    heads += [at.k_proj.out_features // at.head_dim, parts]
    n = len(pre_lins)
    pre_t = [layer.input_layernorm.weight] + [t for p in projs[:n] for t in p[0]]
    pre_i = heads + [i for p in projs[:n] for i in p[1]]
    o, gu, down = projs[n:]
    post_t = [*o[0], layer.post_attention_layernorm.weight, *gu[0], *down[0]]
    post_i = [mlp.intermediate, *o[1], *gu[1], *down[1]]
    pre = (pre_t, pre_i, float(layer.input_layernorm.variance_epsilon))
    post = (post_t, post_i, float(layer.post_attention_layernorm.variance_epsilon))
    return pre, post


def _fuse(at: nn.Module) -> None:
    """Stack q, k (and v, where its blocks are the same type) into `at.fused_proj`
    (`BlockLinear.stack`: the projections keep views of the stacked panels)."""
    q, k, v = at.q_proj, at.k_proj, at.v_proj
    if not (type(q) is BlockLinear and type(k) is BlockLinear):
        return
    parts = [q, k, v] if type(v) is BlockLinear and v.fmt == q.fmt else [q, k]
    if any(p.out_features % at.head_dim for p in parts):
        return
    try:  # a zero bias added to -0.0 gives +0.0, and a padded panel puts zeros between parts
        at.fused_proj = BlockLinear.stack(parts)
    except ValueError:
        return
    at.fused_parts = len(parts)


def eligible(model: nn.Module) -> bool:
    """Can `install` make this model's layers lean (a known layer class, full attention in
    every layer, the project's attention, no hooks that a direct call would skip)?"""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    config = getattr(model, "config", None)
    if layers is None or config is None or len(layers) == 0:
        return False
    if getattr(config, "_attn_implementation", None) != ATTN_IMPLEMENTATION:
        return False
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return False
    for layer in layers:
        if type(layer).__name__ not in LAYERS:
            return False
        norms = (layer.input_layernorm, layer.post_attention_layernorm)
        if any(type(n).__name__ not in NORMS for n in norms):
            return False
    hooked = (m._forward_hooks or m._forward_pre_hooks for m in layers.modules())
    every = nn.modules.module
    return not any(hooked) and not (every._global_forward_hooks or every._global_forward_pre_hooks)


def install(model: nn.Module) -> bool:
    """Give each decoder layer of `model` the lean forward (bound, so a deepcopy of the model
    runs its own copy); False, with transformers' forward kept, where `eligible` says no or a
    layer's lean forward does not give transformers' bits (`agrees`: a later transformers whose
    layer issues other ops keeps its own forward instead of silently computing another one)."""
    if not eligible(model):
        return False
    for layer in model.model.layers:
        if "fused_proj" not in layer.self_attn._modules:
            _fuse(layer.self_attn)
        layer.__dict__["_glue"] = _glue(layer)
    if not all(agrees(model, layer) for layer in model.model.layers):
        uninstall(model)
        return False
    for layer in model.model.layers:
        layer.forward = types.MethodType(lean_forward, layer)
    return True


@torch.inference_mode()
def agrees(model: nn.Module, layer: nn.Module) -> bool:
    """Does `lean_forward` give `layer`'s own forward's bits on 3 random positions (no cache)?"""
    weight = layer.input_layernorm.weight
    gen = torch.Generator(device=weight.device).manual_seed(0)
    h = torch.randn(1, 3, weight.shape[0], generator=gen, device=weight.device, dtype=weight.dtype)
    pe = model.model.rotary_emb(h, torch.arange(3, device=h.device)[None])
    theirs = type(layer).forward(layer, h, attention_mask=None, position_embeddings=pe)
    ours = lean_forward(layer, h, attention_mask=None, position_embeddings=pe)
    return isinstance(theirs, torch.Tensor) and torch.equal(theirs, ours)


def uninstall(model: nn.Module) -> None:
    """Back to transformers' forward (the stacked projections stay: they compute the same)."""
    for layer in getattr(getattr(model, "model", None), "layers", []):
        layer.__dict__.pop("forward", None)
        layer.__dict__.pop("_glue", None)
