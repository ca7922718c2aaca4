"""The signal nodes start no OpenMP team off the decode's thread.

LangGraph runs `score_grounding` beside `score_logprob` on executor threads. A torch op there
starts a second OpenMP team; libgomp then counts more threads than cores, and the decode's
worker sleeps between kernels instead of spinning: every accepted draft step cost ~1.3x a bare
draft decode (docs/numerics.md, "One OpenMP team"). Counted as the process's OS threads, which
a new team adds to and numpy's single-threaded math does not.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from specguard_graph.models.base import Candidate, Sample
from specguard_graph.models.local.capture import AttentionCapture
from specguard_graph.scoring import grounding_score, logprob_score

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="counts threads in /proc/self/task (Linux)"
)

HEADS, PREFIX, STEP = 14, 400, 64  # a step on the embedded draft: far above torch's grain


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def captured_sample() -> Sample:
    """A one-candidate sample whose capture holds 3 layers of decode rows, as `sample` makes."""
    gen = torch.Generator().manual_seed(0)

    def row(keys: int) -> torch.Tensor:
        return torch.softmax(4 * torch.randn(1, HEADS, 1, keys, generator=gen), dim=-1)

    rows = {layer: [row(PREFIX + t) for t in range(STEP + 1)] for layer in (21, 22, 23)}
    cand = Candidate("x", list(range(STEP + 1)), [-0.1] * STEP, "delimiter")
    return Sample([cand], PREFIX, None, [], AttentionCapture(frozenset(rows), rows))


def signal_work(sample: Sample) -> float:
    atts = sample.attentions(0)
    assert atts[0].shape == (HEADS, STEP, PREFIX + STEP)
    logprob_score([-0.5] * 50_000)
    return grounding_score(atts, PREFIX)[0]


@pytest.fixture
def two_threads():
    """torch on two threads whatever the machine has, so a team on another thread shows."""
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    torch.ones(1 << 20).sum()  # this thread's own team exists before counting
    yield
    torch.set_num_threads(old)


def test_torch_work_on_an_executor_thread_does_start_a_team(two_threads):
    """The counter sees the effect the signal math must not have (else the test below is
    blind): one large torch op on an executor thread adds OS threads."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(os_threads).result()  # the executor's own thread exists
        before = os_threads()
        pool.submit(lambda: torch.rand(HEADS, STEP, PREFIX + STEP).double().mean(0)).result()
        assert os_threads() > before


def test_grounding_on_an_executor_thread_starts_no_team(two_threads):
    sample = captured_sample()
    expected = signal_work(sample)  # on this thread: the same numbers either way
    with ThreadPoolExecutor(1) as pool:
        pool.submit(os_threads).result()
        before = os_threads()
        got = pool.submit(signal_work, sample).result()
        assert os_threads() == before
    assert got == expected
    assert 0.0 < got < 1.0
