"""A GGUF file's tensors without its metadata arrays.

`gguf.GGUFReader` turns every metadata value into numpy views, one per array item: the
embedded models' tokenizer arrays (151,936 tokens, their types, ~150k merges) took ~9 s per
file on this project's CPU, over half of loading the draft in the `gguf` format and a third of
the target, and the blocks need none of them. This reader is the library's own, except that
a metadata array is stepped over instead of read (it is then absent from `fields`); scalar
fields, `general.alignment` included, and every tensor are read by the library's code as
before."""

from __future__ import annotations

import struct

import gguf
import numpy as np


class BlocksReader(gguf.GGUFReader):
    """`gguf.GGUFReader` minus the metadata arrays (`fields` keeps the scalar ones)."""

    def _build_fields(self, offs: int, count: int) -> int:
        if self.byte_order == "S":  # a file of the other byte order: the library's full read
            return super()._build_fields(offs, count)
        for _ in range(count):
            klen, kdata = self._get_str(offs)
            at = offs + int(klen.nbytes + kdata.nbytes)
            if int(self._get(at, np.uint32)[0]) == gguf.GGUFValueType.ARRAY:
                offs = self._skip_array(at + 4)
            else:
                offs = super()._build_fields(offs, 1)
        return offs

    def _skip_array(self, offs: int) -> int:
        """The offset just past the array value at `offs` (item type, count, items)."""
        item, n = struct.unpack_from("<IQ", self.data, offs)
        offs += 12
        kind = gguf.GGUFValueType(item)
        if kind == gguf.GGUFValueType.STRING:
            for _ in range(n):
                offs += 8 + struct.unpack_from("<Q", self.data, offs)[0]
            return offs
        if kind == gguf.GGUFValueType.ARRAY:
            for _ in range(n):
                offs = self._skip_array(offs)
            return offs
        return offs + n * np.dtype(self.gguf_scalar_to_np[kind]).itemsize
