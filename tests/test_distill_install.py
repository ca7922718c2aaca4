"""A distilled draft on the real embedded draft: merged into its GGUF blocks, installed as
`distilled:NAME`, loaded like the stock draft, row-invariant; a bad adapter is refused and
never replaces a working one."""

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from specguard_graph.distill import install as ins
from specguard_graph.distill import manifest as mf
from specguard_graph.errors import ModelLoadError
from specguard_graph.models.install import distilled
from specguard_graph.models.install.registry import DRAFT, model_dir
from specguard_graph.models.loading import load_lm
from specguard_graph.models.local import numerics
from specguard_graph.models.local.blocks import FORMATS, BlockLinear
from specguard_graph.testing import FEEDINGS, batch_of_4, feed

pytestmark = pytest.mark.usefixtures("real_pair")
PEFT = "base_model.model."


def write_adapter(path, pairs: dict[str, tuple[int, int]], seed=0, rank=2):
    """A LoRA adapter in peft's layout: module -> (inputs, outputs), random A and B."""
    from transformers import AutoTokenizer

    rng = np.random.default_rng(seed)
    weights = {}
    for module, (n_in, n_out) in pairs.items():
        weights[f"{PEFT}{module}.lora_A.weight"] = rng.normal(0, 0.05, (rank, n_in)).astype("f4")
        weights[f"{PEFT}{module}.lora_B.weight"] = rng.normal(0, 0.05, (n_out, rank)).astype("f4")
    path.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": 2 * rank}))
    tok = AutoTokenizer.from_pretrained(str(model_dir("draft")))
    mf.write(path, base={"gguf_sha256": DRAFT.sha256, "tokenizer_sha256": mf.tokenizer_sha(tok)})
    return path


GOOD = {"model.layers.0.self_attn.q_proj": (896, 896), "lm_head": (896, 151936)}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("distilled")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(distilled, "home", lambda: root)
        adapter = write_adapter(root / "adapter", GOOD)
        done = ins.install(adapter, "t")
        assert done["changed_tensors"] == 2
        yield mp, root


def test_the_distilled_draft_loads_by_name_in_q8_0_blocks_and_is_row_invariant(installed):
    lm = load_lm("draft", "distilled:t", quantize="auto")
    model = lm.model
    assert numerics.row_invariant(model)
    attn = model.model.layers
    assert isinstance(model.lm_head, BlockLinear) and FORMATS[model.lm_head.fmt] == "Q8_0"
    q0, q1 = attn[0].self_attn.q_proj, attn[1].self_attn.q_proj
    if isinstance(q0, BlockLinear):  # the kernel may stack q and k (lean_layers)
        assert FORMATS[q0.fmt] == "Q8_0" and FORMATS[q1.fmt] == "Q5_0"
    ids = lm.encode("Natalia sold clips to 48 of her friends in April, and half as many in May.")
    others = [lm.encode("How many clips did Natalia sell?"), lm.encode("48 / 2 = 24.")]
    one, _ = feed(model, [ids * 2], "one forward")
    for feeding in FEEDINGS[1:]:
        rows = batch_of_4(ids * 2, others * 2) if feeding == "row of 4" else [ids * 2]
        lp, _ = feed(model, rows, feeding)
        assert torch.equal(lp[:1], one), feeding
    stock = load_lm("draft", quantize="gguf")
    theirs, _ = feed(stock.model, [ids * 2], "one forward")
    assert not torch.equal(theirs, one)  # the adapter is in the weights
    floats = load_lm("draft", "distilled:t", quantize="none")  # its float weights: the blocks'
    assert torch.equal(floats.model.lm_head.weight.detach(), model.lm_head.dequantized())


@pytest.mark.parametrize("spoil", ["corrupt", "another base", "foreign shapes", "no manifest"])
def test_a_bad_adapter_is_refused_and_the_installed_draft_stays(installed, tmp_path, spoil):
    _, root = installed
    marker = (root / "models" / "distilled-t" / "specguard-model.json").read_text()
    bad = write_adapter(tmp_path / "bad", GOOD, seed=1)
    if spoil == "corrupt":
        f = bad / "adapter_model.safetensors"
        f.write_bytes(f.read_bytes()[:-64])
        match = r"adapter_model\.safetensors: sha256 does not match"
    elif spoil == "another base":
        m = json.loads((bad / "manifest.json").read_text())
        m["base"]["gguf_sha256"] = "0" * 64
        (bad / "manifest.json").write_text(json.dumps(m))
        match = "trained on another base model"
    elif spoil == "foreign shapes":
        bad = write_adapter(tmp_path / "foreign", {"model.layers.0.self_attn.q_proj": (64, 64)})
        match = "does not fit the base model"
    else:
        (bad / "manifest.json").unlink()
        match = r"manifest\.json: missing"
    with pytest.raises(ModelLoadError, match=match):
        ins.install(bad, "t")
    assert (root / "models" / "distilled-t" / "specguard-model.json").read_text() == marker
    assert not (root / "models" / "distilled-t.new").exists()


def test_a_distilled_name_that_is_not_installed_or_not_a_name_is_one_line(installed):
    with pytest.raises(ModelLoadError, match="distilled draft 'nope' is not installed"):
        load_lm("draft", "distilled:nope")
    with pytest.raises(ModelLoadError, match="is named distilled:NAME"):
        load_lm("draft", "distilled:../x")
