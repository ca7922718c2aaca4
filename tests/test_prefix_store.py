"""Prompts kept across runs: a call that shares a prefix with an earlier one feeds only its new
tokens, and computes the same bits as a cold prefill (on the row-invariant int8 formats)."""

import tempfile
import threading
from pathlib import Path

import pytest
import torch
from conftest import SYSTEM, TURN_1, TURN_2

from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.models.local.prefix_store import MIN_TOKENS, PrefixStore
from specguard_graph.testing import tiny_exact_lm, tiny_lm


@pytest.fixture(scope="module")
def int8() -> LocalCausalLM:
    return tiny_exact_lm()


def fresh(lm: LocalCausalLM) -> LocalCausalLM:
    """The same weights behind a new, empty store (a cold process)."""
    return LocalCausalLM(lm.model, lm.tokenizer, name="cold")


def test_the_next_call_feeds_only_its_new_tokens_and_computes_the_same_bits(int8):
    warm = fresh(int8)
    first = warm.new_prefix(TURN_1)
    warm.next_logits(first)
    assert first.prefill_tokens == len(first.ids) and first.reused_tokens == 0  # last one too

    second = warm.new_prefix(TURN_2)
    logits = warm.next_logits(second)
    new = len(second.ids) - len(first.ids)
    assert second.reused_tokens >= len(first.ids) - 2  # the first prompt (a token of slack)
    assert second.prefill_tokens <= new + 2  # the new tokens and the last prompt token

    cold_lm = fresh(int8)
    cold = cold_lm.new_prefix(TURN_2)
    expected = cold_lm.next_logits(cold)
    assert cold.reused_tokens == 0 and cold.prefill_tokens == len(cold.ids)
    assert torch.equal(logits, expected)  # bit for bit


def test_a_repeated_question_samples_the_same_step_without_a_prefill(int8):
    lm = fresh(int8)
    outs = []
    for _ in range(2):
        pc = lm.new_prefix(TURN_2)
        s = lm.sample(pc, n=1, delimiter="\n", max_new_tokens=8, temperature=0.0)
        outs.append((s.candidates[0].token_ids, s.candidates[0].token_logprobs, pc))
    assert outs[0][:2] == outs[1][:2]
    assert outs[1][2].prefill_tokens == 0 and outs[1][2].reused_tokens == len(outs[1][2].ids) - 1


def test_a_model_without_row_invariance_keeps_no_prompts():
    lm = tiny_lm(layers=2, hidden=32, heads=2, seed=1)  # float32, torch's kernels
    assert lm.prefix_store.max_bytes == 0
    for _ in range(2):
        pc = lm.new_prefix(TURN_1)
        lm.next_logits(pc)
        assert pc.reused_tokens == 0
    assert len(lm.prefix_store) == 0


def test_the_store_is_bounded_in_bytes_least_recently_used_out_first(int8):
    lm = fresh(int8)
    prompts = [f"Question {i}: " + SYSTEM for i in range(3)]
    pcs = []
    for p in prompts:
        pc = lm.new_prefix(p)
        lm.next_logits(pc)
        pcs.append(pc)
    one = lm.prefix_store.size // 3
    store = PrefixStore(int8.model.config, max_bytes=2 * one + one // 2)
    for pc in pcs[:2]:
        store.remember(pc.ids[:-1], pc.cache)
    assert store.recall(pcs[0].ids) is not None  # the first is now the most recently used
    store.remember(pcs[2].ids[:-1], pcs[2].cache)  # evicts the second
    assert len(store) == 2 and store.size <= store.max_bytes
    assert store.recall(pcs[1].ids) is None or store.recall(pcs[1].ids)[1] != pcs[1].ids[:-1]
    assert store.recall(pcs[0].ids)[1] == pcs[0].ids[:-1]
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixStore(int8.model.config, max_bytes=-1)


def test_a_short_shared_prefix_is_not_reused(int8):
    lm = fresh(int8)
    lm.next_logits(lm.new_prefix(TURN_1))
    other = lm.new_prefix(TURN_1[: MIN_TOKENS // 2] + " something else entirely")
    lm.next_logits(other)
    assert other.reused_tokens == 0


def test_concurrent_calls_each_get_the_cold_bits(int8):
    lm = fresh(int8)
    lm.next_logits(lm.new_prefix(TURN_1))
    cold_lm = fresh(int8)
    prompts = [TURN_2, TURN_2 + " ls(a=True)", TURN_1 + " cd('docs')"]
    expected = [cold_lm.next_logits(cold_lm.new_prefix(p)) for p in prompts]
    cold_lm.prefix_store.clear()
    got: dict[int, torch.Tensor] = {}

    def call(i: int) -> None:
        got[i] = lm.next_logits(lm.new_prefix(prompts[i]))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(got[i], expected[i]) for i in range(3))


@pytest.mark.parametrize("keep", [False, True])
def test_a_bench_starts_each_problem_cold_or_keeps_each_methods_prompts_apart(int8, keep):
    from specguard_graph.bench.run import prompt_stores, run

    lm = fresh(int8)
    seen: list[tuple[str, int]] = []

    def solver(name):
        def solve(question):
            pc = lm.new_prefix(SYSTEM + question)
            lm.next_logits(pc)
            seen.append((name, pc.reused_tokens))
            return {"text": "", "answer": None, "latency_s": 0.0}

        return solve

    problems = [{"id": i, "question": f" Q{i}?", "answer": "0"} for i in range(2)]
    run(problems, {"a": solver("a"), "b": solver("b")}, Path(tempfile.mkdtemp()),
        before=prompt_stores(lm, keep=keep))  # fmt: skip
    reused = dict.fromkeys(["a", "b"], 0)
    for name, n in seen:
        reused[name] = max(reused[name], n)
    assert [n for _, n in seen[:2]] == [0, 0]  # neither method sees the other's prompt
    assert (reused["a"] > 0 and reused["b"] > 0) if keep else reused == {"a": 0, "b": 0}
