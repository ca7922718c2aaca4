"""The distillation's training problems: disjoint from every evaluation set, by question text
and by construction (no generator made from an evaluation set's problems)."""

import json
from pathlib import Path

import pytest

from specguard_graph.bench.data import gsm8k_100
from specguard_graph.distill.data import FORBIDDEN, TASKS, fresh_problems, overlap
from specguard_graph.errors import InputError


def test_fresh_problems_are_the_same_for_a_seed_mixed_and_never_an_evaluation_question():
    problems = fresh_problems(3 * len(TASKS), seed=1)
    assert problems == fresh_problems(3 * len(TASKS), seed=1)
    assert problems != fresh_problems(3 * len(TASKS), seed=2)
    assert len({p["id"] for p in problems}) == len(problems)
    assert {p["id"].split("-")[1] for p in problems} == set(TASKS)
    assert not set(TASKS) & set(FORBIDDEN)
    assert overlap(problems, gsm8k_100()) == []


def test_the_overlap_check_finds_an_evaluation_question_however_it_is_written():
    evaluation = gsm8k_100()
    planted = [
        {"id": "copy", "question": evaluation[7]["question"].upper().replace(".", " . "),
         "answer": "0"},
        {"id": "inside", "question": "Answer this: " + evaluation[3]["question"], "answer": "0"},
        {"id": "fresh", "question": "How many legs do 3 spiders have?", "answer": "24"},
    ]  # fmt: skip
    assert overlap(planted, evaluation) == ["copy", "inside"]


def test_the_bfcl_questions_trained_on_are_none_of_the_evaluated_ones():
    from specguard_graph.distill.data import EVALUATED_BFCL, bfcl_questions

    evaluated = [q for c in EVALUATED_BFCL for q in bfcl_questions(c)]
    assert len(evaluated) > 1000
    assert overlap(bfcl_questions("live_simple"), evaluated) == []
    # the questions of the tool-call records the committed adapters learned from
    results = Path(__file__).resolve().parents[1] / "benchmarks/results/distill"
    ids = {json.loads(line)["id"] for f in results.glob("collect-bfcl-*/target.jsonl")
           for line in f.read_text().splitlines() if line.strip()}  # fmt: skip
    trained = [q for c in ("live_simple", "live_multiple") for q in bfcl_questions(c)
               if q["id"] in ids]  # fmt: skip
    assert len(trained) == len(ids) >= 305
    assert overlap(trained, evaluated) == []
    # live_multiple holds two evaluated questions: the check finds them
    assert overlap(bfcl_questions("live_multiple")[185:195], evaluated) == [
        "live_multiple_190-84-0",
        "live_multiple_191-85-0",
    ]


def test_no_problems_is_refused():
    with pytest.raises(InputError, match="--problems"):
        fresh_problems(0, seed=1)


def test_a_model_agrees_with_its_own_greedy_answer_everywhere_and_another_does_not(tiny):
    from specguard_graph.distill.agreement import agreement
    from specguard_graph.distill.examples import SPEC

    pc = tiny.target.new_prefix(SPEC.render_prompt("What is 2 + 3?", tiny.target.tokenizer))
    own = tiny.target.sample(pc, n=1, delimiter=SPEC.delimiter, max_new_tokens=30,
                             temperature=0.0, fork=False).candidates[0]  # fmt: skip
    records = [{"question": "What is 2 + 3?", "text": own.text}]
    assert tiny.target.encode(own.text) == own.token_ids[: len(tiny.target.encode(own.text))]
    mine = agreement(tiny.target, records)
    assert mine["top1"] == 1.0 and mine["steps_equal"] == 1.0
    assert mine["mean_run"] == mine["positions"]
    other = agreement(tiny.draft, records)
    assert other["top1"] < 1.0 and other["steps_equal"] < 1.0
    with pytest.raises(InputError, match="empty"):
        agreement(tiny.draft, [])


def test_a_chat_question_is_one_message_in_the_chat_template_as_the_chat_model_runs_it(tiny):
    from specguard_graph.agents.spec import ChatSteps, chat_question
    from specguard_graph.distill.agreement import agreement
    from specguard_graph.distill.examples import encode, example

    tok = tiny.target.tokenizer
    q = chat_question([{"role": "user", "content": "Add 2 and 3."}], calls="python")
    ex = example(tok, q, "[add(a=2, b=3)]\n\nDone.")  # a paragraph break is no step end here
    assert ex.prompt == encode(tok, ChatSteps().render_prompt(q, tok))
    assert ex.ends == [len(ex.answer)]
    pc = tiny.target.new_prefix(ChatSteps().render_prompt(q, tok))
    own = tiny.target.sample(pc, n=1, delimiter=ChatSteps().delimiter, max_new_tokens=20,
                             temperature=0.0, fork=False).candidates[0]  # fmt: skip
    mine = agreement(tiny.target, [{"question": q, "text": own.text}])
    assert mine["top1"] == 1.0 and mine["steps"] == 1


def test_the_cli_writes_problems_and_refuses_bad_records(tmp_path, model_dirs):
    from typer.testing import CliRunner

    from specguard_graph.cli import app

    out = tmp_path / "p.jsonl"
    r = CliRunner().invoke(app, ["distill", "problems", "--count", "14", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == 14
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    r = CliRunner().invoke(app, ["distill", "evaluate", "--records", str(bad),
                                 "--model", str(model_dirs / "draft")])  # fmt: skip
    assert r.exit_code == 2 and "bad.jsonl:1" in r.output
