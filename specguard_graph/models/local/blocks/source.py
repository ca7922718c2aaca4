"""Where a model's GGUF blocks come from, and which tensor each Linear is.

A `.gguf` path is its own source. An installed default model (a directory converted from the
registry's GGUF, `install/installer.py`) names its source by SHA-256 in its marker; the GGUF stays
beside it in the cache, so the blocks are read from there. A distilled draft's marker names the
merged GGUF inside its directory. Anything else has no blocks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

FORMATS = {8: "Q8_0", 6: "Q5_0", 12: "Q4_K", 14: "Q6_K"}
"""The ggml block types the kernel computes with, by ggml type id."""

_LINEARS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def gguf_source(path: str | Path) -> Path | None:
    """The GGUF file whose blocks are the model at `path`, or None."""
    path = Path(path).expanduser()
    if path.is_file():
        return path if path.suffix == ".gguf" else None
    from ...install.installer import MARKER, gguf_path
    from ...install.registry import DEFAULTS, ChunkedGGUF

    try:
        marker = json.loads((path / MARKER).read_text())
        sha = marker["source_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if isinstance(own := marker.get("gguf"), str) and (path / own).is_file():
        return path / own  # a distilled draft keeps its merged GGUF inside (distill/install.py)
    for spec in DEFAULTS.values():
        if isinstance(spec, ChunkedGGUF) and spec.sha256 == sha and gguf_path(spec).is_file():
            return gguf_path(spec)
    return None


def tensor_name(module: str) -> str | None:
    """The GGUF tensor of a transformers decoder layer's Linear (`model.layers.3.mlp.up_proj`
    -> `blk.3.ffn_up.weight`), or None for a module GGUF does not name that way (the head is
    `output.weight`, or `token_embd.weight` where the file ties it)."""
    m = _LAYER.match(module)
    if m and m.group(2) in _LINEARS:
        return f"blk.{m.group(1)}.{_LINEARS[m.group(2)]}.weight"
    return None


class Tensors:
    """A GGUF file's tensors: `get(name)` -> (ggml type id, rows of bytes) or None."""

    def __init__(self, path: Path):
        from .reader import BlocksReader

        self.path = path
        reader = BlocksReader(str(path))
        self._tensors = {t.name: t for t in reader.tensors}

    def get(self, name: str) -> tuple[int, np.ndarray] | None:
        t = self._tensors.get(name)
        if t is None:
            return None
        return int(t.tensor_type), np.asarray(t.data)

    def dequantized_row(self, name: str, row: int) -> np.ndarray:
        """One row of a tensor in float32, by the `gguf` package's reference dequantiser."""
        import gguf

        t = self._tensors[name]
        return gguf.quants.dequantize(np.asarray(t.data)[row : row + 1], t.tensor_type)[0]
