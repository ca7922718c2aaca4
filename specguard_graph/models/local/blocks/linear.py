"""Linears that compute with GGUF blocks, and the conversion of a loaded model to them.

Why: the embedded models ship as GGUF (Q4_K_M), and the blocks *are* the model; the float32
weights the loader builds are those blocks dequantised. The int8 format re-quantises them (1.5x
the bytes per target token, and top-1 98.2 % / 99.8 % of float32, docs/numerics.md); these
layers read the blocks themselves, fewer bytes and only activation rounding between them and
float32."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import int8_kernel, numerics
from .source import FORMATS, Tensors, tensor_name


class BlockLinear(nn.Module):
    """A Linear whose weight is a GGUF tensor's rows of blocks; row-invariant by construction
    (`kernels/block_gemm.cpp`)."""

    row_invariant = True

    def __init__(self, blocks: torch.Tensor, fmt: int, in_features: int,
                 bias: torch.Tensor | None = None):  # fmt: skip
        super().__init__()
        if fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {', '.join(FORMATS.values())} (ggml ids "
                             f"{sorted(FORMATS)}), got {fmt}")  # fmt: skip
        kernel = int8_kernel.load()
        if kernel is None:
            raise ValueError("the gguf format needs the project's CPU kernel (x86-64, AVX2)")
        if blocks.dtype != torch.uint8 or blocks.dim() != 2:
            raise ValueError("blocks must be a 2-D uint8 tensor, one row of blocks per output")
        need = kernel.block_row_bytes(fmt, in_features)
        if blocks.shape[1] != need:
            raise ValueError(f"blocks hold {blocks.shape[1]} bytes per row; {FORMATS[fmt]} at "
                             f"in_features={in_features} takes {need}")  # fmt: skip
        self._kernel, self.fmt = kernel, fmt
        self.in_features, self.out_features = in_features, blocks.shape[0]
        self.register_buffer("blocks", blocks.contiguous())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        y = self._kernel.block_mm(rows.float(), self.blocks, self.fmt)
        y = y.view(*x.shape[:-1], self.out_features).to(x.dtype)
        return y if self.bias is None else y + self.bias

    def rows(self, ids: torch.Tensor) -> BlockLinear:
        """This layer restricted to the output channels `ids`: each kept output is the same sum."""
        bias = None if self.bias is None else self.bias[ids]
        return BlockLinear(self.blocks[ids].contiguous(), self.fmt, self.in_features, bias)

    def dequantized(self) -> torch.Tensor:
        """The weight in float32, by the `gguf` package's reference (for tests and checks)."""
        import gguf

        w = gguf.quants.dequantize(self.blocks.numpy(), gguf.GGMLQuantizationType(self.fmt))
        return torch.from_numpy(np.ascontiguousarray(w))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"{FORMATS[self.fmt]} blocks, specguard kernel")  # fmt: skip


def quantize_gguf(model: nn.Module, path: Path) -> nn.Module:
    """Replace every Linear whose GGUF tensor (in `path`) is in a kernel format with a
    `BlockLinear`, in place; any other Linear gets int8 (with a warning naming it)."""
    tensors = Tensors(path)
    head = "output.weight" if tensors.get("output.weight") is not None else "token_embd.weight"

    def make(name: str, lin: nn.Linear) -> nn.Module:
        tname = head if name == "lm_head" else tensor_name(name, tied=False)
        got = tensors.get(tname) if tname else None
        if got is None or got[0] not in FORMATS:
            what = "no tensor" if got is None else f"ggml type {got[0]}"
            warnings.warn(f"{path.name}: {name} has {what} the block kernel reads; int8 instead",
                          stacklevel=3)  # fmt: skip
            return numerics.Int8WeightOnlyLinear(lin)
        fmt, data = got
        first = tensors.dequantized_row(tname, 0)
        if data.shape[0] != lin.out_features or not np.array_equal(
            first, lin.weight[0].detach().numpy()
        ):
            raise ValueError(f"{path.name}: {tname} is not this model's {name} weight")
        return BlockLinear(torch.from_numpy(data.copy()), fmt, lin.in_features, lin.bias)

    def stacked(name: str, mlp: nn.Module) -> nn.Module | None:
        gate, up = make(f"{name}.gate_proj", mlp.gate_proj), make(f"{name}.up_proj", mlp.up_proj)
        blocks = isinstance(gate, BlockLinear) and isinstance(up, BlockLinear)
        if not blocks or gate.fmt != up.fmt:
            return None
        both = BlockLinear(torch.cat([gate.blocks, up.blocks]), gate.fmt, gate.in_features)
        fused = numerics.GatedMLP.__new__(numerics.GatedMLP)  # its layers are built already
        nn.Module.__init__(fused)
        fused.intermediate = gate.out_features
        fused.gate_up, fused.down_proj = both, make(f"{name}.down_proj", mlp.down_proj)
        fused.act_fn = mlp.act_fn
        return fused

    if getattr(model.config, "tie_word_embeddings", False):
        model.config.tie_word_embeddings = False  # the head reads blocks; the embedding stays
    named = {id(m): n for n, m in model.named_modules()}
    replaced: set[int] = set()  # MLPs now fused: their old Linears are not the model's
    for parent in list(model.modules()):
        if id(parent) in replaced:
            continue
        prefix = named.get(id(parent), "")
        for attr, sub in list(parent.named_children()):
            name = f"{prefix}.{attr}" if prefix else attr
            if numerics.gated(sub) and (fused := stacked(name, sub)) is not None:
                setattr(parent, attr, fused)
                replaced.add(id(sub))
            elif type(sub) is nn.Linear:
                setattr(parent, attr, make(name, sub))
    return model
