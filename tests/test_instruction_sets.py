"""The exactness tests hold under every instruction set this CPU can run, not only its best.

torch chooses its vectorised kernels once per process (AVX2 or AVX-512 on x86), and float
reductions round differently under each: a test that passes on an AVX-512 machine said nothing
about the AVX2 machines CI also lands on (issue 35). The suite itself runs on the machine's own
kernels; here the exactness tests run again in a child process forced onto each other kernel
set this CPU supports (`ATEN_CPU_CAPABILITY`). A CPU cannot be forced *up*: on an AVX2-only
machine the AVX-512 run is skipped, and says so.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specguard_graph.machine import cpu_capability

ROOT = Path(__file__).resolve().parent.parent
# bit-for-bit feeding invariance (tiny models), the lookup decoder's exactness, and on the real
# pair: captured signals = a scoring forward, token-level SD = the target
EXACT = [
    "tests/test_numerics.py",
    "tests/test_lookup.py",
    "tests/test_blocks.py::test_a_row_is_the_same_bits_alone_in_any_batch_at_any_thread_count",
    "tests/test_attention_kernel.py::test_a_row_is_the_same_bits_alone_in_a_block_in_a_batch_and_on_any_threads",
    "tests/test_verify.py",
    "tests/test_real_pair.py::test_real_draft_signals_equal_a_scoring_forward",
    "tests/test_real_pair.py::test_token_level_sd_reproduces_the_target_exactly",
]


RANK = {"default": 0, "avx2": 1, "avx512": 2}


def _capability_under(forced: str | None) -> str:
    """What torch reports in a child forced onto `forced` (None: the CPU's own best). torch
    reports a forced set even where the CPU lacks it (AVX-512 on an AVX2-only EPYC, which then
    dies of SIGILL), so what a CPU can run is read from its unforced best, never from this."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if forced is not None:
        env["ATEN_CPU_CAPABILITY"] = forced
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip


@pytest.mark.parametrize("forced", ["avx2", "avx512"])
def test_exactness_holds_on_the_other_kernels(forced):
    native = cpu_capability()
    if native.lower() == forced:
        pytest.skip(f"the suite itself runs on {native} kernels")
    best = _capability_under(None).lower()
    if RANK.get(forced, 0) > RANK.get(best, 0):
        pytest.skip(f"this CPU cannot run {forced.upper()} kernels (its best is {best.upper()})")
    got = _capability_under(forced)
    if got.lower() != forced:
        pytest.skip(f"this CPU cannot run {forced.upper()} kernels (forcing it gives {got})")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": forced}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *EXACT]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, f"under {got} kernels:\n{run.stdout[-4000:]}{run.stderr[-2000:]}"
    summary = run.stdout.strip().splitlines()[-1]
    assert " passed" in summary, run.stdout
    if os.environ.get("SPECGUARD_SKIP_REAL") != "1":
        assert "skipped" not in summary, run.stdout  # the real-pair checks ran too
