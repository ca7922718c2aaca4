"""Training problems disjoint from every evaluation set, by construction and by check.

Why not reasoning-gym's `gsm_symbolic`, the project's dev split: its 100 generators are the
GSM-Symbolic templates, i.e. the 100 GSM8K test problems gsm8k-100 holds with other numbers
and names (generator 0 is gsm8k-100's "Emily can peel 6 shrimp a minute and saute 30 shrimp").
A draft trained on them would learn the evaluation's templates. The tasks below are
reasoning-gym generators with no GSM8K source: arithmetic, equations, counting, time and
probability, asked in words or symbols; the target writes the reasoning, which is what the
draft learns."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..bench.data import Problem
from ..errors import InputError

TASKS = (
    "leg_counting", "simple_equations", "time_intervals", "simple_geometry", "lcm", "gcd",
    "coin_flip", "fraction_simplification", "decimal_arithmetic", "basic_arithmetic",
    "products", "chain_sum", "calendar_arithmetic", "prime_factorization",
)  # fmt: skip
FORBIDDEN = ("gsm_symbolic",)  # generators made from an evaluation set's problems


def fresh_problems(n: int, seed: int) -> list[Problem]:
    """`n` problems, the tasks interleaved (problem i from task i mod len(TASKS)), the same for
    the same seed."""
    if n < 1:
        raise InputError(f"--problems must be at least 1, got {n}")
    try:
        import reasoning_gym
    except ImportError:
        raise InputError(
            "distill needs reasoning-gym: pip install 'specguard-graph[bench]'"
        ) from None
    per_task = -(-n // len(TASKS))
    columns = [
        list(reasoning_gym.create_dataset(t, size=per_task, seed=seed * 1000 + i))
        for i, t in enumerate(TASKS)
    ]
    out: list[Problem] = []
    for j in range(per_task):
        for t, col in zip(TASKS, columns, strict=True):
            if len(out) < n:
                x = col[j]
                out.append({"id": f"distill-{t}-{seed}-{j}", "question": x["question"],
                            "answer": str(x["answer"])})  # fmt: skip
    return out


def normalized(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def overlap(problems: list[Problem], evaluation: list[Problem]) -> list[str]:
    """Ids of `problems` whose question is an evaluation question (or holds one, or is held by
    one), compared with case, spacing and punctuation ignored."""
    seen = [normalized(p["question"]) for p in evaluation]
    return [
        p["id"]
        for p in problems
        if any(q and (q in t or t in q) for q in seen for t in [normalized(p["question"])])
    ]


EVALUATED_BFCL = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")


def bfcl_questions(category: str) -> list[Problem]:
    """A BFCL category's items as their users ask them (the user turns' text), for `overlap`:
    with BFCL's system prompt and function list in it, every question would hold another."""
    from ..bench.bfcl import entries

    return [{"id": e["id"], "answer": "",
             "question": " ".join(m["content"] for turn in e["question"] for m in turn
                                  if m["role"] == "user")}
            for e, _ in entries(category)]  # fmt: skip


def write_problems(problems: list[Problem], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
