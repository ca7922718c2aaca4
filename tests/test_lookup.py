"""Prompt-lookup greedy decoding gives the plain greedy loop's tokens, in fewer forwards."""

import copy

import pytest

from specguard_graph.evidence.value import continuation
from specguard_graph.models.local import lookup, numerics
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.steps import NEVER, ReasoningSteps
from specguard_graph.testing import tiny_lm

SPEC = ReasoningSteps()


@pytest.fixture(scope="module")
def base() -> LocalCausalLM:
    return tiny_lm(layers=4, hidden=128, heads=4, seed=2, init_range=0.3)  # varied greedy text


def formatted(base: LocalCausalLM, fmt: str) -> LocalCausalLM:
    return LocalCausalLM(numerics.apply(copy.deepcopy(base.model), fmt, "cpu"), base.tokenizer)


def plain(lm: LocalCausalLM, prompt: str, budget: int) -> list[int]:
    s = lm.sample(lm.new_prefix(prompt), n=1, delimiter=NEVER, max_new_tokens=budget,
                  temperature=0.0, fork=False)  # fmt: skip
    return s.candidates[0].token_ids


@pytest.mark.parametrize("fmt", ["int8", "int8x2"])
@pytest.mark.parametrize("budget", [7, 40])
def test_lookup_gives_the_plain_greedy_tokens_whatever_it_proposes(base, fmt, budget):
    lm = formatted(base, fmt)
    prompt = SPEC.render_prompt(
        "Natalia sold 48 clips in April and half as many in May.", lm.tokenizer
    )
    want = plain(lm, prompt, budget)
    right = lookup.NgramIndex()
    right.add(lm.encode(prompt) + want)  # every proposal is right: few forwards
    wrong = lookup.NgramIndex()
    wrong.add([t + 1 for t in lm.encode(prompt) + want])  # proposals that are mostly wrong
    for index in (right, wrong, lookup.NgramIndex()):
        got, forwards = lookup.greedy(lm, lm.new_prefix(prompt), max_new_tokens=budget, index=index)
        assert got == want
        assert forwards <= len(want)
    fresh = lookup.NgramIndex()
    fresh.add(lm.encode(prompt) + want)
    _, forwards = lookup.greedy(lm, lm.new_prefix(prompt), max_new_tokens=budget, index=fresh)
    assert forwards < len(want) * 0.75  # even on this model's repetitive text


def test_a_value_continuation_reads_the_same_text_with_and_without_lookup(base):
    lm = formatted(base, "int8")
    assert lookup.is_exact(lm) and not lookup.is_exact(base)
    prompt = SPEC.render_prompt("What is 2 + 3?", lm.tokenizer)
    index = lookup.NgramIndex()
    for prefix in ("", "First, 2 + 3 = 5.\n\n", "First, 2 + 3 = 5.\n\nSo"):
        texts = []
        for ix in (None, index):  # the second run also proposes from the earlier ones
            pc = lm.new_prefix(prompt)
            lm.append_text(pc, prefix)
            texts.append(continuation(lm, pc, 48, ix))
        assert texts[0] == texts[1] and texts[0]


def test_accepted_tokens_stop_at_the_first_disagreement_or_eos():
    eos = {0}
    assert lookup._accepted([5, 6, 7], [5, 6, 9, 1], eos) == [5, 6, 9]
    assert lookup._accepted([5, 6, 7], [5, 6, 7, 1], eos) == [5, 6, 7, 1]  # plus greedy's next
    assert lookup._accepted([5, 0, 7], [5, 0, 7, 1], eos) == [5, 0]  # nothing after EOS
    assert lookup._accepted([], [4], eos) == [4]


def test_the_index_proposes_what_followed_the_last_occurrence():
    index = lookup.NgramIndex(n=2)
    index.add([1, 2, 3, 4, 1, 2, 9])
    assert index.propose([7, 1, 2], 3) == [9]  # the later occurrence wins
    seq = [5, 1, 2]
    index.add(seq)  # its tail (1, 2) has nothing after it yet: the earlier match stays
    assert index.propose(seq, 3) == [9]
    assert index.propose([8, 8], 3) == [] and index.propose([2], 3) == []
    with pytest.raises(ValueError, match="n must be"):
        lookup.NgramIndex(n=0)


def test_only_the_int8_formats_are_row_invariant(base):
    assert numerics.row_invariant(formatted(base, "int8").model)
    assert numerics.row_invariant(formatted(base, "int8x2").model)
    assert not numerics.row_invariant(base.model)
    assert not numerics.row_invariant(formatted(base, "dynamic-int8").model)
