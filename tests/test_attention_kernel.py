"""The fixed-order attention kernel and the growing KV cache: softmax attention to float32
precision, one fixed computation per row whatever the call (rows, keys, batch, threads, the
cache's spare room), and a cache that behaves as transformers' own in every operation."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from specguard_graph.models.local import capture, int8_kernel
from specguard_graph.models.local.kv_cache import MIN_ROOM, GrowingLayer, new_cache
from specguard_graph.testing import tiny_lm

kernel = int8_kernel.load()
T = torch.Tensor
needs_kernel = pytest.mark.skipif(kernel is None, reason="the kernel needs x86-64 AVX2 + FMA")


class _Groups:
    num_key_value_groups = 3


def _qkv(b: int, n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, 6, n, d, generator=g)
    return q, torch.randn(b, 2, n, d, generator=g), torch.randn(b, 2, n, d, generator=g)


def _fixed(q: T, k: T, v: T, mask: T | None = None, weights: bool = False) -> tuple:
    return capture._attention_fixed(kernel, q, k, v, mask, None, weights)


@needs_kernel
@pytest.mark.parametrize("d", [64, 128, 20])  # the models' head sizes, and a scalar tail
def test_causal_attention_and_its_weights_match_float64(d: int) -> None:
    q, k, v = _qkv(2, 45, d)
    out, w = _fixed(q, k, v, weights=True)
    ref, ref_w = capture._attention64(_Groups(), q, k, v, None, None, True)
    assert out.shape == ref.shape == (2, 45, 6, d)
    assert (out - ref).abs().max() < 2e-6
    assert (w - ref_w).abs().max() < 1e-6
    assert torch.all(w.triu(1) == 0)  # nothing after the row's own position


@needs_kernel
def test_a_row_is_the_same_bits_alone_in_a_block_in_a_batch_and_on_any_threads() -> None:
    q, k, v = _qkv(3, 150, 128, seed=1)  # rows go in blocks of 8, keys in chunks of 128
    out, _ = _fixed(q, k, v)
    for i in (0, 1, 31, 130, 149):  # decoded alone after its cache of i keys
        alone, _ = _fixed(q[:, :, i : i + 1], k[:, :, : i + 1], v[:, :, : i + 1])
        assert torch.equal(alone[:, 0], out[:, i]), i
    chunk, _ = _fixed(q[:, :, 123:139], k[:, :, :139], v[:, :, :139])  # a verification chunk
    assert torch.equal(chunk, out[:, 123:139])
    one, _ = _fixed(q[1:2], k[1:2], v[1:2])  # one of a batch
    assert torch.equal(one[0], out[1])
    threads = torch.get_num_threads()
    try:
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            assert torch.equal(_fixed(q, k, v)[0], out), t
    finally:
        torch.set_num_threads(threads)


@needs_kernel
def test_masked_keys_are_left_out_not_added_as_zeros() -> None:
    q, k, v = _qkv(1, 40, 64, seed=2)
    keep = torch.tensor([j % 3 != 1 for j in range(40)])
    mask = keep[None, None, None, :].expand(1, 1, 40, 40).clone()
    out, w = _fixed(q, k, v, mask=mask, weights=True)
    sub, _ = _fixed(
        q,
        k[:, :, keep],
        v[:, :, keep],
        mask=torch.ones(1, 1, 40, int(keep.sum()), dtype=torch.bool),
    )
    assert torch.equal(out, sub)  # the same terms in the same order: the same bits
    assert torch.all(w[..., ~keep] == 0)


@needs_kernel
def test_keys_read_through_a_view_with_spare_room_give_the_same_bits() -> None:
    q, k, v = _qkv(2, 30, 64, seed=3)
    kb, vb = torch.randn(2, 2, 64, 64), torch.randn(2, 2, 64, 64)
    kb[:, :, :30], vb[:, :, :30] = k, v
    assert not kb[:, :, :30].is_contiguous()
    assert torch.equal(_fixed(q, kb[:, :, :30], vb[:, :, :30])[0], _fixed(q, k, v)[0])


@needs_kernel
def test_bad_arguments_are_named() -> None:
    q, k, v = _qkv(1, 4, 64)
    mask = torch.ones(1, 4, 4, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="float32"):
        kernel.attention(q.double(), k, v, mask, 0.1, False, -1)
    with pytest.raises(RuntimeError, match="mask"):
        kernel.attention(q, k, v, mask[:, :, :3], 0.1, False, -1)
    with pytest.raises(RuntimeError, match="multiple of kv heads"):
        kernel.attention(q[:, :5], k, v, mask, 0.1, False, -1)
    with pytest.raises(RuntimeError, match="copy=3 is not run here"):
        kernel.attention(q, k, v, mask, 0.1, False, 3)


# (batch, heads, kv heads, rows, keys, head size): the models' shapes (d = 128 with 6 heads per
# kv head, d = 64 with 7), single rows after long caches (decode), row blocks cut short, key
# chunks crossed, and sizes off the vector width (scalar tails)
SHAPES = [
    (1, 12, 2, 1, 300, 128),
    (2, 12, 2, 45, 45, 128),
    (1, 14, 2, 70, 70, 64),
    (1, 14, 2, 3, 300, 64),
    (2, 6, 2, 33, 50, 20),
    (1, 7, 1, 17, 17, 8),
    (1, 4, 4, 9, 21, 7),
    (1, 5, 1, 13, 140, 128),
    (1, 8, 2, 19, 264, 24),
    (1, 6, 2, 11, 150, 32),  # AVX2's pairs of heads at their narrowest, and a head left over
]


@needs_kernel
def test_the_fast_copies_compute_the_plain_copys_bits() -> None:
    """Row blocks, key chunks and wide registers change how fast, never what: a machine with
    AVX-512 and one without give every row the same bits as the plain reference."""
    copies = [1, 2] if kernel.block_isa() >= 1 else [1]  # 2: AVX-512, where this process has it
    g = torch.Generator().manual_seed(7)
    for b, h, kvh, n, kv, d in SHAPES:
        q = torch.randn(b, h, n, d, generator=g) * 2
        k, v = torch.randn(b, kvh, kv, d, generator=g), torch.randn(b, kvh, kv, d, generator=g)
        causal = torch.empty(0, dtype=torch.bool)
        masked = torch.rand(b, n, kv, generator=g) > 0.3
        for mask in (causal, masked):
            plain = kernel.attention(q, k, v, mask, d**-0.5, True, 0)
            for c in copies:
                fast = kernel.attention(q, k, v, mask, d**-0.5, True, c)
                assert torch.equal(plain[0], fast[0]), (c, n, kv, d)
                assert torch.equal(plain[1], fast[1]), (c, n, kv, d)


def _kv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 2, n, 8, generator=g), torch.randn(2, 2, n, 8, generator=g)


def test_the_growing_layer_holds_what_concatenation_holds_through_every_operation() -> None:
    ours, theirs = GrowingLayer(), DynamicLayer()

    def both(op: str, *args: object) -> None:
        for layer in (ours, theirs):
            getattr(layer, op)(*args)
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)

    both("update", *_kv(5, 0))  # a prefill
    for t in range(MIN_ROOM):  # decode past the first buffer: it doubles
        both("update", *_kv(1, t + 1))
    assert ours._kbuf.shape[-2] > MIN_ROOM
    both("crop", -7)  # a rejected speculation
    both("update", *_kv(3, 99))  # written over the cropped positions
    fork = copy.deepcopy(ours)  # a fork shares nothing with its parent
    fork.update(*_kv(4, 100))
    assert ours.keys.shape[-2] == theirs.keys.shape[-2]
    both("update", *_kv(1, 101))
    assert not torch.equal(fork.keys[:, :, -5], ours.keys[:, :, -1])
    both("batch_repeat_interleave", 3)  # k sampled rows
    both("update", *(t.repeat(3, 1, 1, 1) for t in _kv(1, 102)))
    both("batch_select_indices", torch.tensor([4]))  # one row adopted
    both("update", *[t[:1] for t in _kv(2, 104)])


def test_a_model_decodes_the_same_logits_on_the_growing_cache() -> None:
    lm = tiny_lm(layers=2, hidden=64, heads=4, seed=0)
    ids = torch.tensor([lm.encode("Two plus two is four. Three plus three is")])
    logits = {}
    for name, cache in (("grow", new_cache(lm.model.config)), ("dyn", DynamicCache())):
        with torch.inference_mode():
            out = [lm.model(input_ids=ids, cache=cache, use_cache=True).logits[0, -1]]
            tok = out[-1].argmax().view(1, 1)
            for _ in range(6):
                out.append(lm.model(input_ids=tok, cache=cache, use_cache=True).logits[0, -1])
                tok = out[-1].argmax().view(1, 1)
        logits[name] = torch.stack(out)
    assert torch.equal(logits["grow"], logits["dyn"])


@needs_kernel
def test_a_model_gives_the_same_logits_on_every_attention_copy() -> None:
    lm = tiny_lm(layers=2, hidden=64, heads=4, seed=1)
    ids = torch.tensor([lm.encode("Two plus two is four. Three plus three is six, and")])
    copies = [0, 1, 2] if kernel.block_isa() >= 1 else [0, 1]
    logits = []
    for c in copies:
        with capture.attention_copy(c), torch.inference_mode():
            logits.append(lm.model(input_ids=ids, cache=new_cache(lm.model.config)).logits)
    assert all(torch.equal(logits[0], other) for other in logits[1:])
    with pytest.raises(ValueError, match="copy must be"):
        with capture.attention_copy(5):
            pass
