"""The compared methods, all on the same models and prompts.

target / draft: one model alone, greedy. sd: token-level speculative decoding, transformers'
assisted generation with the draft as assistant (output equals the target's greedy), kept as
the reference. sd-verify: the project's own, on the verifier SpecGuard's fallback uses
(`models/verify.py`): three draft tokens per target forward, exact on the row-invariant formats.
llamacpp-target: llama.cpp's plain target on the same GGUF (`llamacpp_target.py`).
rsd: step-level reward-guided decoding with the target as a one-prefill judge (rsd.py).
specguard*: the graph with the paper's settings or an ablation. A SpecGuard method name may
carry config overrides after "@", joined by "+": `specguard-greedy@tau=0.55+max_step_tokens=96`
(how `bench --taus` names the points of a τ sweep).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import torch

from ..config import SpecGuardConfig
from ..context import RunContext
from ..errors import ConfigError
from ..graph import build_graph
from ..models.local.hf import LocalCausalLM
from ..steps import NEVER, ProgramSteps, ReasoningSteps, StepSpec

Solve = Callable[[str], dict[str, Any]]
SPEC = ReasoningSteps()

ABLATIONS: dict[str, dict[str, Any]] = {
    "specguard": {},
    "specguard-greedy": {"k": 1, "temperature": 0.0},
    "specguard-adaptive": {"adaptive_band": 0.15},
    "specguard-logprob-only": {"beta": 1.0},
    "specguard-grounding-only": {"beta": 0.0},
    "specguard-all-layers": {"grounding_layers": 256},
    "specguard-no-sparsify": {"sparsify": 0.0},
    "specguard-signal-target": {"signal_model": "target"},
    "specguard-refuse-fabricated": {"reject_fabricated_output": True},
    "specguard-refuse-false-arithmetic": {"reject_false_arithmetic": True},
    # program steps (`ProgramSteps`): code the model writes is run, its real output follows
    # every message or step verified by the target: the target's own text (agents' lossless mode)
    "specguard-lossless": {"k": 1, "temperature": 0.0, "tau": 1.01, "fallback": "verify"},
    "specguard-program": {},
    "specguard-greedy-program": {"k": 1, "temperature": 0.0},
    # one model alone, greedy, step by step with program execution (its own steps accepted)
    "target-program": {"k": 1, "temperature": 0.0, "tau": 0.0},
    "draft-program": {"k": 1, "temperature": 0.0, "tau": 0.0},
}
PLAIN = ("target", "draft", "target-lookup", "sd", "sd-verify", "rsd", "llamacpp-target")
METHODS = (*PLAIN, *ABLATIONS)


def parse(name: str) -> tuple[str, dict[str, Any]]:
    """Split "specguard@tau=0.5+k=2" into ("specguard", {"tau": 0.5, "k": 2})."""
    base, at, params = name.partition("@")
    if base not in METHODS:
        raise ConfigError(f"unknown method {base!r}; known: {', '.join(METHODS)}")
    if not at:
        return base, {}
    if base not in ABLATIONS:
        raise ConfigError(f"{name!r}: only SpecGuard methods take @overrides")
    overrides: dict[str, Any] = {}
    for item in params.split("+"):
        key, eq, value = item.partition("=")
        if not (key and eq and value):
            raise ConfigError(f"{name!r}: expected METHOD@field=value[+field=value]")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    SpecGuardConfig().replace(**ABLATIONS[base], **overrides)  # unknown field / bad value
    return base, overrides


def with_tau(name: str, tau: float) -> str:
    """The name of `name`'s point at τ in a sweep (plain methods have no τ)."""
    base, _ = parse(name)
    if base not in ABLATIONS:
        return name
    return f"{name}{'+' if '@' in name else '@'}tau={tau:g}"


def plain(lm: LocalCausalLM, max_tokens: int, spec: StepSpec = SPEC, lookup: bool = False) -> Solve:
    """`lm` alone, greedy; `lookup`: the same tokens through prompt-lookup proposals."""
    from ..models.local import lookup as lk

    if lookup:
        lk.require_exact(lm, "target-lookup")

    def solve(question: str) -> dict[str, Any]:
        pc = lm.new_prefix(spec.render_prompt(question, lm.tokenizer))
        t0 = time.perf_counter()
        cand, forwards = lk.greedy_candidate(lm, pc, max_new_tokens=max_tokens, lookup=lookup)
        return {"text": cand.text, "answer": spec.extract_answer(cand.text),
                "latency_s": time.perf_counter() - t0, "tokens": cand.n_tokens,
                **({"forwards": forwards} if lookup else {})}  # fmt: skip

    return solve


def assisted(target: LocalCausalLM, draft: LocalCausalLM, max_tokens: int,
             spec: StepSpec = SPEC) -> Solve:  # fmt: skip
    def solve(question: str) -> dict[str, Any]:
        ids = target.encode(spec.render_prompt(question, target.tokenizer))
        x = torch.tensor([ids], device=target.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = target.model.generate(
                input_ids=x, attention_mask=torch.ones_like(x), assistant_model=draft.model,
                do_sample=False, max_new_tokens=max_tokens, pad_token_id=target.pad_id,
                eos_token_id=target.eos_ids,
            )  # fmt: skip
        gen = out[0, len(ids) :].tolist()
        text = target.decode(gen)
        return {
            "text": text,
            "answer": spec.extract_answer(text),
            "latency_s": time.perf_counter() - t0,
            "tokens": len(gen),
        }

    return solve


def verified_sd(target: LocalCausalLM, draft: LocalCausalLM, max_tokens: int, spec: StepSpec = SPEC,
                k: int | None = None, lookup: int | None = None,
                more_if: float | None = None) -> Solve:  # fmt: skip
    """`k`: proposals per target forward, `lookup`: looked-up tokens after them, `more_if`: the
    draft's confidence to go on proposing (None: the engine's choice, `verify.proposals`,
    `verify.lookup_tokens`, `verify.MORE_IF`)."""
    from ..models.base import shared_vocab
    from ..models.local.verify import verify_greedy

    if not (isinstance(target, LocalCausalLM) and isinstance(draft, LocalCausalLM)):
        raise ConfigError("sd-verify needs local draft and target models")
    if not shared_vocab(draft, target):
        raise ConfigError("sd-verify needs a draft with the target's vocabulary")

    def solve(question: str) -> dict[str, Any]:
        pcs = [m.new_prefix(spec.render_prompt(question, m.tokenizer)) for m in (target, draft)]
        t0 = time.perf_counter()
        s, stats = verify_greedy(target, pcs[0], candidate=[], delimiter=NEVER, draft=draft,
                                 max_new_tokens=max_tokens, draft_pc=pcs[1], k=k,
                                 lookup=lookup, more_if=more_if)  # fmt: skip
        text = s.candidates[0].text
        return {"text": text, "answer": spec.extract_answer(text),
                "latency_s": time.perf_counter() - t0, "tokens": s.candidates[0].n_tokens,
                "verified": stats.as_dict()}  # fmt: skip

    return solve


# what a bench record keeps of each step: enough to label steps and study the signals offline
STEP_RECORD = ("index", "text", "source", "accepted", "cut", "ended", "grounding", "logprob",
               "score", "reason", "tokens", "time_s", "spent", "fed", "selected", "draft_text",
               "candidate_signals", "observation", "dropped", "checked", "fallback",
               "verified")  # fmt: skip
_GRAPHS: dict[tuple[int, int, int, str], Any] = {}  # one compiled graph per build-time config


def specguard(draft, target, embedder, config: SpecGuardConfig, steps=SPEC) -> Solve:
    """Methods that differ only in per-run settings (τ, k, β, temperature, limits) share one
    compiled graph and pass their settings as the run's context."""
    per_run = set(RunContext.model_fields)
    key = (id(draft), id(target), id(embedder),
           steps.name + config.model_dump_json(exclude=per_run))  # fmt: skip
    if key not in _GRAPHS:
        _GRAPHS[key] = build_graph(draft, target, embedder=embedder, steps=steps,
                                   config=config).compile()  # fmt: skip
    graph = _GRAPHS[key]
    context = {name: getattr(config, name) for name in per_run}

    def solve(question: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        out = graph.invoke({"question": question}, context=context)
        steps = out["steps"]
        return {
            "text": out["text"], "answer": out["answer"], "status": out["status"],
            "latency_s": time.perf_counter() - t0,
            "steps": len(steps),
            "target_steps": sum(s["source"] == "target" for s in steps),
            "tool_steps": sum(s["source"] == "tool" for s in steps),
            "draft_tokens": out["counts"].get("draft_tokens", 0),
            "target_tokens": out["counts"].get("target_tokens", 0),
            "verify_s": out["timing"].get("verify_s", 0.0),
            "scores": [s["score"] for s in steps],
            "step_records": [{k: s.get(k) for k in STEP_RECORD} for s in steps],
        }  # fmt: skip

    return solve


def make(name: str, draft, target, embedder, base: SpecGuardConfig, max_tokens: int,
         sd_target: Any = None, steps: StepSpec | None = None) -> Solve:  # fmt: skip
    """`sd_target`: a served target that runs its engine's own draft-model speculative
    decoding (llama.cpp with a draft GGUF, vLLM's speculative_config); `sd` then measures it.
    `steps`: a spec of its own for every method (`ChatSteps` for BFCL: one message, one step)."""
    spec = steps or SPEC
    if name == "target":
        return plain(target, max_tokens, spec)
    if name == "draft":
        return plain(draft, max_tokens, spec)
    if name == "target-lookup":
        return plain(target, max_tokens, spec, lookup=True)
    if name == "llamacpp-target":  # llama.cpp's plain target on the same GGUF
        from .llamacpp_target import served

        return plain(served("target"), max_tokens, spec)
    if name == "sd":
        if sd_target is not None:
            return plain(sd_target, max_tokens, spec)
        if not (isinstance(target, LocalCausalLM) and isinstance(draft, LocalCausalLM)):
            raise ConfigError(
                "sd on served models is the engine's own speculative decoding: pass --sd-target "
                "URL (e.g. `specguard models serve target --speculative`)"
            )
        return assisted(target, draft, max_tokens, spec)
    if name == "sd-verify":
        return verified_sd(target, draft, max_tokens, spec)
    if steps is not None and name not in ABLATIONS and "@" not in name:
        raise ConfigError(f"{name} does not run {steps.name} steps")
    if name == "rsd":
        from .rsd import rsd

        if not getattr(target, "can_score", False):
            raise ConfigError("rsd needs a target that scores text (a local model), not a server")

        return rsd(draft, target, max_step_tokens=base.max_step_tokens, max_tokens=max_tokens)
    method, overrides = parse(name)  # raises for an unknown name
    changes = {"max_total_tokens": max_tokens, **ABLATIONS[method], **overrides}
    if steps is not None:  # one message per run: the step is the whole answer
        changes = {"max_steps": 1, "max_step_tokens": max_tokens, **changes}
    config = base.replace(**changes)
    if steps is not None:
        if method.endswith("-program"):
            raise ConfigError(f"{name} runs program steps, not {steps.name} steps")
        return specguard(draft, target, embedder, config, steps)
    if not method.endswith("-program"):
        return specguard(draft, target, embedder, config)
    alone = {"target-program": target, "draft-program": draft}.get(method)
    if alone is not None:  # the one model drafts and "verifies" itself: every step its own
        return specguard(alone, alone, None, config, ProgramSteps())
    return specguard(draft, target, embedder, config, ProgramSteps())
