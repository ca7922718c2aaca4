"""target_recompute: the target writes the whole step from the same accepted prefix."""

from __future__ import annotations

import time
from typing import Any

from ..runtime import step_separator
from ..state import SpecGuardState, add_numbers
from .common import Deps, finish_step, remaining_tokens, step_index


class TargetNode:
    def __init__(self, deps: Deps):
        self.deps = deps

    def __call__(self, state: SpecGuardState) -> dict[str, Any]:
        t0 = time.perf_counter()
        deps, cfg = self.deps, self.deps.config
        session = deps.sessions.get(state)
        index = step_index(state)
        sample = deps.target.sample(
            session.target,
            n=1,
            delimiter=deps.spec.delimiter,
            max_new_tokens=min(cfg.max_step_tokens, remaining_tokens(state, cfg)),
            temperature=0.0,
            seed=cfg.seed + index,
            fork=False,
        )
        cand = sample.candidates[0]
        deps.target.adopt(session.target, sample, 0)
        if deps.shared_vocab:
            session.draft.extend(cand.token_ids)
        else:
            deps.draft.append_text(session.draft, cand.text + step_separator(deps.spec, cand.ended))
        elapsed = time.perf_counter() - t0
        update = finish_step(
            deps, state, session, text=cand.text, source="target", accepted=False,
            ended=cand.ended, tokens=len(cand.token_ids), decision=state.get("decision") or {},
        )  # fmt: skip
        update["timing"] = add_numbers(update.get("timing"), {"target_s": elapsed})
        update["counts"] = add_numbers(update["counts"], {"target_tokens": len(cand.token_ids)})
        return update
