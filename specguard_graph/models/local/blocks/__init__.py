"""The `gguf` CPU weight format: each Linear computes with its GGUF tensor's own quantised blocks
(Q8_0, Q5_0, Q4_K, Q6_K), never re-quantised, in the row-invariant kernel
`kernels/block_gemm.cpp`. `source` finds and reads the file, `panels` lays the blocks of eight
outputs side by side for the kernel, `linear` holds the layers."""

from . import panels
from .linear import BlockLinear, quantize_gguf
from .source import FORMATS, gguf_source

__all__ = ["FORMATS", "BlockLinear", "gguf_source", "panels", "quantize_gguf"]
