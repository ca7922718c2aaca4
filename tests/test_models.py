"""The local HF backend: batched sampling, captured signals, prefix caching."""

import pytest
import torch

from specguard_graph import InputError, ModelLoadError
from specguard_graph.models.local.decoding import cut_step
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.steps import ReasoningSteps

SPEC = ReasoningSteps()


def prefix(model, question="What is 2 + 3?"):
    return model.new_prefix(SPEC.render_prompt(question, model.tokenizer))


def sample(model, pc, **kw):
    args = dict(n=4, delimiter="\n\n", max_new_tokens=20, temperature=0.8, seed=3)
    args.update(kw)
    return model.sample(pc, **args)


def test_k_candidates_in_one_call_share_the_prefix(tiny):
    pc = prefix(tiny.draft)
    s = sample(tiny.draft, pc, capture_layers=tiny.draft.capture_layers(3))
    assert len(s.candidates) == 4 and s.prefix_len == len(pc.ids)
    assert pc.prefill_tokens == len(pc.ids) - 1  # the prompt once, at batch size 1
    for c in s.candidates:
        assert c.ended in ("delimiter", "eos", "length")
        assert "\n\n" not in c.text
        if c.ended == "delimiter":
            assert "\n\n" in tiny.draft.decode(c.token_ids)
            assert c.n_scored == len(c.token_ids) - 1
        if c.ended == "length":
            assert len(c.token_ids) == 20 and c.n_scored == 19
        assert all(lp <= 0 for lp in c.token_logprobs)


def test_captured_signals_equal_a_separate_forward(tiny):
    """Signals read while sampling are exactly what a scoring forward would give."""
    layers = tiny.draft.capture_layers(3)
    pc = prefix(tiny.draft)
    s = sample(tiny.draft, pc, capture_layers=layers)
    row = max(range(4), key=lambda r: s.candidates[r].n_scored)
    cand = s.candidates[row]
    assert cand.n_scored > 0
    lps, atts = tiny.draft.score(prefix(tiny.draft), cand.token_ids[: cand.n_scored], layers)
    assert lps == pytest.approx(cand.token_logprobs, abs=1e-4)
    for a, b in zip(s.attentions(row), atts, strict=True):
        assert a.shape == b.shape == (4, cand.n_scored, s.prefix_len + cand.n_scored)
        torch.testing.assert_close(a, b.float(), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.sum(-1), torch.ones(4, cand.n_scored), atol=1e-5, rtol=0)


def test_only_the_last_layers_are_captured(tiny):
    pc = prefix(tiny.draft)
    three = sample(tiny.draft, pc, capture_layers=tiny.draft.capture_layers(3)).capture
    one = sample(tiny.draft, pc, capture_layers=tiny.draft.capture_layers(1)).capture
    assert set(three.rows) == {1, 2, 3} and set(one.rows) == {3}
    assert three.nbytes == pytest.approx(3 * one.nbytes, rel=0.5)
    assert sample(tiny.draft, pc).capture is None


def test_greedy_is_deterministic_and_sampling_follows_the_seed(tiny):
    pc = prefix(tiny.target)
    a = sample(tiny.target, pc, n=1, temperature=0.0).candidates[0].token_ids
    b = sample(tiny.target, pc, n=1, temperature=0.0).candidates[0].token_ids
    assert a == b
    x = [c.token_ids for c in sample(tiny.draft, prefix(tiny.draft), seed=11).candidates]
    y = [c.token_ids for c in sample(tiny.draft, prefix(tiny.draft), seed=11).candidates]
    z = [c.token_ids for c in sample(tiny.draft, prefix(tiny.draft), seed=12).candidates]
    assert x == y and x != z


def test_an_adopted_step_costs_no_prefill_and_a_foreign_step_only_its_tokens(tiny):
    d = tiny.draft
    pc = prefix(d)
    s = sample(d, pc)
    d.adopt(pc, s, 0)
    # the adopted row's KV (possibly with padding past the step, cropped on next use)
    assert pc.cache.get_seq_length() == len(pc.cache_ids)
    assert pc.cache_ids[: len(pc.ids) - 1] == pc.ids[:-1]
    before = pc.prefill_tokens
    s2 = sample(d, pc)
    assert pc.prefill_tokens == before  # own step: nothing re-encoded
    foreign = d.encode("Then 24 + 48 = 72.\n\n")
    pc.extend(foreign)
    before = pc.prefill_tokens
    sample(d, pc)
    assert pc.prefill_tokens - before == len(foreign)  # only the new tokens
    assert s2.prefix_len < len(pc.ids)


def test_cache_follows_the_context_after_rejection(tiny):
    """A rejected sample leaves the run's cache untouched; a scored-then-rejected step is
    cropped away before the next call, so generation matches a fresh run."""
    t = tiny.target
    pc = prefix(t)
    s = sample(t, pc, n=1, temperature=0.0)
    t.score(pc, s.candidates[0].token_ids[:3], t.capture_layers(2))  # leaves 4 extra KV rows
    again = sample(t, pc, n=1, temperature=0.0, fork=False)
    fresh = sample(t, prefix(t), n=1, temperature=0.0)
    assert again.candidates[0].token_ids == fresh.candidates[0].token_ids


def test_cut_rules(tiny):
    d = tiny.draft
    nl = d.tokenizer.convert_tokens_to_ids("Ċ")
    body = d.encode("x = 5")
    eos = d.eos_ids[0]
    c = cut_step([*body, nl, nl, *body], "\n\n", d.eos_ids, d.decode, None)
    assert (c.text, c.ended, c.token_ids) == ("x = 5", "delimiter", [*body, nl, nl])
    assert c.n_scored == 0  # no log-probs were passed
    c = cut_step([*body, eos, 0, 0], "\n\n", d.eos_ids, d.decode, torch.zeros(len(body) + 3))
    assert (c.text, c.ended, c.token_ids, c.n_scored) == ("x = 5", "eos", body, len(body))
    c = cut_step(body, "\n\n", d.eos_ids, d.decode, torch.zeros(len(body)))
    assert (c.ended, c.n_scored) == ("length", len(body) - 1)


def test_context_window_is_checked(tiny):
    pc = prefix(tiny.draft, "word " * 3000)
    with pytest.raises(InputError, match="window"):
        sample(tiny.draft, pc, max_new_tokens=2000)


def test_load_errors_are_typed(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        LocalCausalLM.load(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelLoadError, match="not a model"):
        LocalCausalLM.load(tmp_path / "notes.txt")
    with pytest.raises(ModelLoadError, match=r"config\.json"):
        LocalCausalLM.load(tmp_path)
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelLoadError, match=r"broken\.gguf"):
        LocalCausalLM.load(bad)


def test_save_and_load_round_trip(tiny, tmp_path):
    tiny.draft.model.save_pretrained(tmp_path)
    tiny.draft.tokenizer.save_pretrained(tmp_path)
    again = LocalCausalLM.load(tmp_path)
    pc1, pc2 = prefix(tiny.draft), prefix(again)
    a = sample(tiny.draft, pc1, n=1, temperature=0.0).candidates[0].token_ids
    b = sample(again, pc2, n=1, temperature=0.0).candidates[0].token_ids
    assert a == b


def test_model_layer_imports_without_langgraph_or_pydantic():
    """The GPU box for benchmarks/decode_speed.py has torch and transformers only."""
    import subprocess
    import sys

    code = (
        "import sys, specguard_graph.models.local.hf, specguard_graph.steps\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('langgraph', 'pydantic'))\n"
        "assert not bad, bad\n"
        "import specguard_graph as s\n"
        "assert s.build_graph.__module__ == 'specguard_graph.graph'\n"
        "assert sorted(s.__all__) == sorted(s._WHERE)\n"
        "assert all(hasattr(s, n) for n in s.__all__)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    import specguard_graph

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        specguard_graph.nope  # noqa: B018


def test_auto_picks_the_gguf_blocks_where_the_model_has_them(tmp_path, monkeypatch):
    """`auto` is the fastest exact CPU format: a model's own GGUF blocks where it has them and
    the kernel runs, int8 for any other model on a CPU; $SPECGUARD_QUANTIZE overrides it."""
    from specguard_graph import ConfigError
    from specguard_graph.models.loading import pick_quantize
    from specguard_graph.models.local import int8_kernel

    monkeypatch.delenv("SPECGUARD_QUANTIZE", raising=False)
    f32 = torch.float32
    blocks = "gguf" if int8_kernel.load() is not None else "int8"
    (tmp_path / "model.gguf").write_bytes(b"GGUF")  # a file: its own GGUF source
    assert pick_quantize("auto", tmp_path / "model.gguf", "cpu", f32) == blocks
    assert pick_quantize("auto", tmp_path, "cpu", f32) == "int8"  # no GGUF source
    assert pick_quantize("auto", tmp_path / "model.gguf", "cpu", torch.bfloat16) == "int8"
    assert pick_quantize("auto", tmp_path / "model.gguf", "cuda:0", f32) == "none"
    assert pick_quantize("none", tmp_path / "model.gguf", "cpu", f32) == "none"
    monkeypatch.setattr(int8_kernel, "load", lambda: None)  # no compiler: int8 on torch's kernel
    assert pick_quantize("auto", tmp_path / "model.gguf", "cpu", f32) == "int8"
    monkeypatch.setenv("SPECGUARD_QUANTIZE", "int8x2")
    assert pick_quantize("auto", tmp_path / "model.gguf", "cpu", f32) == "int8x2"
    assert pick_quantize("int8", tmp_path / "model.gguf", "cpu", f32) == "int8"  # named wins
    monkeypatch.setenv("SPECGUARD_QUANTIZE", "int4")
    with pytest.raises(ConfigError, match=r"SPECGUARD_QUANTIZE must be one of .*'int4'"):
        pick_quantize("auto", tmp_path, "cpu", f32)
