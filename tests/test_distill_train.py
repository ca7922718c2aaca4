"""Training a draft on the target's text (issue 74): it learns, resumes, and its adapter is
checked against its manifest before it may replace a working draft."""

import json
import shutil

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from specguard_graph.distill import manifest as mf
from specguard_graph.distill.agreement import agreement
from specguard_graph.distill.examples import example, examples, read_records
from specguard_graph.distill.merge import deltas
from specguard_graph.distill.train import CHECKPOINT, Recipe, train
from specguard_graph.errors import ConfigError, InputError, ModelLoadError
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.testing import tiny_lm

RECORDS = [
    {"question": "What is 2 + 3?", "text": "Step 1: 2 + 3 = 5.\n\nThe answer is \\boxed{5}."},
    {"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
     "text": "Step 1: 48 / 2 = 24 clips in May.\n\nStep 2: 48 + 24 = 72.\n\n\\boxed{72}"},
]  # fmt: skip
FAST = dict(rank=8, alpha=16, lr=1e-2, epochs=10, accumulate=1)


@pytest.fixture(scope="module")
def learner(tmp_path_factory):
    """A tiny draft that can learn (no constant residual direction), saved as a model dir."""
    path = tmp_path_factory.mktemp("learner")
    lm = tiny_lm(layers=2, hidden=64, heads=4, seed=5, newline_bias=0.0, eos_bias=0.0,
                 constant=0.0)  # fmt: skip
    lm.model.save_pretrained(path)
    return path


def raw_draft(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


@pytest.mark.parametrize("recipe", ["target-text", "hard-positions"])
def test_a_tiny_draft_trained_on_the_targets_text_agrees_with_it_more(learner, tiny, tmp_path,
                                                                      recipe):  # fmt: skip
    tok = tiny.draft.tokenizer
    before = agreement(LocalCausalLM(raw_draft(learner), tok), RECORDS)
    model = raw_draft(learner)
    figures = train(model, examples(tok, RECORDS), Recipe(name=recipe, **FAST), tmp_path,
                    data_hash="x")  # fmt: skip
    merged = PeftModel.from_pretrained(raw_draft(learner), tmp_path).merge_and_unload()
    after = agreement(LocalCausalLM(merged, tok), RECORDS)
    assert figures["loss_last"] < figures["loss_first"]
    assert after["top1"] > before["top1"] + 0.2, (before, after)
    assert figures["optimizer_steps"] == 20 and figures["examples"] == 2
    assert (tmp_path / "adapter_model.safetensors").is_file()
    assert set(deltas(tmp_path)) >= {"blk.0.attn_q.weight", "output.weight"}


def test_a_stopped_run_resumes_to_the_same_adapter(learner, tiny, tmp_path):
    tok, recipe = tiny.draft.tokenizer, Recipe(**{**FAST, "epochs": 2})
    data = examples(tok, RECORDS)
    whole = tmp_path / "whole"
    train(raw_draft(learner), data, recipe, whole, data_hash="d")
    part = tmp_path / "part"

    def stop(done, total, loss):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(raw_draft(learner), data, recipe, part, data_hash="d", progress=stop)
    assert torch.load(part / CHECKPOINT, weights_only=False)["done"] == 2
    seen = []
    train(raw_draft(learner), data, recipe, part, data_hash="d",
          progress=lambda d, t, loss: seen.append(d))  # fmt: skip
    assert seen == [3, 4]
    a, b = deltas(whole), deltas(part)
    assert all(torch.allclose(torch.from_numpy(a[k]), torch.from_numpy(b[k])) for k in a)
    with pytest.raises(InputError, match="other settings or data"):
        train(raw_draft(learner), data, recipe, part, data_hash="other")


def test_bad_training_input_is_refused_in_one_line(learner, tiny, tmp_path):
    with pytest.raises(InputError, match="empty"):
        train(raw_draft(learner), [], Recipe(), tmp_path, data_hash="x")
    with pytest.raises(ConfigError, match="recipe must be one of"):
        Recipe(name="magic")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rank"):
        Recipe(rank=0)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match=r"empty\.jsonl: no records"):
        read_records([empty])
    with pytest.raises(InputError, match="no such records file"):
        read_records([tmp_path / "missing.jsonl"])
    with pytest.raises(InputError, match="no text"):
        example(tiny.draft.tokenizer, "q", "")
    assert examples(tiny.draft.tokenizer, [{"question": "q", "text": ""}]) == []


@pytest.fixture
def adapter(learner, tiny, tmp_path):
    out = tmp_path / "adapter"
    train(raw_draft(learner), examples(tiny.draft.tokenizer, RECORDS[:1]),
          Recipe(**{**FAST, "epochs": 1}), out, data_hash="x")  # fmt: skip
    mf.write(out, base={"gguf_sha256": "a" * 64, "tokenizer_sha256": "t"})
    return out


def test_the_manifest_refuses_another_base_a_corrupt_file_and_a_missing_manifest(adapter):
    assert mf.check(adapter, base_sha256="a" * 64, tokenizer="t")["format"] == 1
    with pytest.raises(ModelLoadError, match="another base model"):
        mf.check(adapter, base_sha256="b" * 64)
    with pytest.raises(ModelLoadError, match="another tokenizer"):
        mf.check(adapter, base_sha256="a" * 64, tokenizer="u")
    weights = adapter / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(ModelLoadError, match=r"adapter_model\.safetensors: sha256 does not match"):
        mf.check(adapter, base_sha256="a" * 64)
    with pytest.raises(ModelLoadError, match=r"adapter_model\.safetensors: unreadable"):
        deltas(adapter)
    (adapter / "manifest.json").write_text("{")
    with pytest.raises(ModelLoadError, match=r"manifest\.json: not a distillation manifest"):
        mf.check(adapter, base_sha256="a" * 64)
    (adapter / "manifest.json").unlink()
    with pytest.raises(ModelLoadError, match=r"manifest\.json: missing"):
        mf.check(adapter, base_sha256="a" * 64)
    shutil.rmtree(adapter)
    with pytest.raises(ModelLoadError, match=r"adapter_config\.json"):
        deltas(adapter)


def test_manifest_records_the_hashes_it_checks(adapter):
    manifest = json.loads((adapter / "manifest.json").read_text())
    assert manifest["files"]["adapter_model.safetensors"] == mf.sha256(
        adapter / "adapter_model.safetensors"
    )


def test_the_cli_refuses_missing_records_and_a_bad_adapter_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from specguard_graph.cli import app

    r = CliRunner().invoke(app, ["distill", "train", "--records", str(tmp_path / "none.jsonl"),
                                 "--out", str(tmp_path / "a")])  # fmt: skip
    assert r.exit_code == 2 and "none.jsonl: no such records file" in r.output
    r = CliRunner().invoke(app, ["distill", "install", "--adapter", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "manifest.json: missing" in r.output
    r = CliRunner().invoke(app, ["distill", "train", "--records", str(tmp_path / "x.jsonl"),
                                 "--out", str(tmp_path / "a"), "--recipe", "magic"])  # fmt: skip
    assert r.exit_code == 2 and "recipe must be one of" in r.output
