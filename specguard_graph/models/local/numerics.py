"""CPU weight formats, chosen for fidelity first: every forward must compute the same model.

`int8` (the CPU default for a model without GGUF blocks) stores each Linear's weight as int8
with one scale per output channel and keeps everything else (embeddings, norms, attention, the
residual stream) in float32. Its matmul runs the project's own kernel on float32 activations
(`int8_kernel`, each output summed in one fixed order) or, where that cannot run, torch's
weight-only int8 kernel on bfloat16 activations; both reduce each output element the same way
whatever the number of rows: a token scores the same fed alone, in a chunk, or as one of k
candidate rows. The scales are rounded *up* to bfloat16 values before quantising, so either
kernel applies them exactly and no channel is biased.

`dynamic-int8` (torch's `quantize_dynamic`) is kept only as an explicit opt-in: it quantises the
activations with one scale for all rows of a forward, so its output depends on what else is in
the batch, and it agrees with float32 on the top-1 token only ~74 % (draft) / 84 % (target) of
the time (`benchmarks/fidelity.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch
from torch import nn

from . import int8_kernel

Quantize = Literal["auto", "none", "int8", "int8x2", "gguf", "gguf-a8", "gguf-a8o", "dynamic-int8"]
QUANTIZE_CHOICES: tuple[str, ...] = get_args(Quantize)
# the GGUF formats: activation bits (9: int8 with each group's largest at int16; blocks/linear.py)
GGUF_ACTIVATIONS = {"gguf": 16, "gguf-a8": 8, "gguf-a8o": 9}

ROUND_ACTIVATIONS = False
"""Whether the int8 kernel rounds its activations to bfloat16 first (torch's kernel always
does). It did while attention ran in float64, rounded to float32: on rare elements two
feedings' float64 results straddled a float32 rounding boundary, one ulp apart (one element of
one of six GSM8K texts on the 0.5B draft, token by token against one forward: 2.9e-5 in a
log-prob, `benchmarks/results/engine/fidelity-f32.log`), and the bf16 rounding absorbed it.
With attention summed in one fixed order per row (`kernels/attention.cpp`) the rows are the
same bits in every feeding, so float32 activations stay float32 (`benchmarks/fidelity.py`)."""


def _int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel int8 of `w` with bfloat16 scales rounded up (exact in the kernel)."""
    amax = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny)
    scale = _bf16_ceil(amax / 127.0)  # |w / scale| <= 127 still holds
    q = torch.round(w / scale.to(torch.float32)[:, None]).clamp_(-127, 127)
    return q.to(torch.int8), scale


class Int8WeightOnlyLinear(int8_kernel.UsesKernel, nn.Module):
    """A Linear with int8 weights, one scale per output channel; row-invariant by construction.

    With `terms=2` the rounding error of the first int8 matrix is itself stored as a second one
    (its own scales), so the weight is kept to ~1e-4 of its row maximum, bfloat16's precision.
    Both live in one stacked matrix: one kernel call, whose two halves are added in float32."""

    row_invariant = True

    def __init__(self, linear: nn.Linear, terms: int = 1):
        super().__init__()
        if terms not in (1, 2):
            raise ValueError("terms must be 1 or 2")
        w = linear.weight.detach().to(torch.float32)
        self.in_features, self.out_features, self.terms = w.shape[1], w.shape[0], terms
        qs, scales = [], []
        for _ in range(terms):
            q, scale = _int8_rows(w)
            qs.append(q)
            scales.append(scale)
            w = w - q.to(torch.float32) * scale.to(torch.float32)[:, None]
        self._kernel = int8_kernel.current()
        self._store(torch.cat(qs).contiguous(), torch.cat(scales))
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), False)

    def _store(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        """The int8 rows and their bfloat16 scales (exact in both kernels), laid out for the
        layer's kernel."""
        self.register_buffer("scale", scale)
        pad = 0
        if self._kernel is None:  # torch's kernel: [rows, in] int8, bfloat16 activations
            self.register_buffer("weight_int8", q)
        else:  # ours: rows padded to whole 64-row blocks, packed k-major, float32 scales
            pad = -q.shape[0] % int8_kernel.BLOCK
            q = torch.cat([q, q.new_zeros(pad, q.shape[1])])
            self.register_buffer("weight_blocks", self._kernel.pack(q))
            scale32 = torch.cat([scale.to(torch.float32), scale.new_zeros(pad).float()])
            self.register_buffer("scale32", scale32, persistent=False)
        # our kernel's output is the layer's whole output: no padding to cut, no terms to add
        self._direct = self._kernel is not None and self.terms == 1 and not pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._direct and x.dtype == torch.float32 and not ROUND_ACTIVATIONS:  # a decode's path
            y = self._kernel.mm(x.reshape(-1, self.in_features), self.weight_blocks, self.scale32)
            y = y.view(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias
        rows = x.reshape(-1, self.in_features)
        n = self.terms * self.out_features
        if self._kernel is None:
            y = torch._weight_int8pack_mm(rows.to(torch.bfloat16), self.weight_int8, self.scale)
            y = y.to(x.dtype)
        else:
            # float32 activations: attention sums in one fixed order too (ROUND_ACTIVATIONS)
            a = rows.to(torch.bfloat16).to(torch.float32) if ROUND_ACTIVATIONS else rows.float()
            y = self._kernel.mm(a, self.weight_blocks, self.scale32)
            y = (y if y.shape[1] == n else y[:, :n]).to(x.dtype)
        if self.terms == 2:
            y = y[:, : self.out_features] + y[:, self.out_features :]
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def rows(self, ids: torch.Tensor) -> Int8WeightOnlyLinear:
        """This layer restricted to the output channels `ids`: the same int8 rows and scales,
        so each kept output is the same bits as in the whole layer (its own fixed sum)."""
        if self.terms != 1 or self.bias is not None:
            raise ValueError("rows() takes a one-term layer without bias")
        out = Int8WeightOnlyLinear.__new__(Int8WeightOnlyLinear)
        nn.Module.__init__(out)
        out.in_features, out.out_features, out.terms = self.in_features, len(ids), 1
        out._kernel, out.bias = self._kernel, None
        out._store(self.int8_weight()[ids].contiguous(), self.scale[ids].clone())
        return out

    def int8_weight(self) -> torch.Tensor:
        """The stored int8 matrix, [terms * out_features, in_features], whichever kernel."""
        if self._kernel is None:
            return self.weight_int8
        w = self.weight_blocks.transpose(1, 2).reshape(-1, self.in_features)
        return w[: self.terms * self.out_features]

    def dequantized(self) -> torch.Tensor:
        """The weight this layer computes with, in float32 (for tests and fidelity checks)."""
        w = self.int8_weight().to(torch.float32) * self.scale.to(torch.float32)[:, None]
        return w.reshape(self.terms, self.out_features, self.in_features).sum(0)

    def extra_repr(self) -> str:
        kernel = "torch kernel" if self._kernel is None else "specguard kernel"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            + ("int8 weight" if self.terms == 1 else "int8 weight + int8 residual")
            + f", {kernel}"
        )


def _bf16_ceil(x: torch.Tensor) -> torch.Tensor:
    """The smallest bfloat16 value >= x, elementwise (x > 0)."""
    b = x.to(torch.bfloat16)
    below = b.to(torch.float32) < x
    return torch.where(below, torch.nextafter(b, torch.full_like(b, torch.inf)), b)


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear (the LM head included) with `Int8WeightOnlyLinear`, in place."""
    return replace_linears(model, lambda _, lin: Int8WeightOnlyLinear(lin))


def quantize_int8x2(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear with a two-term `Int8WeightOnlyLinear`, in place."""
    return replace_linears(model, lambda _, lin: Int8WeightOnlyLinear(lin, terms=2))


Make = Callable[[str, nn.Linear], nn.Module]  # (qualified name, Linear) -> its replacement

GATED_MLPS = ("Qwen2MLP", "Qwen3MLP", "LlamaMLP", "MistralMLP")
"""MLP classes whose forward is exactly `down_proj(act_fn(gate_proj(x)) * up_proj(x))`."""


class GatedMLP(nn.Module):
    """`down(act(gate(x)) * up(x))` with gate and up stacked as one matrix: one kernel call
    instead of two per layer, the same bits (each output channel is its own sum and scale)."""

    def __init__(self, mlp: nn.Module, make: Make, name: str = "mlp"):
        super().__init__()
        gate, up = mlp.gate_proj, mlp.up_proj
        stacked = nn.Linear(gate.in_features, 2 * gate.out_features, bias=False, device="meta")
        stacked.weight = nn.Parameter(torch.cat([gate.weight, up.weight]).detach(), False)
        self.intermediate, self.gate_up = gate.out_features, make(f"{name}.gate_up", stacked)
        self.down_proj, self.act_fn = make(f"{name}.down_proj", mlp.down_proj), mlp.act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gu = self.gate_up(x)
        return self.down_proj(
            self.act_fn(gu[..., : self.intermediate]) * gu[..., self.intermediate :]
        )


def gated(sub: nn.Module) -> bool:
    """Is `sub` an MLP `GatedMLP` can replace (a known class, three bias-free Linears)?"""
    parts = [getattr(sub, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    return type(sub).__name__ in GATED_MLPS and all(
        type(p) is nn.Linear and p.bias is None for p in parts
    )


def replace_linears(model: nn.Module, make: Make) -> nn.Module:
    """Every nn.Linear -> `make(its qualified name, it)`, in place (fused gate+up: `….gate_up`)."""
    if getattr(model.config, "tie_word_embeddings", False):  # the embedding stays float32
        model.config.tie_word_embeddings = False  # and the head gets its own copy
    fused: set[int] = set()  # MLPs replaced by a GatedMLP: their old Linears are not the model's
    for prefix, parent in list(model.named_modules()):
        if id(parent) in fused:
            continue
        for attr, sub in list(parent.named_children()):
            name = f"{prefix}.{attr}" if prefix else attr
            if gated(sub):
                setattr(parent, attr, GatedMLP(sub, make, name))
                fused.add(id(sub))
            elif type(sub) is nn.Linear:
                setattr(parent, attr, make(name, sub))
    return model


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """torch's dynamic int8 (per-tensor activation scale per forward): fast, batch-dependent."""
    return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def apply(model: nn.Module, quantize: str, device: str) -> nn.Module:
    """Apply a resolved (non-"auto") weight format to a loaded model."""
    if quantize == "none":
        return model
    formats = {
        "int8": quantize_int8,
        "int8x2": quantize_int8x2,
        "dynamic-int8": quantize_dynamic_int8,
    }
    if quantize in GGUF_ACTIVATIONS:
        raise ValueError(f"{quantize} reads the model's GGUF file: load the model with it")
    if quantize not in formats:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}")
    if not device.startswith("cpu"):
        raise ValueError(f"{quantize} is a CPU weight format (device is {device})")
    return formats[quantize](model)


def row_invariant(model: nn.Module) -> bool:
    """Does every Linear of `model` reduce each output the same way whatever the rows fed with
    it (the int8 and gguf formats)? Then a token scores the same alone, in a chunk or in a batch."""
    layers = model.modules()
    linears = [m for m in layers if isinstance(m, nn.Linear) or hasattr(m, "row_invariant")]
    return bool(linears) and all(getattr(m, "row_invariant", False) for m in linears)


def kernel_name() -> str:
    """Which kernel the int8 formats compute with in this process (for benchmark headers)."""
    if int8_kernel.load() is None:
        return "torch int8 (bf16 activations), float64 attention"
    rounded = "bf16-rounded" if ROUND_ACTIVATIONS else "float32"
    return f"specguard int8 ({rounded} activations), gguf blocks ({int8_kernel.block_copy()})"
