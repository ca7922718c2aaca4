"""The resumable benchmark loop: one JSONL per method, fsynced per problem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..machine import cpu_capability
from ..results import ResultLog
from .data import Problem
from .grade import grade_problem

Report = Callable[[str, int, int], None]  # (method, done, total)


def prompt_stores(*models: Any, keep: bool = False) -> Callable[[str], None]:
    """`run`'s `before(method)`. By default every local model forgets the prompts it kept, so
    each problem starts cold and no method is timed on another's prefill. `keep=True`: each
    method gets prefix stores of its own, kept from problem to problem, as a deployed agent
    keeps its system prompt and tools cached across conversations. Either way the disk tier
    (`prefix_store/disk.py`) is off: a method is never timed on another process's prefill."""
    from ..models.local.prefix_store import PrefixStore

    local = [m for m in models if getattr(m, "prefix_store", None) is not None]
    own: dict[str, list[Any]] = {}
    for m in local:  # timed cold: no prompt from an earlier process either
        m.prefix_store.disk = None

    def before(method: str) -> None:
        if not keep:
            for m in local:
                m.prefix_store.clear()
            return
        stores = own.setdefault(method, [PrefixStore(m.model.config, m.prefix_store.max_bytes)
                                         for m in local])  # fmt: skip
        for m, store in zip(local, stores, strict=True):
            m.prefix_store = store

    return before


def check_out(out_dir: Path, methods: list[str]) -> None:
    """Every file `run` and the report will write can be written: checked before models load."""
    for name in [*(f"{m}.jsonl" for m in methods), "summary.md"]:
        ResultLog(out_dir / name).check()


def weights(*models: Any) -> str:
    """The weight formats the models compute in, as `--quantize` names them ("gguf/gguf";
    "served" for a model behind a server): what a record ran on."""
    from torch import nn
    from torch.ao.nn.quantized import dynamic

    from ..models.local.blocks import BlockLinear
    from ..models.local.numerics import GGUF_ACTIVATIONS, Int8WeightOnlyLinear

    def one(lm: Any) -> str:
        model = getattr(lm, "model", None)
        if not isinstance(model, nn.Module):
            return "served"
        layers = list(model.modules())  # gguf with some layers in int8 is still gguf
        if blocks := [m for m in layers if isinstance(m, BlockLinear)]:
            return {bits: name for name, bits in GGUF_ACTIVATIONS.items()}[blocks[0].act]
        int8 = [m.terms for m in layers if isinstance(m, Int8WeightOnlyLinear)]
        if int8:
            return "int8x2" if 2 in int8 else "int8"
        return "dynamic-int8" if any(isinstance(m, dynamic.Linear) for m in layers) else "none"

    return "/".join(one(lm) for lm in models)


def check_resume(done: dict[str, dict[str, Any]], loaded: str, named: bool) -> None:
    """A resumed run must load what its records ran on. `--quantize auto` resolves per machine
    and has changed (int8 until 2026-12-06, then gguf where the blocks exist), so without this
    a resumed run could put two formats in one table."""
    named = named or set(loaded.split("/")) == {"served"}  # a server's weights are its own
    for method, records in done.items():
        for r in records.values():
            had = r.get("weights")
            if had is None and not named:
                raise ConfigError(f"{method}: its records predate the recorded weight format; "
                                  "name the one they ran on with --quantize (their command is "
                                  "in summary.md)")  # fmt: skip
            if had is not None and had != loaded:
                raise ConfigError(f"{method}: its records ran on {had} weights, this run "
                                  f"loads {loaded}; pass the --quantize they ran on, or a new "
                                  "--out")  # fmt: skip


def run(
    problems: list[Problem],
    solvers: dict[str, Callable[[str], dict[str, Any]]],
    out_dir: Path,
    progress: Report = lambda m, d, t: None,
    before: Callable[[str], None] = lambda method: None,
    loaded: tuple[str, bool] | None = None,
) -> None:
    """Solve every problem with every method; finished ones are skipped on a rerun.

    Problems are the outer loop, so a run stopped early still compares all methods on the
    same problems (the report uses only problems every method has finished). `before(method)`
    runs before each problem and method (`prompt_stores`: which prompts the models keep).
    `loaded`: the models' `weights` and whether the user named them (`check_resume`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cpu = cpu_capability()  # resumed runs may span machines: each record names its kernels
    logs = {m: ResultLog(out_dir / f"{m}.jsonl", key="id") for m in solvers}
    done = {m: log.done() for m, log in logs.items()}
    stamp = {}
    if loaded is not None:
        check_resume(done, *loaded)
        stamp["weights"] = loaded[0]
    for m in solvers:
        progress(m, sum(p["id"] in done[m] for p in problems), len(problems))
    for p in problems:
        for method, solve in solvers.items():
            if p["id"] in done[method]:
                continue
            before(method)
            result = solve(p["question"])
            result.update(id=p["id"], question=p["question"], gold=p["answer"],
                          correct=grade_problem(p, result), cpu=cpu, **stamp)  # fmt: skip
            logs[method].append(result)
            done[method][p["id"]] = result
            progress(method, sum(q["id"] in done[method] for q in problems), len(problems))
