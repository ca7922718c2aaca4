import json

import pytest
import torch

from specguard_graph import (
    ConfigError,
    PlanSteps,
    ReasoningSteps,
    SpecGuardConfig,
    StepSpec,
    get_step_spec,
)
from specguard_graph.scoring import select_medoid
from specguard_graph.steps import last_boxed


def test_medoid_picks_the_most_central_candidate():
    e = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [-1.0, 0.0]])
    # mean cos to others: 0 -> (0.8+0.6-1)/3, 1 -> (0.8+0.96-0.8)/3, 2 -> (0.6+0.96-0.6)/3
    assert select_medoid(e) == 1


def test_medoid_ties_go_to_the_lowest_index():
    e = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    assert select_medoid(e) == 0
    assert select_medoid(torch.tensor([[3.0, 4.0]])) == 0


def test_medoid_uses_the_real_embedder(tiny):
    texts = ["48 / 2 = 24 clips", "Natalia sold 24 clips", "48 / 2 = 24 clips", "zzzz qqq"]
    idx = select_medoid(tiny.embedder.embed(texts))
    assert idx == 0  # the duplicated text is the most consistent; the lower index wins


def test_config_defaults_and_json_round_trip(tmp_path):
    cfg = SpecGuardConfig()
    assert (cfg.k, cfg.beta, cfg.grounding_layers, cfg.sparsify) == (4, 0.3, 3, 0.01)
    path = tmp_path / "cfg.json"
    cfg.replace(tau=0.42).to_file(path)
    again = SpecGuardConfig.from_file(path)
    assert again.tau == 0.42 and again == cfg.replace(tau=0.42)
    json.loads(cfg.model_dump_json())


@pytest.mark.parametrize(
    "field, value",
    [
        ("k", 0),
        ("tau", -0.5),
        ("beta", -0.1),
        ("sparsify", 1.0),
        ("grounding_range", (0.5, 0.2)),
        ("logprob_range", (-1.0, 2.0)),
        ("signal_model", "judge"),
        ("grounding_layers", 0),
        ("unknown_field", 1),
    ],
)
def test_config_rejects_out_of_range_values_in_one_line(field, value):
    with pytest.raises(ConfigError) as info:
        SpecGuardConfig.make(**{field: value})
    assert "\n" not in str(info.value)
    assert field.split("_")[0] in str(info.value)


def test_config_step_tokens_cannot_exceed_total():
    with pytest.raises(ConfigError, match="max_step_tokens"):
        SpecGuardConfig.make(max_step_tokens=600, max_total_tokens=500)


def test_last_boxed_handles_nesting_and_takes_the_last():
    assert last_boxed(r"so \boxed{3} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{x") is None
    assert last_boxed("no answer") is None


def test_reasoning_spec():
    spec = ReasoningSteps()
    assert isinstance(spec, StepSpec)
    assert spec.is_final(r"The answer is \boxed{72}.", eos=False)
    assert not spec.is_final("48 / 2 = 24", eos=False)
    assert spec.is_final("anything", eos=True)
    assert spec.extract_answer("a\n\nb \\boxed{72}") == "72"


def test_plan_spec_is_a_different_notion_of_step(tiny):
    spec = PlanSteps()
    assert isinstance(spec, StepSpec) and spec.delimiter == "\n"
    assert spec.is_final("DONE", eos=False) and not spec.is_final("2. Pack", eos=False)
    assert json.loads(spec.extract_answer("1. Buy food\n2) Cook it\nDONE")) == [
        "Buy food",
        "Cook it",
    ]
    prompt = spec.render_prompt("cook dinner", tiny.draft.tokenizer)
    assert "to cook dinner" in prompt and prompt.endswith("<|im_start|>assistant\n")


def test_unknown_step_spec_names_the_known_ones():
    with pytest.raises(ConfigError, match="plan"):
        get_step_spec("poem")
