"""Linears that compute with GGUF blocks, and the conversion of a loaded model to them.

Why: the embedded models ship as GGUF (Q4_K_M), and the blocks *are* the model; the float32
weights the loader builds are those blocks dequantised. The int8 format re-quantises them (1.5x
the bytes per target token, and top-1 98.2 % / 99.8 % of float32, docs/numerics.md); these
layers read the blocks themselves, fewer bytes and only activation rounding between them and
float32."""

from __future__ import annotations

import contextvars
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import int8_kernel, numerics
from . import panels
from .source import FORMATS, Tensors, tensor_name

_COPY: contextvars.ContextVar[int] = contextvars.ContextVar("block_copy", default=-1)


@contextmanager
def kernel_copy(isa: int) -> Iterator[None]:
    """Layers made inside this block run that copy of the kernel (0 AVX2, 1 AVX-512 VNNI, 2 AMX;
    -1 the best this CPU runs): the copies give the same bits, so benchmarks time them side by
    side in one process (`benchmarks/engine_speed.py --vnni`)."""
    token = _COPY.set(isa)
    try:
        yield
    finally:
        _COPY.reset(token)


# bits an activation is rounded to: 16 (`gguf`), 8 (`gguf-a8`), 9 (`gguf-a8o`: 8, each group's
# largest at int16 on the others' step)
ACTIVATIONS = tuple(numerics.GGUF_ACTIVATIONS.values())


class BlockLinear(int8_kernel.UsesKernel, nn.Module):
    """A Linear whose weight is a GGUF tensor's blocks, eight outputs interleaved
    (`panels.py`); row-invariant by construction (`kernels/block_gemm.cpp`)."""

    row_invariant = True

    def __init__(self, blocks: torch.Tensor | panels.Codes, fmt: int, in_features: int,
                 bias: torch.Tensor | None = None, act: int = 16):  # fmt: skip
        """`blocks`: the GGUF tensor's rows of blocks ([out, row bytes] uint8), or their codes;
        `act`: the bits each activation is rounded to (16, or 8 as llama.cpp does: faster
        products, less agreement with float32; docs/numerics.md)."""
        super().__init__()
        if act not in ACTIVATIONS:
            raise ValueError(f"act must be one of {ACTIVATIONS} (activation bits), got {act}")
        if fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {', '.join(FORMATS.values())} (ggml ids "
                             f"{sorted(FORMATS)}), got {fmt}")  # fmt: skip
        kernel = int8_kernel.load()
        if kernel is None:
            raise ValueError("the gguf format needs the project's CPU kernel (x86-64, AVX2)")
        if isinstance(blocks, panels.Codes):
            if blocks.fmt != fmt or blocks.q.shape[1] != in_features:
                got = f"{FORMATS.get(blocks.fmt)} at in_features={blocks.q.shape[1]}"
                raise ValueError(f"codes of {got}, not {FORMATS[fmt]} at {in_features}")
            codes = blocks
        else:
            if blocks.dtype != torch.uint8 or blocks.dim() != 2:
                raise ValueError("blocks must be a 2-D uint8 tensor, one row of blocks per output")
            need = kernel.block_row_bytes(fmt, in_features)
            if blocks.shape[1] != need:
                raise ValueError(f"blocks hold {blocks.shape[1]} bytes per row; {FORMATS[fmt]} "
                                 f"at in_features={in_features} takes {need}")  # fmt: skip
            codes = panels.codes(fmt, blocks.numpy())
        self._kernel, self.fmt, self.isa, self.act = kernel, fmt, _COPY.get(), act
        self.in_features, self.out_features = in_features, codes.q.shape[0]
        self.register_buffer("panels", torch.from_numpy(panels.to_panels(codes)))
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        y = self._kernel.block_mm(
            rows.float(), self.panels, self.fmt, self.out_features, self.isa, self.act
        )
        y = y.view(*x.shape[:-1], self.out_features).to(x.dtype)
        return y if self.bias is None else y + self.bias

    @classmethod
    def stack(cls, parts: list[BlockLinear]) -> BlockLinear:
        """One layer whose outputs are `parts`' outputs in order, each the same sum as in its
        part; the parts then read their rows of its panels (views: no second copy)."""
        if len({(p.fmt, p.isa, p.act, p.in_features, p.bias is None) for p in parts}) > 1:
            raise ValueError("stacked parts need one block type, copy, activations, width and "
                             "bias use")  # fmt: skip
        if any(p.out_features % panels.LANES for p in parts):
            raise ValueError(f"stacked parts need whole panels ({panels.LANES} outputs each)")
        rows = torch.cat([p.panels for p in parts])
        out = cls.__new__(cls)
        nn.Module.__init__(out)
        first = parts[0]
        out._kernel, out.fmt, out.isa, out.act = first._kernel, first.fmt, first.isa, first.act
        out.in_features = first.in_features
        out.out_features = sum(p.out_features for p in parts)
        out.register_buffer("panels", rows)
        out.bias = None
        if first.bias is not None:
            out.bias = nn.Parameter(torch.cat([p.bias.detach() for p in parts]), False)
        start = 0
        for p in parts:
            n = p.panels.shape[0]
            p.panels, start = rows[start : start + n], start + n
        return out

    def codes(self) -> panels.Codes:
        """The weight's integer codes and scales, read back from the kernel's layout."""
        return panels.from_panels(self.fmt, self.panels.numpy(), self.out_features)

    def rows(self, ids: torch.Tensor) -> BlockLinear:
        """This layer restricted to the output channels `ids`: each kept output is the same sum."""
        bias = None if self.bias is None else self.bias[ids]
        kept = BlockLinear(self.codes().take(ids.numpy()), self.fmt, self.in_features, bias,
                           self.act)  # fmt: skip
        kept.isa = self.isa
        return kept

    def dequantized(self) -> torch.Tensor:
        """The weight in float32, by the `gguf` package's formula (for tests and checks)."""
        return torch.from_numpy(panels.weights(self.codes()))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"{FORMATS[self.fmt]} blocks, {_ACT_NAMES[self.act]} activations")  # fmt: skip


_ACT_NAMES = {16: "int16", 8: "int8", 9: "int8 (int16 outliers)"}


def quantize_gguf(model: nn.Module, path: Path, act: int = 16) -> nn.Module:
    """Replace every Linear whose GGUF tensor (in `path`) is in a kernel format with a
    `BlockLinear` rounding its activations to `act` bits, in place; any other Linear gets int8
    (with a warning naming it). A fused MLP's gate and up (`numerics.GatedMLP`) are their two
    tensors' rows, stacked."""
    tensors = Tensors(path)
    head = "output.weight" if tensors.get("output.weight") is not None else "token_embd.weight"
    unread: Counter[str] = Counter()  # why a Linear got int8 -> how many did

    def blocks(name: str, weight: torch.Tensor) -> tuple[int, np.ndarray] | None:
        """The blocks of `name`, checked to dequantize to the loaded `weight`'s first row."""
        tname = head if name == "lm_head" else tensor_name(name)
        got = tensors.get(tname) if tname else None
        if got is None or got[0] not in FORMATS:
            what = "missing" if got is None else _type_name(got[0])
            unread[what] += 1
            return None
        first = tensors.dequantized_row(tname, 0)
        if got[1].shape[0] != weight.shape[0] or not np.array_equal(first, weight[0].numpy()):
            raise ValueError(f"{path.name}: {tname} is not this model's {name} weight")
        return got

    def make(name: str, lin: nn.Linear) -> nn.Module:
        stem = name.removesuffix(".gate_up")
        parts = [f"{stem}.gate_proj", f"{stem}.up_proj"] if stem != name else [name]
        weights = lin.weight.detach().chunk(len(parts))
        found = [g for part, w in zip(parts, weights, strict=True) if (g := blocks(part, w))]
        if len(found) < len(parts):
            return numerics.Int8WeightOnlyLinear(lin)
        if len({fmt for fmt, _ in found}) > 1:
            unread["gate and up of two types"] += 2
            return numerics.Int8WeightOnlyLinear(lin)
        rows = torch.from_numpy(np.concatenate([data for _, data in found]))  # a copy
        return BlockLinear(rows, found[0][0], lin.in_features, lin.bias, act)

    model = numerics.replace_linears(model, make)
    if unread:  # one line for the model, not one per layer (a Q5_K_M file has ~100 of them)
        kinds = ", ".join(f"{n} {what}" for what, n in sorted(unread.items()))
        warnings.warn(f"{path.name}: {sum(unread.values())} tensors the block kernel does not "
                      f"read ({kinds}); int8 for those layers", stacklevel=2)  # fmt: skip
    return model


def _type_name(ggml_type: int) -> str:
    import gguf

    try:
        return gguf.GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"ggml type {ggml_type}"
