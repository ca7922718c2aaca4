"""The stages `specguard distill` runs, wired from the modules that do each: train an adapter on
records and write its manifest; install it; score a draft on held-out records."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError
from . import manifest as mf
from .examples import examples, read_records
from .train import Recipe, train

Progress = Callable[[int, int, float], None]


def data_sha(rows: list[dict[str, Any]]) -> str:
    """The training data's identity: its questions and texts, in order."""
    body = json.dumps([[r["question"], r["text"]] for r in rows], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def train_adapter(
    records: list[Path],
    out: Path,
    recipe: Recipe,
    *,
    limit: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Train `recipe` on the embedded draft from `records` (the first `limit`), into `out` with
    its manifest; a stopped run resumes from `out`'s checkpoint."""
    import peft
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..models.install.registry import DRAFT, model_dir

    rows = read_records(records)[:limit]
    base = model_dir("draft")
    if not (base / "config.json").is_file():
        raise ModelLoadError("the embedded draft is not installed: run `specguard models install`")
    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32,
                                                 local_files_only=True)  # fmt: skip
    data, sha = examples(tokenizer, rows), data_sha(rows)
    started = time.perf_counter()
    figures = train(model, data, recipe, out, data_hash=sha, progress=progress)
    hours = (time.perf_counter() - started) / 3600
    return mf.write(
        out,
        base={"name": DRAFT.name, "gguf_sha256": DRAFT.sha256,
              "tokenizer_sha256": mf.tokenizer_sha(tokenizer)},
        data={"files": [str(p) for p in records],
              "records": len(rows), "limit": limit, "sha256": sha},
        recipe=recipe.settings(), figures=figures,
        cost={"hours_this_run": round(hours, 3), "machine": mf.machine()},
        versions={"peft": peft.__version__, "torch": torch.__version__},
    )  # fmt: skip
