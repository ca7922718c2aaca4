"""Merge a LoRA adapter into the draft's GGUF: the distilled draft in the engine's own format.

Each adapted tensor becomes dequantised weight + (alpha / r) B A, re-quantised to Q8_0; every
other tensor and all metadata are copied byte for byte. Why Q8_0 and not the tensor's own
Q5_0: a Q5_0 step is 1/16 of a block's largest weight, and a LoRA update is mostly smaller than
half a step, so re-quantising to Q5_0 rounds most of it away. Q8_0's step is 1/127. The block
kernel computes Q8_0 rows as it computes the base's, so the draft stays row-invariant (lossless
text = target, exact prefix reuse). The cost in bytes read per token is `bytes_per_token`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import ModelLoadError
from ..models.local.blocks.source import tensor_name

ADAPTER = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
_PREFIX = "base_model.model."
Progress = Callable[[int, int], None]


def gguf_name(module: str) -> str | None:
    return "output.weight" if module == "lm_head" else tensor_name(module)


def deltas(adapter: Path) -> dict[str, np.ndarray]:
    """GGUF tensor name -> the adapter's float32 update (rows = outputs), from peft's files;
    a missing, truncated or foreign file gets one line naming it."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        config = json.loads((adapter / CONFIG).read_text())
        scale = float(config["lora_alpha"]) / float(config["r"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        raise ModelLoadError(f"{adapter / CONFIG}: not a LoRA adapter config ({exc})") from None
    try:
        weights = load_file(str(adapter / ADAPTER))
    except (OSError, SafetensorError) as exc:
        raise ModelLoadError(f"{adapter / ADAPTER}: unreadable adapter weights ({exc})") from None
    out: dict[str, np.ndarray] = {}
    for key, a in weights.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key.removeprefix(_PREFIX).removesuffix(".lora_A.weight")
        b = weights.get(key.replace(".lora_A.", ".lora_B."))
        name = gguf_name(module)
        if b is None or name is None or a.ndim != 2 or b.ndim != 2 or b.shape[1] != a.shape[0]:
            raise ModelLoadError(f"{adapter / ADAPTER}: {module} is not a LoRA pair of this "
                                 "model's layers")  # fmt: skip
        out[name] = scale * (b.astype(np.float32) @ a.astype(np.float32))
    if not out:
        raise ModelLoadError(f"{adapter / ADAPTER}: holds no LoRA weights")
    return out


def merged_rows(data: np.ndarray, kind: int, delta: np.ndarray, where: str) -> np.ndarray:
    """A tensor's blocks with `delta` added, as Q8_0 blocks."""
    import gguf

    weight = gguf.quants.dequantize(data, kind)
    if weight.shape != delta.shape:
        raise ModelLoadError(f"{where}: shape {delta.shape} does not fit the base model's "
                             f"{weight.shape}: an adapter for another base model")  # fmt: skip
    return gguf.quants.quantize(weight + delta, gguf.GGMLQuantizationType.Q8_0)


def merge(base: Path, adapter: Path, out: Path, progress: Progress | None = None) -> list[str]:
    """Write `out`: `base` with `adapter` merged (module docstring); returns the tensors
    changed. Written under a temporary name and renamed, so `out` is whole or absent."""
    import gguf

    updates = deltas(adapter)
    reader = gguf.GGUFReader(str(base))
    names = {t.name for t in reader.tensors}
    if missing := sorted(set(updates) - names):
        raise ModelLoadError(f"{adapter / ADAPTER}: {missing[0]} is not in {base.name}: an "
                             "adapter for another base model")  # fmt: skip
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    tmp = out.with_name(out.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    writer.add_string("specguard.distilled.adapter", adapter.name)
    tensors = []
    for t in reader.tensors:
        data, kind = np.asarray(t.data), t.tensor_type
        if t.name in updates:
            where = f"{adapter / ADAPTER} ({t.name})"
            data = merged_rows(data, kind, updates[t.name], where)
            kind = gguf.GGMLQuantizationType.Q8_0
        tensors.append(data)
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for i, data in enumerate(tensors):
        writer.write_tensor_data(data)
        if progress:
            progress(i + 1, len(tensors))
    writer.close()
    tmp.replace(out)
    return sorted(updates)


def bytes_per_token(path: Path) -> int:
    """Bytes of weights one decode step reads: every tensor but the embedding table (one row)."""
    from ..models.local.blocks.reader import BlocksReader

    return sum(int(t.n_bytes) for t in BlocksReader(str(path)).tensors
               if t.name != "token_embd.weight")  # fmt: skip
