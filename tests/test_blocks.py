"""The gguf format: Linears that compute with a GGUF file's own blocks, the same bits for a row
however rows are fed, and the model they make is the installed model."""

import os
import subprocess
import sys

import gguf
import numpy as np
import pytest
import torch
from torch import nn

from specguard_graph import ModelLoadError
from specguard_graph.models.install.installer import gguf_path
from specguard_graph.models.install.registry import DEFAULTS
from specguard_graph.models.loading import load_lm
from specguard_graph.models.local import numerics
from specguard_graph.models.local.blocks import FORMATS, BlockLinear, panels, quantize_gguf
from specguard_graph.models.local.draft_head import proposal_head
from specguard_graph.testing import FEEDINGS, batch_of_4, feed

SCALES = {8: [0], 6: [0], 12: [0, 2], 14: [208]}  # where each block's float16 scales sit
K = {8: 96, 6: 96, 12: 512, 14: 512}  # in_features: several blocks per row


def random_blocks(fmt: int, n: int, k: int, seed: int = 0) -> torch.Tensor:
    """n rows of random (so any) blocks, with float16 scales of a weight's size."""
    size, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(fmt)]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n, k // size, nbytes), dtype=np.uint8)
    for at in SCALES[fmt]:
        d = rng.uniform(1e-3, 1e-2, size=(n, k // size)).astype(np.float16)
        raw[:, :, at : at + 2] = d.view(np.uint8).reshape(n, k // size, 2)
    return torch.from_numpy(raw.reshape(n, -1))


def activations(rows: int, k: int, seed: int = 1) -> torch.Tensor:
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed))
    x[:, 3] *= 300.0  # an outlier channel, as real activations have
    return x


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_computes_the_matmul_of_its_dequantized_weight(fmt):
    layer = BlockLinear(random_blocks(fmt, 40, K[fmt]), fmt, K[fmt])
    x = activations(6, K[fmt])
    ref = x.double() @ layer.dequantized().double().T
    err = (layer(x).double() - ref).abs().max() / ref.abs().max()
    # int16 activations per group of 32: ~1e-5 of the largest output, not a wrong block layout
    assert err < 2e-4, f"{FORMATS[fmt]}: relative error {err:.2e}"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_row_is_the_same_bits_alone_in_any_batch_at_any_thread_count(fmt):
    layer = BlockLinear(random_blocks(fmt, 72, K[fmt], seed=2), fmt, K[fmt])
    x = activations(40, K[fmt], seed=3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        whole = layer(x)
        # every register tile (1-4 rows) and its remainders; AMX's tiles of 16 rows, where it runs
        for size in (1, 2, 3, 4, 5, 6, 7, 13, 16, 17):
            parts = torch.cat([layer(x[i : i + size]) for i in range(0, 40, size)])
            assert torch.equal(parts, whole), f"{FORMATS[fmt]}, batches of {size}"
        torch.set_num_threads(1)
        assert torch.equal(layer(x), whole), f"{FORMATS[fmt]}, one thread"
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("bits", [8, 9, 10])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_int8_activations_are_the_int16_products_of_the_int8_values_on_every_copy(fmt, bits):
    """bits=8: from 8 rows on the products run in quads (block_quads.inc), fewer run the int16
    code; bits=-8 is the int16 code on the same int8 values (9, 10: with each group's largest one
    or two at int16, which the quads add apart). Equal bits at every row count, copy and slice
    split (2,304 inputs: two k slices; 44 outputs: an odd and a part panel)."""
    k = 2304 if fmt in (8, 6) else 2560
    layer = BlockLinear(random_blocks(fmt, 44, k, seed=9), fmt, k)
    mm = layer._kernel.block_mm
    for rows in (1, 4, 7, 8, 9, 13, 16, 17, 33):
        x = activations(rows, k, seed=rows)
        ref = mm(x, layer.panels, fmt, 44, 0, -bits)
        for isa in range(layer._kernel.block_isa() + 1):
            got = mm(x, layer.panels, fmt, 44, isa, bits)
            assert torch.equal(got, ref), f"{FORMATS[fmt]}, {rows} rows, copy {isa}"
        alone = torch.cat([mm(x[i : i + 1], layer.panels, fmt, 44, -1, bits)
                           for i in range(rows)])  # fmt: skip
        assert torch.equal(alone, ref), f"{FORMATS[fmt]}, {rows} rows against one by one"
    if bits != 8:
        return
    # int8 is a coarser rounding of the same matmul, not another one: the outlier channel's
    # groups keep their other values to 1/127 of it
    x = activations(6, k)
    exact = x.double() @ layer.dequantized().double().T
    err = [(mm(x, layer.panels, fmt, 44, -1, b).double() - exact).abs().max() / exact.abs().max()
           for b in (16, 8)]  # fmt: skip
    assert err[0] < err[1] < 5e-2, f"{FORMATS[fmt]}: relative errors int16, int8 {err}"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_copy_of_the_kernel_gives_the_avx2_copys_bits(fmt):
    """AVX2, AVX-512 VNNI and AMX (from 16 rows on; 17 and 33 end with a one-row tile)."""
    layer = BlockLinear(random_blocks(fmt, 44, K[fmt], seed=5), fmt, K[fmt])  # a part panel too
    best = layer._kernel.block_isa()
    if best == 0:
        pytest.skip("this CPU has no AVX-512 VNNI: every call would run the AVX2 copy")
    for rows in (1, 3, 4, 5, 6, 7, 9, 16, 17, 33):
        x = activations(rows, K[fmt], seed=rows)
        ours = [
            layer._kernel.block_mm(x, layer.panels, fmt, 44, isa, 16) for isa in range(best + 1)
        ]
        for isa in range(1, best + 1):
            assert torch.equal(ours[0], ours[isa]), f"{FORMATS[fmt]}, {rows} rows, copy {isa}"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_the_copies_agree_where_several_rows_meet_a_panel_in_k_slices(fmt):
    """Several rows meet a panel 2,048 weights at a time, carrying each output's sums from
    slice to slice; the VNNI copy takes two panels per 512-bit vector there (block_wide.inc),
    splitting and joining the carried sums. 2,304 inputs: two slices; 44 outputs: an odd
    panel and a part panel in every chunk."""
    k = 2304
    layer = BlockLinear(random_blocks(fmt, 44, k, seed=8), fmt, k)
    best = layer._kernel.block_isa()
    if best == 0:
        pytest.skip("this CPU has no AVX-512 VNNI: every call would run the AVX2 copy")
    for rows in (2, 4, 5, 6, 11, 15):
        x = activations(rows, k, seed=rows)
        ours = [
            layer._kernel.block_mm(x, layer.panels, fmt, 44, isa, 16) for isa in range(best + 1)
        ]
        for isa in range(1, best + 1):
            assert torch.equal(ours[0], ours[isa]), f"{FORMATS[fmt]}, {rows} rows, copy {isa}"
        alone = torch.cat([layer._kernel.block_mm(x[i : i + 1], layer.panels, fmt, 44, best, 16)
                           for i in range(rows)])  # fmt: skip
        assert torch.equal(alone, ours[best]), f"{FORMATS[fmt]}, {rows} rows against one by one"


def one_hot_q8_0(k: int) -> BlockLinear:
    """A Q8_0 layer whose output n is input n (code 1, d = 1.0): it reads each rounded
    activation back as float32(q * dx), so the rounding tests see the kernel's values."""
    raw = np.zeros((k, k // 32, 34), dtype=np.uint8)
    raw[:, :, :2] = np.frombuffer(np.float16(1.0).tobytes(), dtype=np.uint8)
    for n in range(k):
        raw[n, n // 32, 2 + n % 32] = 1
    return BlockLinear(torch.from_numpy(raw.reshape(k, -1)), 8, k)


def test_activations_round_to_int16_by_the_documented_formula_bit_for_bit():
    """Per group of 32: dx = max|x| / 32767, q = clip(rint(x / dx), ±32767), 0 where dx = 0; a
    NaN counts as 0 in the max and rounds to -32767. A one-hot Q8_0 weight (scale 1) reads each
    activation back as float32(q * dx), so the kernel's vectorised rounding is pinned to the
    scalar formula in every copy, for ties, zeros, subnormals and outliers alike."""
    k = 96
    layer = one_hot_q8_0(k)
    x = activations(20, k, seed=7).numpy()
    x[0, :32] = 0.0  # dx = 0
    x[1, 32:64] = np.float32(1e-40) * np.arange(-16, 16)  # subnormals
    x[2, :32] = np.float32(2.0**-10) * (np.arange(32) - 15.5)  # x / dx ends in .5: ties
    x[2, 31] = np.float32(32767 * 2.0**-10)  # so that dx = 2^-10 exactly
    x[3, 64:96] *= 1e30
    x[4, 40] = np.nan
    g = x.reshape(20, -1, 32)
    amax = np.fmax.reduce(np.abs(g), axis=2, initial=np.float32(0), keepdims=True)
    dx = (amax / np.float32(32767)).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.clip(np.nan_to_num(np.rint(g / dx), nan=-32767), -32767, 32767)
    q = np.where(dx > 0, q, 0).astype(np.int16)  # the kernel's int16 (no -0)
    want = torch.from_numpy((q.astype(np.float32) * dx).reshape(20, k))
    assert q[2, 0, :4].tolist() == [-16, -14, -14, -12]  # x / dx = -15.5, -14.5, ...: to even
    for isa in range(layer._kernel.block_isa() + 1):
        got = layer._kernel.block_mm(torch.from_numpy(x), layer.panels, 8, k, isa, 16)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), f"copy {isa}"


@pytest.mark.parametrize("bits", [9, 10])
def test_int8_with_int16_outliers_rounds_by_the_documented_formula_bit_for_bit(bits):
    """bits=9 (10): per group of 32 the largest |x| (two largest; the first of equals) stay on
    the int16 grid of the step the others set: dx = max(next largest / 127, largest / 32767),
    q = rint(x / dx), clipped to +-32767 for those and +-127 for the rest. Read back through a
    one-hot Q8_0 weight as float32(q * dx), from 1 row (int16 products) and 20 (quads)."""
    n, k = bits - 8, 96
    layer = one_hot_q8_0(k)
    x = activations(20, k, seed=11).numpy()
    x[0, :32] = 0.0  # dx = 0
    x[1, 32:64] = 1.0  # all equal: the first n are the int16 ones
    x[2, 64:96] = 0.0
    x[2, 70] = 5.0  # one value: dx = 5 / 32767, and it is 32767
    x[3, 5] = 1e6  # an outlier far past 258x the rest: the rest round to 0
    x[4, 40] = x[4, 41] = -400.0  # two equal outliers
    g = x.reshape(20, -1, 32).astype(np.float64)
    order = np.argsort(-np.abs(g), axis=2, kind="stable")  # the first of equals first
    mag = np.take_along_axis(np.abs(g), order, axis=2)
    dx = np.maximum(mag[..., n] / 127, mag[..., 0] / 32767).astype(np.float32)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.rint(g.astype(np.float32) / dx)
    top = np.zeros_like(g, dtype=bool)
    np.put_along_axis(top, order[..., :n], True, axis=2)
    q = np.where(top, np.clip(r, -32767, 32767), np.clip(r, -127, 127))
    q = np.where(dx > 0, q, 0).astype(np.int32)  # the kernel's integers (no -0)
    want = torch.from_numpy((q.astype(np.float32) * dx).reshape(20, k))
    assert q[2, 2].max() == 32767 and q[3, 0, 5] == 32767 and q[3, 0, 6] == 0
    for isa in range(layer._kernel.block_isa() + 1):
        for rows in (1, 20):
            got = torch.cat([layer._kernel.block_mm(torch.from_numpy(x[i : i + rows]),
                                                    layer.panels, 8, k, isa, bits)
                             for i in range(0, 20, rows)])  # fmt: skip
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (isa, rows)


def test_the_environment_holds_the_kernel_to_a_lower_copy():
    """SPECGUARD_AMX=0 keeps a process on VNNI; torch held to AVX2 keeps the kernel on AVX2."""
    best = BlockLinear(random_blocks(8, 8, 96), 8, 96)._kernel.block_isa()
    code = "from specguard_graph.models.local import int8_kernel as k; print(k.load().block_isa())"
    for env, want in (({"SPECGUARD_AMX": "0"}, min(best, 1)), ({"ATEN_CPU_CAPABILITY": "avx2"}, 0)):
        run = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                             capture_output=True, text=True, check=True)  # fmt: skip
        assert int(run.stdout.split()[-1]) == want, env


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_the_panel_layout_is_the_files_blocks_reordered(fmt):
    blocks = random_blocks(fmt, 13, K[fmt], seed=6)  # 13: the last panel is part padding
    codes = panels.codes(fmt, blocks.numpy())
    ref = gguf.quants.dequantize(blocks.numpy(), gguf.GGMLQuantizationType(fmt))
    assert np.array_equal(panels.weights(codes), ref)
    packed = panels.to_panels(codes)
    assert packed.shape == (2, 8 * blocks.shape[1])  # the same bytes per output
    back = panels.from_panels(fmt, packed, 13)
    assert np.array_equal(back.q, codes.q) and np.array_equal(panels.weights(back), ref)


def test_rows_keeps_each_kept_output_the_same_bits():
    layer = BlockLinear(random_blocks(12, 64, 512, seed=4), 12, 512)
    ids = torch.tensor([5, 0, 63, 17])
    x = activations(3, 512)
    assert torch.equal(layer.rows(ids)(x), layer(x)[:, ids])


def test_blocks_that_do_not_fit_are_refused_with_what_is_wrong():
    blocks = random_blocks(12, 4, 512)
    with pytest.raises(ValueError, match="bytes per row"):
        BlockLinear(blocks, 12, 256)
    with pytest.raises(ValueError, match="fmt must be one of"):
        BlockLinear(blocks, 2, 512)
    with pytest.raises(ValueError, match="uint8"):
        BlockLinear(blocks.float(), 12, 512)
    with pytest.raises(ValueError, match=r"act must be one of \(16, 8, 9\)"):
        BlockLinear(blocks, 12, 512, act=4)


@pytest.fixture(scope="module")
def draft_gguf():
    return load_lm("draft", quantize="gguf")


@pytest.fixture(scope="module")
def draft_fp32():
    return load_lm("draft", quantize="none").model


def test_the_draft_reads_every_linear_from_its_gguf_blocks(draft_gguf, draft_fp32):
    model = draft_gguf.model
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert numerics.row_invariant(model)
    mlp = model.model.layers[0].mlp
    assert isinstance(mlp, numerics.GatedMLP) and isinstance(mlp.gate_up, BlockLinear)
    assert FORMATS[model.lm_head.fmt] == "Q8_0"  # the file's own output.weight, untied
    # the blocks are the installed model: the fp32 weights were dequantised from them
    ours = model.model.layers[1].self_attn.v_proj.dequantized()
    assert torch.equal(ours, draft_fp32.model.layers[1].self_attn.v_proj.weight.detach())


@pytest.fixture(scope="module")
def draft_gguf_a8():
    return load_lm("draft", quantize="gguf-a8")


@pytest.fixture(scope="module")
def draft_gguf_a8o():
    return load_lm("draft", quantize="gguf-a8o")


@pytest.mark.parametrize("fixture", ["draft_gguf", "draft_gguf_a8", "draft_gguf_a8o"])
def test_the_draft_in_gguf_scores_a_token_the_same_however_it_is_fed(fixture, request):
    """gguf-a8: a forward of 8 rows or more meets the weights in int8 quads, fewer rows run the
    int16 code on the same int8 values; the bits may not tell them apart (gguf-a8o: nor the
    int16 values the quads add apart)."""
    lm = request.getfixturevalue(fixture)
    ids = lm.encode("Natalia sold clips to 48 of her friends in April, and half as many in May.")
    others = [lm.encode("How many clips did Natalia sell?"), lm.encode("48 / 2 = 24.")]
    one, _ = feed(lm.model, [ids * 2], "one forward")
    for feeding in FEEDINGS[1:]:
        rows = batch_of_4(ids * 2, others * 2) if feeding == "row of 4" else [ids * 2]
        lp, _ = feed(lm.model, rows, feeding)
        assert torch.equal(lp[:1], one), feeding


def test_the_drafts_proposal_head_keeps_its_blocks_rows_bit_for_bit(draft_gguf):
    lm = draft_gguf
    lm.proposal_vocab = 32768
    try:
        head, ids = proposal_head(lm)
        full = lm.model.get_output_embeddings()
        assert isinstance(head, BlockLinear) and len(ids) > 32768  # the specials kept too
        x = activations(2, full.in_features)
        assert torch.equal(head(x), full(x)[:, ids])
    finally:
        lm.proposal_vocab = 0


def test_gguf_needs_a_file_with_the_models_blocks(model_dirs, draft_fp32):
    with pytest.raises(ModelLoadError, match="no GGUF source"):
        load_lm("draft", model_dirs / "draft", quantize="gguf")
    with pytest.raises(ValueError, match="is not this model's"):  # refused before any change
        quantize_gguf(draft_fp32, gguf_path(DEFAULTS["target"]))
    assert type(draft_fp32.model.layers[0].self_attn.q_proj) is nn.Linear


def test_a_file_with_block_types_the_kernel_does_not_read_warns_once(tmp_path):
    """`auto` picks gguf for any `.gguf`: a file with other types (a Q5_K_M has ~100 such
    tensors) computes those layers in int8 and says so in one warning, not one per layer."""
    import warnings

    from specguard_graph.models.local.blocks.source import tensor_name
    from specguard_graph.testing import tiny_lm

    model = tiny_lm(layers=2, hidden=128, heads=4, seed=5).model
    q8 = gguf.GGMLQuantizationType.Q8_0
    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "qwen2")
    for name, lin in model.named_modules():
        if not isinstance(lin, nn.Linear) or not tensor_name(name):
            continue
        weight = lin.weight.detach().numpy()
        if name.endswith("layers.1.mlp.down_proj"):  # F16: no kernel reads it
            w.add_tensor(tensor_name(name), weight.astype(np.float16))
            continue
        raw = gguf.quants.quantize(weight, q8)
        lin.weight.data = torch.from_numpy(gguf.quants.dequantize(raw, q8))  # the blocks' model
        w.add_tensor(tensor_name(name), raw, raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize_gguf(model, path)
    said = [str(c.message) for c in caught if "block kernel" in str(c.message)]
    assert said == ["tiny.gguf: 2 tensors the block kernel does not read (1 F16, 1 missing); "
                    "int8 for those layers"]  # fmt: skip
    layers = model.model.layers
    assert isinstance(layers[1].mlp.down_proj, numerics.Int8WeightOnlyLinear)
    assert isinstance(layers[0].mlp.down_proj, BlockLinear)
    assert isinstance(model.lm_head, numerics.Int8WeightOnlyLinear)  # the head: no tensor
    from types import SimpleNamespace

    from specguard_graph.bench.run import weights

    first_int8 = nn.Sequential(layers[1].mlp.down_proj, layers[0].mlp.down_proj)
    assert weights(SimpleNamespace(model=first_int8), SimpleNamespace(model=model)) == "gguf/gguf"


def test_gguf_a8_rounds_activations_to_int8_and_keys_its_own_prefixes(draft_gguf, draft_gguf_a8):
    from specguard_graph.models.local.prefix_store.disk import fingerprint

    blocks = [m for m in draft_gguf_a8.model.modules() if isinstance(m, BlockLinear)]
    assert blocks and {m.act for m in blocks} == {8}
    ids = draft_gguf.encode("Natalia sold clips to 48 of her friends in April.")
    a16, _ = feed(draft_gguf.model, [ids], "one forward")
    a8, _ = feed(draft_gguf_a8.model, [ids], "one forward")
    assert not torch.equal(a16, a8)  # another rounding, so never the other format's KV
    assert fingerprint(draft_gguf.model) != fingerprint(draft_gguf_a8.model)


def test_gguf_a8o_keeps_outliers_closer_to_int16_than_a8_and_keys_its_own_prefixes(
    draft_gguf, draft_gguf_a8, draft_gguf_a8o
):
    """Each group's largest activation at int16 sets no step for the rest: the log-probs move
    less from int16's than int8's do (the KL to float32 falls ~3x on GSM8K, docs/numerics.md)."""
    from specguard_graph.models.local.prefix_store.disk import fingerprint

    assert {m.act for m in draft_gguf_a8o.model.modules() if isinstance(m, BlockLinear)} == {9}
    text = "Natalia sold clips to 48 of her friends in April, and half as many clips in May."
    ids = draft_gguf.encode(text + " How many clips did Natalia sell altogether?")
    models = {"16": draft_gguf, "8": draft_gguf_a8, "8o": draft_gguf_a8o}
    lp = {k: feed(lm.model, [ids], "one forward")[0] for k, lm in models.items()}
    moved = {k: (lp[k].exp() * (lp[k] - lp["16"])).sum(-1).mean().item() for k in ("8", "8o")}
    assert 0 < moved["8o"] < moved["8"] / 2, moved  # KL(int8 formats || int16)
    assert len({fingerprint(lm.model) for lm in models.values()}) == 3
