"""A step whose score can no longer reach τ stops being drafted at the token that doomed it:
the decision is the one the whole step would get, and the text stays the target's."""

import copy
import itertools
import math

import pytest

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.models.local import numerics
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.scoring import decide_step, doomed_below
from specguard_graph.steps import NEVER
from specguard_graph.testing import tiny_lm

QUESTION = "Natalia sold 48 clips in April and half as many in May. How many in all?"
LOGPROBS = [0.0, -1e-9, -0.05, -0.187, -0.19, -0.5, -1.0, -2.0, -3.0, -3.5, -9.0, -math.inf]


GRID = itertools.product([0.0, 0.3, 0.7, 1.0], [0.0, 0.5, 0.7, 0.71, 0.9, 1.0])


@pytest.mark.parametrize("beta, tau", GRID)
def test_a_doomed_log_prob_is_one_no_grounding_can_rescue(beta, tau):
    cfg = SpecGuardConfig(beta=beta, tau=tau, logprob_range=(-3.5, -0.187),
                          grounding_range=(0.46, 0.71))  # fmt: skip
    doomed = doomed_below(cfg)
    if doomed is None:  # some log-prob passes with perfect grounding, however low
        assert decide_step(math.inf, -math.inf, cfg).accepted
        return
    assert tau > 1.0 - beta and beta > 0.0
    assert not doomed(math.nan)  # a NaN step is flagged elsewhere, not cut here
    for lp in LOGPROBS:
        assert doomed(lp) == (not decide_step(math.inf, lp, cfg).accepted)
        if doomed(lp):
            assert not any(decide_step(g, lp, cfg).accepted for g in (0.0, 0.5, 0.71, 1.0))


@pytest.fixture(scope="module")
def lm() -> LocalCausalLM:
    return tiny_lm(layers=2, hidden=64, heads=4, seed=2, init_range=0.3)


def _sample(lm, n, *, budget=20, temperature=1.0, stop_if=None):
    pc = lm.new_prefix("Question: how many clips? Answer:")
    return lm.sample(pc, n=n, delimiter=NEVER, max_new_tokens=budget, temperature=temperature,
                     seed=3, stop_if=stop_if).candidates  # fmt: skip


def test_a_row_stops_at_the_token_that_dooms_it_and_scores_that_token(lm):
    full = _sample(lm, 3)
    lps = sorted(lp for c in full for lp in c.token_logprobs)
    floor = lps[len(lps) // 3]  # some rows doomed early, some late or never
    cut = _sample(lm, 3, stop_if=lambda lp: lp < floor)
    doomed = 0
    for whole, got in zip(full, cut, strict=True):
        at = next((i for i, lp in enumerate(whole.token_logprobs) if lp < floor), None)
        if at is None:  # nothing dooms it: the same step
            assert (got.token_ids, got.ended) == (whole.token_ids, whole.ended)
            continue
        doomed += 1
        assert got.ended == "doomed"
        assert got.token_ids == whole.token_ids[: at + 1]  # the other rows' pads are gone
        assert got.token_logprobs == whole.token_logprobs[: at + 1]
        assert min(got.token_logprobs) < floor
    assert doomed >= 1
    never = _sample(lm, 3, stop_if=lambda lp: False)
    assert [c.token_ids for c in never] == [c.token_ids for c in full]


def test_the_budgets_last_token_is_not_scored_so_it_dooms_nothing(lm):
    (one,) = _sample(lm, 1, budget=1, stop_if=lambda lp: True)
    assert (one.ended, one.n_tokens, one.n_scored) == ("length", 1, 0)
    (two,) = _sample(lm, 1, budget=2, stop_if=lambda lp: True)
    assert (two.ended, two.n_tokens, two.n_scored) == ("doomed", 1, 1)


def _int8(model: LocalCausalLM) -> LocalCausalLM:
    return LocalCausalLM(numerics.apply(copy.deepcopy(model.model), "int8", "cpu"),
                         model.tokenizer)  # fmt: skip


def _run(draft, target, embedder, **cfg):
    base = dict(k=1, temperature=0.0, max_steps=4, max_step_tokens=24, seed=1, beta=0.3,
                logprob_range=(-3.0, -0.01))  # fmt: skip
    config = SpecGuardConfig.make(**{**base, **cfg})
    graph = build_graph(draft, target, embedder=embedder, config=config).compile()
    return graph.invoke({"question": QUESTION})


def _drafted(out) -> list[int]:
    return [c["tokens"] for s in out["steps"] for c in s["candidate_signals"]]


def test_a_doomed_step_is_verified_to_the_targets_text_with_less_drafted(tiny):
    draft, target = _int8(tiny.draft), _int8(tiny.target)
    whole = _run(draft, target, tiny.embedder, tau=1.0, stop_doomed=False)
    cut = _run(draft, target, tiny.embedder, tau=1.0)
    assert cut["text"] == whole["text"]
    assert [s["source"] for s in cut["steps"]] == ["target"] * len(cut["steps"])
    ended = [c["ended"] for s in cut["steps"] for c in s["candidate_signals"]]
    assert "doomed" in ended
    assert sum(_drafted(cut)) < sum(_drafted(whole))
    for s in cut["steps"]:  # what was drafted is all the verifier was handed
        assert s["verified"]["candidate"] == s["candidate_signals"][0]["tokens"]


@pytest.mark.parametrize("cfg", [dict(tau=0.7), dict(tau=1.0, k=2), dict(tau=1.0, beta=0.0)])
def test_nothing_is_cut_where_a_step_could_pass_or_a_vote_reads_it(tiny, cfg):
    draft, target = _int8(tiny.draft), _int8(tiny.target)
    on = _run(draft, target, tiny.embedder, **cfg)
    off = _run(draft, target, tiny.embedder, stop_doomed=False, **cfg)
    assert on["text"] == off["text"] and _drafted(on) == _drafted(off)
    assert not any(c["ended"] == "doomed" for s in on["steps"] for c in s["candidate_signals"])


def test_only_a_local_drafts_own_signals_with_no_one_to_ask_cut_a_step(tiny):
    from specguard_graph.nodes.common import Deps
    from specguard_graph.nodes.draft import stop_if

    def cut(draft=tiny.draft, **cfg) -> bool:
        deps = Deps(draft=draft, target=tiny.target, embedder=None, spec=None,  # type: ignore[arg-type]
                    config=SpecGuardConfig(), sessions=None, shared_vocab=True)  # type: ignore[arg-type]  # fmt: skip
        return stop_if(deps, SpecGuardConfig.make(**{"tau": 1.0, "k": 1, **cfg})) is not None

    assert cut() and not cut(tau=0.5) and not cut(stop_doomed=False)
    assert not cut(interrupt_on_reject=True)  # a person may accept the step as drafted
    assert not cut(signal_model="target")  # the target's log-probs decide, not the draft's
    assert not cut(adaptive_band=0.1)  # a widened vote reads the whole first draw
    assert not cut(draft=object())  # a served or callable draft takes no stop test
