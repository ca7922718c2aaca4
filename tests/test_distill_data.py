"""The distillation's training problems: disjoint from every evaluation set, by question text
and by construction (no generator made from an evaluation set's problems)."""

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


def test_no_problems_is_refused():
    with pytest.raises(InputError, match="--problems"):
        fresh_problems(0, seed=1)
