"""The project's int8 kernel: the right sums, one fixed sum per output whatever the rows, a build
from an empty directory, one OpenMP runtime, and torch's kernel where it is switched off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from specguard_graph.models.local import int8_kernel, numerics

kernel = int8_kernel.load()
needs_kernel = pytest.mark.skipif(kernel is None, reason="the kernel needs x86-64 AVX2 + FMA")


def _weights(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
    return q, torch.rand(n, generator=g) / 50 + 1e-3


@needs_kernel
@pytest.mark.parametrize(("n", "k"), [(64, 96), (128, 300), (192, 513)])
def test_mm_is_the_scaled_integer_product(n: int, k: int) -> None:
    q, scale = _weights(n, k)
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(1))
    y = kernel.mm(x, kernel.pack(q), scale)
    ref = (x.double() @ q.double().T) * scale.double()
    # float32 sums of k products: well inside 1e-5 of the float64 result's scale
    assert (y.double() - ref).abs().max() <= 1e-5 * ref.abs().max()


@needs_kernel
def test_every_row_is_the_same_sum_whatever_the_rows_fed_with_it() -> None:
    q, scale = _weights(128, 700)  # k spans partial cache blocks (256)
    blocks = kernel.pack(q)
    x = torch.randn(300, 700, generator=torch.Generator().manual_seed(2))
    y = kernel.mm(x, blocks, scale)  # 300 rows: several 120-row blocks, 6-row tiles
    # every row count of the few-row path (1..11: one to three rows at 32 columns a pass in
    # groups of two, 4-6 at 16, 7-11 as a 6-row tile and the rest, 9 = 6 + 3 among them, k in
    # slices of 256 with a partial last one), the switch to the many-row path (12), partial
    # tiles and a row block boundary (120)
    for a, b in [(0, 1), (7, 8), (0, 2), (3, 6), (2, 6), (0, 5), (4, 10), (5, 16), (0, 11),
                 (0, 9), (1, 10), (0, 12), (1, 13)]:  # fmt: skip
        assert torch.equal(kernel.mm(x[a:b], blocks, scale), y[a:b]), (a, b)
    for a, b in [(100, 163), (119, 121), (250, 300)]:
        assert torch.equal(kernel.mm(x[a:b], blocks, scale), y[a:b]), (a, b)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert torch.equal(kernel.mm(x, blocks, scale), y)  # and whatever the threads
    finally:
        torch.set_num_threads(threads)


@needs_kernel
def test_a_layer_whose_outputs_are_not_whole_blocks_is_padded_and_cut() -> None:
    lin = nn.Linear(48, 80, bias=True)
    layer = numerics.Int8WeightOnlyLinear(lin)
    assert "specguard kernel" in layer.extra_repr()
    x = torch.randn(2, 3, 48)
    # what the kernel reads: float32 activations, or bfloat16-rounded (numerics.ROUND_ACTIVATIONS)
    xr = x.bfloat16().double() if numerics.ROUND_ACTIVATIONS else x.double()
    ref = xr @ layer.dequantized().double().T + lin.bias.double()
    assert layer(x).shape == (2, 3, 80)
    torch.testing.assert_close(layer(x).double(), ref, rtol=1e-5, atol=1e-5)
    with int8_kernel.torch_kernel():  # the packed blocks hold the very matrix torch's kernel gets
        plain = numerics.Int8WeightOnlyLinear(lin)
    assert "torch kernel" in plain.extra_repr()
    assert torch.equal(layer.int8_weight(), plain.weight_int8)
    two = numerics.Int8WeightOnlyLinear(lin, terms=2)
    torch.testing.assert_close(
        two(x).double(),
        xr @ two.dequantized().double().T + lin.bias.double(),
        rtol=1e-5,
        atol=1e-5,
    )
    err1, err2 = ((m.dequantized() - lin.weight).abs().max() for m in (layer, two))
    assert err2 < err1


@needs_kernel
def test_activations_stay_float32_unless_rounding_is_switched_on(monkeypatch) -> None:
    lin = nn.Linear(64, 64, bias=False)
    layer = numerics.Int8WeightOnlyLinear(lin)
    x = torch.randn(5, 64)
    assert not torch.equal(layer(x), layer(x.bfloat16().float()))
    monkeypatch.setattr(numerics, "ROUND_ACTIVATIONS", True)  # then rounding is the first step
    assert torch.equal(layer(x), layer(x.bfloat16().float()))


def test_bad_arguments_are_named() -> None:
    if kernel is None:
        pytest.skip("the kernel needs x86-64 AVX2 + FMA")
    with pytest.raises(RuntimeError, match="multiple of 64"):
        kernel.pack(torch.zeros(10, 8, dtype=torch.int8))
    blocks = kernel.pack(torch.zeros(64, 8, dtype=torch.int8))
    with pytest.raises(RuntimeError, match="x has 9 columns"):
        kernel.mm(torch.zeros(1, 9), blocks, torch.ones(64))


CHILD = """
import sys, torch
from specguard_graph.models.local import int8_kernel, numerics
from torch import nn
k = int8_kernel.load()
print("kernel", k is not None)
layer = numerics.Int8WeightOnlyLinear(nn.Linear(64, 128))
x = torch.randn(9, 64)
print("invariant", all(torch.equal(layer(x[i:i + 1]), layer(x)[i:i + 1]) for i in range(9)))
print("repr", layer.extra_repr())
maps = open("/proc/self/maps").read().splitlines()
print("gomp", len({line.split()[-1] for line in maps if "libgomp" in line}))
"""


def _child(env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


@needs_kernel
def test_the_kernel_builds_from_an_empty_directory_with_one_openmp_runtime(tmp_path: Path) -> None:
    """A clean machine has no compiled kernel: prove the build works from nothing, and that the
    kernel shares torch's OpenMP runtime (two would fight over the cores)."""
    out = _child({"SPECGUARD_KERNEL_DIR": str(tmp_path / "kernel")})
    assert out["kernel"] == "True" and out["invariant"] == "True"
    assert "specguard kernel" in out["repr"]
    assert out["gomp"] == "1"
    assert list((tmp_path / "kernel").glob("*.so"))


def test_switched_off_it_falls_back_to_torchs_kernel_still_row_invariant(tmp_path: Path) -> None:
    out = _child({"SPECGUARD_INT8_KERNEL": "torch", "SPECGUARD_KERNEL_DIR": str(tmp_path)})
    assert out["kernel"] == "False" and out["invariant"] == "True"
    assert "torch kernel" in out["repr"]
    assert not list(tmp_path.glob("*.so"))


def test_each_environment_builds_the_kernel_in_a_folder_of_its_own(monkeypatch):
    """Two environments sharing one cache (or two paths to one venv) would rebuild each
    other's kernel in a shared folder: torch writes the paths it was imported from into the
    build. The folder is keyed by them, so each keeps its own build."""
    if not int8_kernel.supported():
        pytest.skip("no AVX2/FMA: the kernel is not built here")
    here = int8_kernel.build_dir()
    monkeypatch.setattr(sys, "executable", "/another/venv/bin/python")
    assert int8_kernel.build_dir() != here
    monkeypatch.undo()
    monkeypatch.setattr(torch, "__file__", "/link/to/the/venv/site-packages/torch/__init__.py")
    assert int8_kernel.build_dir() != here
    monkeypatch.undo()
    assert int8_kernel.build_dir() == here
    assert int8_kernel.load() is not None
    ninja = (here / "build.ninja").read_text()
    assert str(Path(torch.__file__).parent) in ninja  # built by this environment, as it sees it


def test_a_new_process_in_the_same_environment_does_not_compile_again():
    if not int8_kernel.supported():
        pytest.skip("no AVX2/FMA: the kernel is not built here")
    assert int8_kernel.load() is not None
    built = {p: p.stat().st_mtime_ns for p in int8_kernel.build_dir().glob("*.so")}
    code = "from specguard_graph.models.local import int8_kernel; print(int8_kernel.load())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)  # fmt: skip
    assert "compiling" not in out.stderr and "module" in out.stdout
    assert built and {p: p.stat().st_mtime_ns for p in built} == built
