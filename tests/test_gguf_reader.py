"""The blocks' GGUF reader (`blocks/reader.py`) steps over metadata arrays and must find every
tensor where `gguf.GGUFReader` does, byte for byte."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from specguard_graph.models.install.installer import gguf_path
from specguard_graph.models.install.registry import DEFAULTS
from specguard_graph.models.local.blocks.reader import BlocksReader


def same_tensors(path: str) -> BlocksReader:
    ours, lib = BlocksReader(path), gguf.GGUFReader(path)
    assert [t.name for t in ours.tensors] == [t.name for t in lib.tensors]
    for a, b in zip(ours.tensors, lib.tensors, strict=True):
        assert a.tensor_type == b.tensor_type and a.data_offset == b.data_offset
        assert list(a.shape) == list(b.shape) and a.data.dtype == b.data.dtype
        assert np.array_equal(a.data, b.data)
    assert ours.alignment == lib.alignment and ours.data_offset == lib.data_offset
    return ours


def test_arrays_of_every_kind_are_stepped_over_and_the_tensors_found(tmp_path):
    path = str(tmp_path / "t.gguf")
    w = gguf.GGUFWriter(path, "qwen2")
    w.add_uint32("general.alignment", 64)  # the data section moves: the skip must be exact
    w.add_array("tokenizer.ggml.tokens", ["a", "", "ünï", "x" * 300])
    w.add_array("tokenizer.ggml.token_type", [1, 2, 3])
    w.add_array("test.floats", [0.5, -1.0])
    w.add_array("test.nested", [[1, 2], [3, 4, 5]])
    w.add_array("test.empty", [])
    w.add_string("test.after", "still read")
    rng = np.random.default_rng(0)
    w.add_tensor("a.weight", rng.standard_normal((3, 5)).astype(np.float32))
    q8 = rng.integers(0, 256, (4, 34), dtype=np.uint8)  # four Q8_0 blocks of 32 weights
    w.add_tensor("b.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ours = same_tensors(path)
    assert ours.alignment == 64
    assert "tokenizer.ggml.tokens" not in ours.fields and "test.nested" not in ours.fields
    after = ours.fields["test.after"]
    assert bytes(after.parts[after.data[0]]).decode() == "still read"
    assert np.array_equal(ours.tensors[1].data, q8)


@pytest.mark.parametrize("role", ["draft", "target"])
def test_the_embedded_models_files_read_the_same(role):
    path = gguf_path(DEFAULTS[role])
    if not path.exists():
        pytest.skip(f"{path} is not installed (`specguard models install`)")
    ours = same_tensors(str(path))
    assert ours.fields["general.architecture"].contents() == "qwen2"
