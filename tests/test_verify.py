"""The verifying fallback writes the target's own greedy step, whatever it is handed."""

import copy

import pytest
import torch

from specguard_graph.models.local import numerics
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.models.local.verify import can_verify, verify_greedy
from specguard_graph.steps import NEVER, ReasoningSteps
from specguard_graph.testing import tiny_lm

SPEC = ReasoningSteps()
QUESTION = "Natalia sold 48 clips in April and half as many in May. How many in all?"


@pytest.fixture(scope="module")
def base() -> LocalCausalLM:
    return tiny_lm(layers=4, hidden=128, heads=4, seed=2, init_range=0.3)  # varied greedy text


def formatted(lm: LocalCausalLM, fmt: str) -> LocalCausalLM:
    return LocalCausalLM(numerics.apply(copy.deepcopy(lm.model), fmt, "cpu"), lm.tokenizer)


def rewrite(lm: LocalCausalLM, prompt: str, delimiter: str, budget: int):
    pc = lm.new_prefix(prompt)
    s = lm.sample(pc, n=1, delimiter=delimiter, max_new_tokens=budget, temperature=0.0,
                  fork=False)  # fmt: skip
    lm.adopt(pc, s, 0)
    return s.candidates[0], pc


@pytest.mark.parametrize("delimiter, budget", [("\n\n", 40), (NEVER, 40), (NEVER, 7)])
def test_the_verified_step_is_the_targets_own_token_for_token(base, delimiter, budget):
    target = formatted(base, "int8")
    other = formatted(tiny_lm(layers=2, hidden=64, heads=4, seed=9), "int8")
    prompt = SPEC.render_prompt(QUESTION, target.tokenizer)
    want, want_pc = rewrite(target, prompt, delimiter, budget)
    ids = want.token_ids
    assert len(ids) >= 5
    bent = [*ids[:4], (ids[4] + 1) % len(target.tokenizer), *ids[5:]]
    candidates = {"its own": (ids, len(ids)), "wrong at 4": (bent, 4), "none": ([], 0),
                  "noise": ([7, 8, 9] * 5, None)}  # fmt: skip
    for name, (cand, kept) in candidates.items():
        for draft in (None, target, other):  # proposals all right, mostly wrong, or none
            pc = target.new_prefix(prompt)
            dpc = None if draft is None else draft.new_prefix(prompt)
            kw = {"delimiter": delimiter, "max_new_tokens": budget, "draft": draft}
            sample, stats = verify_greedy(target, pc, candidate=cand, draft_pc=dpc, **kw)
            got = sample.candidates[0]
            assert (got.token_ids, got.text, got.ended) == (ids, want.text, want.ended), name
            assert got.token_logprobs == want.token_logprobs, name  # bit for bit
            if kept is not None:
                assert stats.kept == kept, name
            target.adopt(pc, sample, 0)
            assert (pc.ids, pc.cache_ids) == (want_pc.ids, want_pc.cache_ids)
            after = target.sample(pc, n=1, delimiter=NEVER, max_new_tokens=6, temperature=0.0)
            again = target.sample(copy.deepcopy(want_pc), n=1, delimiter=NEVER,
                                  max_new_tokens=6, temperature=0.0)  # fmt: skip
            assert after.candidates[0].token_ids == again.candidates[0].token_ids, name


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("lookup", [0, 2])
def test_right_proposals_save_forwards_and_are_counted(base, k, lookup):
    target = formatted(base, "int8")
    prompt = SPEC.render_prompt(QUESTION, target.tokenizer)
    want, _ = rewrite(target, prompt, NEVER, 40)
    n = len(want.token_ids)
    _, own = verify_greedy(target, target.new_prefix(prompt), candidate=want.token_ids,
                           delimiter=NEVER, max_new_tokens=40, k=k)  # fmt: skip
    assert own.kept == n and own.forwards <= -(-(n - k - 1) // 4) + 2  # chunks grow to 4
    draft = formatted(base, "int8")  # the target's twin: every proposal is right
    calls = []
    forward = draft.model.forward
    draft.model.forward = lambda *a, **kw: (
        calls.append(kw["input_ids"].shape[1]) or forward(*a, **kw)
    )
    _, sd = verify_greedy(target, target.new_prefix(prompt), candidate=[], delimiter=NEVER,
                          max_new_tokens=40, draft=draft, draft_pc=draft.new_prefix(prompt),
                          k=k, lookup=lookup)  # fmt: skip
    assert sd.kept == 0 and sd.drafted == sd.proposed > 0
    assert sd.forwards <= -(-(n - sd.found) // (k + 1)) + 1
    # one draft forward per proposal: the tokens it lacks (the target's bonus token, the last
    # proposal, the looked-up tokens it kept) ride in the forward that proposes
    assert len(calls) == sd.proposed and max(calls[1:]) <= 2 + lookup
    if lookup:  # this tiny model repeats itself: n-gram matches stretch the proposals
        assert 0 < sd.found <= sd.looked_up and max(calls[1:]) > 2
    else:
        assert sd.looked_up == sd.found == 0
    _, alone = verify_greedy(target, target.new_prefix(prompt), candidate=[], delimiter=NEVER,
                             max_new_tokens=40, k=k, lookup=lookup)  # fmt: skip
    assert alone.forwards == n and alone.proposed == alone.looked_up == 0


def test_the_draft_proposes_past_a_token_only_while_it_is_sure_of_it(base):
    import torch

    from specguard_graph.models.local.draft_head import next_token
    from specguard_graph.models.local.kv_cache import new_cache
    from specguard_graph.models.local.verify import propose

    target, draft = formatted(base, "int8"), formatted(base, "int8")
    prompt = SPEC.render_prompt(QUESTION, target.tokenizer)
    want, _ = rewrite(target, prompt, NEVER, 40)
    cache, feed, greedy = new_cache(draft.model.config), draft.encode(prompt), []
    for _ in range(6):  # the draft's greedy tokens and the probability it gives each
        greedy.append(next_token(draft, torch.tensor([feed]), cache, sure=True))
        feed = [greedy[-1][0]]
    probs = sorted(p for _, p in greedy[:5])
    for more_if in (0.0, probs[1], probs[3], 1.01):
        got = propose(draft, draft.new_prefix(prompt), [], 6, more_if)
        sure = next((i for i, (_, p) in enumerate(greedy) if p < more_if), 5)
        assert got == [t for t, _ in greedy[: sure + 1]], more_if
        _, st = verify_greedy(target, target.new_prefix(prompt), candidate=[], delimiter=NEVER,
                              max_new_tokens=40, draft=draft, draft_pc=draft.new_prefix(prompt),
                              k=4, lookup=0, more_if=more_if)  # fmt: skip
        assert st.drafted == st.proposed  # the twin's proposals are all right
        if more_if == 0.0:
            assert st.proposed > st.forwards  # k a forward
        if more_if > 1:
            assert st.proposed <= st.forwards  # one a forward
    other = formatted(tiny_lm(layers=2, hidden=64, heads=4, seed=9), "int8")  # mostly wrong
    sample, _ = verify_greedy(target, target.new_prefix(prompt), candidate=[], delimiter=NEVER,
                              max_new_tokens=40, draft=other, draft_pc=other.new_prefix(prompt),
                              k=3, more_if=probs[2])  # fmt: skip
    assert sample.candidates[0].token_ids == want.token_ids


def test_the_engine_picks_how_many_proposals_a_forward_checks(base):
    from specguard_graph.models.local import int8_kernel
    from specguard_graph.models.local.verify import lookup_tokens, proposals

    ours = formatted(base, "int8")
    kernel = int8_kernel.load() is not None
    assert (proposals(ours), lookup_tokens(ours)) == ((1, 2) if kernel else (3, 0))
    with int8_kernel.torch_kernel():
        torchs = formatted(base, "int8")
        assert (proposals(torchs), lookup_tokens(torchs)) == (3, 0)


def test_only_a_local_row_invariant_target_verifies(base):
    assert can_verify(formatted(base, "int8")) and can_verify(formatted(base, "int8x2"))
    assert not can_verify(base)  # float32: a chunk rounds differently from one token
    assert not can_verify(object())
    with pytest.raises(ValueError, match="proposals per forward"):
        verify_greedy(formatted(base, "int8"), base.new_prefix("x"), candidate=[],
                      delimiter=NEVER, max_new_tokens=4, k=0)  # fmt: skip
    with pytest.raises(ValueError, match="looked-up tokens per forward"):
        verify_greedy(formatted(base, "int8"), base.new_prefix("x"), candidate=[],
                      delimiter=NEVER, max_new_tokens=4, lookup=-1)  # fmt: skip


def _run(draft, target, embedder, **cfg):
    from specguard_graph import SpecGuardConfig, build_graph

    cfg = {"tau": 1.0, **cfg}
    config = SpecGuardConfig.make(k=1, temperature=0.0, max_steps=3, max_step_tokens=16,
                                  seed=1, **cfg)  # fmt: skip
    graph = build_graph(draft, target, embedder=embedder, config=config).compile()
    return graph.invoke({"question": QUESTION})


def test_a_rejected_step_is_verified_and_reads_as_the_rewrite(tiny):
    draft, target = formatted(tiny.draft, "int8"), formatted(tiny.target, "int8")
    verify = _run(draft, target, tiny.embedder)
    rewrite = _run(draft, target, tiny.embedder, fallback="rewrite")
    assert verify["text"] == rewrite["text"] and len(verify["steps"]) == 3
    for v, r in zip(verify["steps"], rewrite["steps"], strict=True):
        assert (v["source"], v["fallback"], r["fallback"]) == ("target", "verify", "rewrite")
        assert v["text"] == r["text"] and "verified" not in r
        assert set(v["verified"]) == {"kept", "candidate", "drafted", "proposed", "forwards",
                                      "looked_up", "found"}  # fmt: skip
    # a draft that is the target: every rejected candidate is kept whole, in few forwards
    same = _run(target, target, tiny.embedder, stop_doomed=False)
    for s in same["steps"]:
        v = s["verified"]
        assert v["kept"] == v["candidate"] == s["tokens"]
        assert v["forwards"] <= -(-s["tokens"] // 4) + 1
    # drafted only to the token that doomed it (τ = 1): that much is kept, the rest is checked
    cut = _run(target, target, tiny.embedder)
    assert cut["text"] == same["text"]
    for s in cut["steps"]:
        v = s["verified"]
        assert v["kept"] == v["candidate"] <= s["tokens"]
    # float32 weights cannot verify exactly: the target rewrites, and says so
    f32 = _run(tiny.draft, tiny.target, tiny.embedder)
    assert {s["fallback"] for s in f32["steps"]} == {"rewrite"}


def test_the_projects_own_sd_writes_the_targets_text(tiny, base):
    from specguard_graph import ConfigError, SpecGuardConfig
    from specguard_graph.bench import methods

    draft, target = formatted(tiny.draft, "int8"), formatted(tiny.target, "int8")
    make = lambda name, d=draft: methods.make(name, d, target, None, SpecGuardConfig(), 48)  # noqa: E731
    for question in (QUESTION, "What is 2 + 3?"):
        want, got = make("target")(question), make("sd-verify")(question)
        assert (got["text"], got["tokens"]) == (want["text"], want["tokens"])
        assert got["verified"]["proposed"] > 0
        looked = make("target-lookup")(question)  # the target alone, prompt-lookup proposals
        assert (looked["text"], looked["tokens"]) == (want["text"], want["tokens"])
        assert looked["forwards"] <= looked["tokens"] and "forwards" not in want
    with pytest.raises(ConfigError, match="row-invariant"):
        methods.make("target-lookup", tiny.draft, tiny.target, None, SpecGuardConfig(), 48)
    other = tiny_lm(layers=2, hidden=64, heads=4, seed=9)
    other.tokenizer = copy.copy(other.tokenizer)
    other.vocab = lambda: {"only": 0}  # a draft whose tokens are not the target's
    with pytest.raises(ConfigError, match="target's vocabulary"):
        make("sd-verify", other)


def test_tau_above_one_verifies_even_a_perfect_scoring_step(tiny):
    """Scores lie in [0, 1], so τ = 1 still accepts a step that scores 1; τ above 1 accepts none:
    every step is the target's, which is what makes "verify everything" lossless."""
    draft, target = formatted(tiny.draft, "int8"), formatted(tiny.target, "int8")
    perfect = dict(grounding_range=(0.0, 1e-9), logprob_range=(-1e9, -1e8))  # every score 1
    at_one = _run(draft, target, tiny.embedder, **perfect)
    assert {s["source"] for s in at_one["steps"]} == {"draft"}
    above = _run(draft, target, tiny.embedder, **{**perfect, "tau": 1.01})
    rewrite = _run(draft, target, tiny.embedder, **{**perfect, "tau": 1.01}, fallback="rewrite")
    assert {(s["source"], s["fallback"]) for s in above["steps"]} == {("target", "verify")}
    assert above["text"] == rewrite["text"] and above["text"] != at_one["text"]


def test_a_long_prompt_is_fed_in_chunks_with_the_same_bits(base, monkeypatch):
    """`decoding.feed_long`: a prefill longer than PREFILL_ROWS goes in forwards of that many
    rows (faster at agent prompt lengths), and every path that prefills (a run's catch-up, the
    target's fused prefill in verification, the draft's proposals) gives the bits of one
    forward; a model that is not row-invariant keeps one forward."""
    from specguard_graph.models.local import decoding

    target = formatted(base, "int8")
    prompt = SPEC.render_prompt(QUESTION, target.tokenizer)
    want, want_pc = rewrite(target, prompt, NEVER, 12)
    rows: list[int] = []
    hook = target.model.register_forward_pre_hook(
        lambda mod, args, kw: rows.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    monkeypatch.setattr(decoding, "PREFILL_ROWS", 5)
    target.prefix_store.clear()  # a cold prefill
    got, got_pc = rewrite(target, prompt, NEVER, 12)
    n = len(want_pc.ids) - len(want.token_ids)  # the prompt's tokens
    assert rows[: (n - 2) // 5] == [5] * ((n - 2) // 5) and max(rows) == 5, rows
    assert (got.token_ids, got.token_logprobs) == (want.token_ids, want.token_logprobs)
    for a, b in zip(got_pc.cache.layers, want_pc.cache.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    hook.remove()
    draft = formatted(base, "int8")
    for cand in (want.token_ids, []):  # the candidate checked, or the draft's proposals
        target.prefix_store.clear()
        draft.prefix_store.clear()
        pc, dpc = target.new_prefix(prompt), draft.new_prefix(prompt)
        sample, _ = verify_greedy(target, pc, candidate=cand, draft=draft, draft_pc=dpc,
                                  delimiter=NEVER, max_new_tokens=12)  # fmt: skip
        assert sample.candidates[0].token_logprobs == want.token_logprobs
    fp32 = LocalCausalLM(copy.deepcopy(base.model), base.tokenizer)
    assert decoding.feed_long(fp32.model, None, list(range(40))) == list(range(40))
