"""LoRA on the draft, on the target's text: the two recipes `specguard distill train` compares.

- `target-text`: cross-entropy on every answer token the target wrote (plain distillation on
  its greedy text, DistillSpec's and EAGLE's data).
- `hard-positions`: the same loss, with the positions where the draft's own argmax misses the
  target's token weighted up (`hard_weight`), recomputed as the draft learns. Lossless speed
  and whole-step acceptance are decided by those few positions (issue 74), which is where
  Draft-OPD trains.

Why these adapter targets: the 0.5B draft's q/k/v/o and head are Q5_0/Q8_0 tensors whose rows
`merge.py` can re-quantise to Q8_0 (fine enough to keep a small update) for 4 % more bytes per
token; the MLP's gate/up in Q8_0 would cost 20 %, and its Q4_K/Q6_K down cannot be written here.

Resumable: a checkpoint after every optimizer step group holds the adapter, the optimizer and
how many examples are done; a restart with the same settings and data goes on from there.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from ..errors import ConfigError, InputError
from .examples import Example

RecipeName = Literal["target-text", "hard-positions"]
RECIPES: tuple[str, ...] = ("target-text", "hard-positions")
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "lm_head")
CHECKPOINT = "checkpoint.pt"
Progress = Callable[[int, int, float], None]  # (examples done, total, running loss)


@dataclass(frozen=True)
class Recipe:
    name: RecipeName = "target-text"
    rank: int = 16
    alpha: int = 32
    lr: float = 2e-4
    epochs: int = 2
    accumulate: int = 4
    hard_weight: float = 2.0
    seed: int = 0
    max_tokens: int = 1024
    targets: tuple[str, ...] = field(default=TARGETS)

    def __post_init__(self) -> None:
        if self.name not in RECIPES:
            raise ConfigError(f"recipe must be one of {', '.join(RECIPES)}, got {self.name!r}")
        for key in ("rank", "alpha", "epochs", "accumulate", "max_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"recipe {key} must be at least 1, got {getattr(self, key)}")
        if not self.lr > 0 or self.hard_weight < 0:
            raise ConfigError(f"recipe lr must be > 0 and hard_weight >= 0 ({self.lr}, "
                              f"{self.hard_weight})")  # fmt: skip

    def settings(self) -> dict[str, Any]:
        return {**asdict(self), "targets": list(self.targets)}


def with_adapter(model: torch.nn.Module, recipe: Recipe) -> torch.nn.Module:
    """`model` (a transformers causal LM in float32) with a fresh LoRA adapter, seeded."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(recipe.seed)
    config = LoraConfig(r=recipe.rank, lora_alpha=recipe.alpha, lora_dropout=0.0,
                        target_modules=list(recipe.targets), bias="none")  # fmt: skip
    return get_peft_model(model, config)


def example_loss(model: torch.nn.Module, ex: Example, recipe: Recipe) -> torch.Tensor:
    """Mean cross-entropy over the answer's tokens (weighted where the draft misses them, for
    `hard-positions`); only the answer positions go through the head."""
    ids = (ex.prompt + ex.answer)[-recipe.max_tokens :]
    n = min(len(ex.answer), len(ids) - 1)
    x = torch.tensor([ids])
    inner = model.get_base_model()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = inner.model(input_ids=x).last_hidden_state[0, -n - 1 : -1]
        logits = inner.lm_head(hidden).float()
    y = x[0, -n:]
    ce = F.cross_entropy(logits, y, reduction="none")
    if recipe.name == "target-text":
        return ce.mean()
    weight = 1.0 + recipe.hard_weight * (logits.detach().argmax(-1) != y).float()
    return (weight * ce).sum() / weight.sum()


def order(n: int, recipe: Recipe) -> list[int]:
    """The example order of every epoch, from the seed alone (so a resumed run sees the same)."""
    out: list[int] = []
    for epoch in range(recipe.epochs):
        idx = list(range(n))
        random.Random(recipe.seed * 1000 + epoch).shuffle(idx)
        out += idx
    return out


def train(
    model: torch.nn.Module,
    data: list[Example],
    recipe: Recipe,
    out: Path,
    *,
    data_hash: str,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Train an adapter on `data`, checkpointing into `out`; returns the run's figures and
    leaves the adapter in `out` (peft's layout: adapter_config.json, adapter_model.safetensors)."""
    if not data:
        raise InputError("the training data is empty: no examples to learn from")
    peft_model = with_adapter(model, recipe)
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    plan = order(len(data), recipe)
    state = {"settings": recipe.settings(), "data": data_hash}
    done, losses = _resume(peft_model, optim, out / CHECKPOINT, state)
    total_steps = -(-len(plan) // recipe.accumulate)
    peft_model.train()
    for i in range(done, len(plan)):
        loss = example_loss(peft_model, data[plan[i]], recipe)
        (loss / recipe.accumulate).backward()
        losses.append(float(loss.detach()))
        if (i + 1) % recipe.accumulate == 0 or i + 1 == len(plan):
            for group in optim.param_groups:  # linear decay, from the step count alone
                group["lr"] = recipe.lr * (1.0 - (i // recipe.accumulate) / total_steps)
            optim.step()
            optim.zero_grad(set_to_none=True)
            _checkpoint(peft_model, optim, out / CHECKPOINT, state, i + 1, losses)
        if progress:
            progress(i + 1, len(plan), sum(losses[-16:]) / len(losses[-16:]))
    peft_model.save_pretrained(out, save_embedding_layers=False)  # the adapter alone
    tokens = sum(len(ex.answer) for ex in data)
    return {"examples": len(data), "answer_tokens": tokens, "passes": recipe.epochs,
            "optimizer_steps": total_steps, "loss_first": _mean(losses[: len(data)]),
            "loss_last": _mean(losses[-len(data) :])}  # fmt: skip


def _mean(xs: list[float]) -> float:
    return sum(xs) / max(len(xs), 1)


def _checkpoint(model: Any, optim: Any, path: Path, state: dict, done: int, losses: list) -> None:
    from peft import get_peft_model_state_dict

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    adapter = get_peft_model_state_dict(model, save_embedding_layers=False)
    torch.save({**state, "done": done, "losses": losses, "optim": optim.state_dict(),
                "adapter": adapter}, tmp)  # fmt: skip
    tmp.replace(path)


def _resume(model: Any, optim: Any, path: Path, state: dict) -> tuple[int, list[float]]:
    """Examples done and their losses from a checkpoint of the same run, else (0, [])."""
    from peft import set_peft_model_state_dict

    if not path.is_file():
        return 0, []
    try:
        ck = torch.load(path, weights_only=False)
    except (OSError, RuntimeError, EOFError) as exc:
        raise InputError(f"{path}: unreadable checkpoint ({exc}); delete it to start over") from exc
    if ck.get("settings") != state["settings"] or ck.get("data") != state["data"]:
        raise InputError(f"{path}: a checkpoint of other settings or data; delete it or use "
                         "another --out")  # fmt: skip
    set_peft_model_state_dict(model, ck["adapter"])
    optim.load_state_dict(ck["optim"])
    return int(ck["done"]), list(ck["losses"])
