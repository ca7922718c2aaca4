"""The draft's proposals over its frequent vocabulary (FR-Spec): the kept logits are the full
head's bits, and the verified text is still the target's own."""

import copy

import pytest
import torch

from specguard_graph.models.local import numerics
from specguard_graph.models.local.draft_head import next_token, proposal_head
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.models.local.kv_cache import new_cache
from specguard_graph.models.local.verify import verify_greedy
from specguard_graph.steps import NEVER, ReasoningSteps
from specguard_graph.testing import tiny_lm

SPEC = ReasoningSteps()
QUESTION = "Natalia sold 48 clips in April and half as many in May. How many in all?"


def int8(seed: int) -> LocalCausalLM:
    base = tiny_lm(layers=3, hidden=64, heads=4, seed=seed, init_range=0.3)
    return LocalCausalLM(numerics.apply(copy.deepcopy(base.model), "int8", "cpu"), base.tokenizer)


def test_the_reduced_head_keeps_the_full_heads_rows_bit_for_bit():
    draft = int8(5)
    draft.proposal_vocab = 100
    head, ids = proposal_head(draft)
    full = draft.model.get_output_embeddings()
    assert ids[:100].tolist() == list(range(100)) and set(draft.eos_ids) <= set(ids.tolist())
    x = torch.randn(3, full.in_features)
    assert torch.equal(head(x), full(x)[:, ids])
    draft.proposal_vocab = 0
    assert proposal_head(draft) is None  # switched off: the full head


def test_a_proposal_comes_from_the_kept_tokens_and_matches_the_full_argmax_there():
    draft = int8(5)
    ids = draft.encode(SPEC.render_prompt(QUESTION, draft.tokenizer))
    x = torch.tensor([ids])
    full = draft.model(input_ids=x, cache=new_cache(draft.model.config), use_cache=True)
    logits = full.logits[0, -1]
    draft.proposal_vocab = 100
    _, kept = proposal_head(draft)
    got, p = next_token(draft, x, new_cache(draft.model.config), sure=True)
    assert got == int(kept[logits[kept].argmax()])
    assert p == pytest.approx(float(torch.softmax(logits[kept].float(), -1).max()), rel=1e-5)


@pytest.mark.parametrize("size", [60, 200, 0])
def test_verification_with_reduced_proposals_writes_the_targets_text(size):
    target, draft = int8(2), int8(2)  # the draft: the target's twin, its proposals mostly right
    draft.proposal_vocab = size
    prompt = SPEC.render_prompt(QUESTION, target.tokenizer)
    want = target.sample(target.new_prefix(prompt), n=1, delimiter=NEVER, max_new_tokens=30,
                         temperature=0.0).candidates[0]  # fmt: skip
    got, stats = verify_greedy(target, target.new_prefix(prompt), candidate=[], delimiter=NEVER,
                               max_new_tokens=30, draft=draft, draft_pc=draft.new_prefix(prompt),
                               lookup=0)  # fmt: skip
    assert got.candidates[0].token_ids == want.token_ids
    assert got.candidates[0].token_logprobs == want.token_logprobs
    if size == 0:
        assert stats.drafted == stats.proposed  # the twin's full head: every proposal right
