"""BFCL read from the `bfcl-eval` wheel and graded by BFCL's own checker, exactly as BFCL does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specguard_graph.agents.spec import ChatSteps, read_question
from specguard_graph.bench import bfcl
from specguard_graph.bench.data import load
from specguard_graph.errors import InputError


@pytest.fixture(scope="module")
def dev():
    return {p["id"]: p for p in bfcl.problems("bfcl-dev:" + ",".join(FIVE))}


FIVE = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")


def verdict(problem, text):
    return bfcl.grade(problem["answer"], problem["question"], text)


def test_splits_sizes_and_interleaving():
    test = load("bfcl:simple_python,irrelevance")
    dev = load("bfcl-dev:simple_python,irrelevance")
    assert len(dev) == 2 * bfcl.DEV_PER_CATEGORY
    assert len(test) == 400 + 240 - 2 * bfcl.DEV_PER_CATEGORY
    assert not {p["id"] for p in dev} & {p["id"] for p in test}
    assert [p["id"] for p in dev[:4]] == ["simple_python_0", "irrelevance_0", "simple_python_1",
                                          "irrelevance_1"]  # fmt: skip
    with pytest.raises(InputError, match="unknown BFCL category"):
        load("bfcl:simple_cobol")
    with pytest.raises(InputError, match="expected bfcl"):
        load("bfcl:")


def test_prompting_questions_carry_bfcls_system_prompt_and_dotted_names(dev):
    doc = read_question(dev["simple_python_1"]["question"])
    system = doc["messages"][0]["content"]
    assert doc["calls"] == "python" and "[func_name1(params_name1=params_value1" in system
    assert "Note that the provided function is in Python 3 syntax." in system
    assert doc["tools"][0]["function"]["name"] == "math.factorial"


def test_native_questions_render_the_tools_in_the_chat_template():
    (p, *_) = bfcl.problems("bfcl-fc-dev:simple_python")[1:2]
    doc = read_question(p["question"])
    assert doc["calls"] == "json" and doc["tools"][0]["function"]["name"] == "math_factorial"
    assert doc["messages"] == [{"role": "user", "content": doc["messages"][0]["content"]}]


@pytest.mark.parametrize(
    ("text", "valid", "error"),
    [
        ("[math.factorial(number=5)]", True, None),
        ("math.factorial(number=5)", True, None),  # BFCL's decoder adds the brackets
        ("[math.factorial(number=6)]", False, "value_error"),
        ("[math_factorial(number=5)]", False, "wrong_func_name"),  # prompting keeps the dot
        ("[math.factorial(n=5)]", False, "simple_function_checker:missing_required"),
        ("I cannot.", False, "ast_decoder:decoder_failed"),
    ],
)
def test_the_checker_grades_a_dotted_simple_call_as_bfcl_does(dev, text, valid, error):
    v = verdict(dev["simple_python_1"], text)
    assert v["valid"] is valid and (error is None or error in v["error_type"])


def test_native_calls_are_graded_with_underscored_names():
    p = bfcl.problems("bfcl-fc-dev:simple_python")[1]
    good = '<tool_call>\n{"name": "math_factorial", "arguments": {"number": 5}}\n</tool_call>'
    assert verdict(p, good)["valid"]
    assert not verdict(p, good.replace("math_factorial", "math.factorial"))["valid"]


def test_parallel_calls_are_order_free_and_all_required(dev):
    p = dev["parallel_0"]
    gold = json.loads(p["answer"])["ground_truth"]
    calls = [f"{name}({', '.join(f'{k}={v[0]!r}' for k, v in args.items() if v[0] != '')})"
             for g in gold for name, args in g.items()]  # fmt: skip
    assert verdict(p, "[" + ", ".join(calls) + "]")["valid"]
    assert verdict(p, "[" + ", ".join(reversed(calls)) + "]")["valid"]
    assert not verdict(p, "[" + calls[0] + "]")["valid"]


def test_irrelevance_is_right_without_a_call(dev):
    p = dev["irrelevance_0"]
    assert verdict(p, "None of the given functions can compute this.")["valid"]
    assert verdict(p, "[]")["valid"]
    assert not verdict(p, "[determine_body_mass_index(weight=70.0, height=1.8)]")["valid"]


def test_the_schema_check_reads_bfcl_schemas(dev):
    p = dev["simple_python_1"]
    spec = ChatSteps()
    assert spec.check(p["question"], "[math.factorial(number=5)]") is None
    assert "not of type 'integer'" in spec.check(p["question"], '[math.factorial(number="5")]')
    assert "unknown tool" in spec.check(p["question"], "[factorial(number=5)]")
    assert spec.check(p["question"], "I need more information.") is None  # free text


def test_the_wheel_downloads_extracts_and_grades_from_an_empty_cache(tmp_path):
    """What the bench reads from the registry works on a machine that never had it."""
    env = {**os.environ, "SPECGUARD_HOME": str(tmp_path / "home"), "PIP_NO_CACHE_DIR": "1"}
    env.pop("BFCL_PROJECT_ROOT", None)
    code = (
        "from specguard_graph.bench import bfcl\n"
        "p = bfcl.problems('bfcl-dev:simple_python')[1]\n"
        "print(bfcl.grade(p['answer'], p['question'], '[math.factorial(number=5)]')['valid'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).parent)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"
    assert (tmp_path / "home" / f"bfcl_eval-{bfcl.BFCL[1]}" / ".complete").exists()


def test_the_bench_runs_bfcl_problems_with_every_method_on_tiny_models(tiny, tmp_path):
    from specguard_graph import SpecGuardConfig
    from specguard_graph.bench import methods
    from specguard_graph.bench.run import run
    from specguard_graph.errors import ConfigError

    problems = load("bfcl-dev:simple_python,irrelevance", limit=2)
    base = SpecGuardConfig()
    names = ["target", "draft", "sd", "specguard-greedy", "specguard@beta=1.0+tau=0.9"]
    solvers = {m: methods.make(m, tiny.draft, tiny.target, tiny.embedder, base, 8,
                               steps=ChatSteps()) for m in names}  # fmt: skip
    run(problems, solvers, tmp_path)
    for m in names:
        records = [json.loads(x) for x in (tmp_path / f"{m}.jsonl").read_text().splitlines()]
        assert [r["id"] for r in records] == ["simple_python_0", "irrelevance_0"]
        assert all(isinstance(r["bfcl"]["valid"], bool) and r["correct"] == r["bfcl"]["valid"]
                   for r in records)  # fmt: skip
    sg = json.loads((tmp_path / "specguard-greedy.jsonl").read_text().splitlines()[0])
    assert len(sg["step_records"]) == 1 and sg["step_records"][0]["checked"]
    for bad in ("rsd", "specguard-program"):
        with pytest.raises(ConfigError, match="steps"):
            methods.make(bad, tiny.draft, tiny.target, tiny.embedder, base, 8, steps=ChatSteps())
