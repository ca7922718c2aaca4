"""target_recompute: the target writes the whole step from the same accepted prefix."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from ..context import RunContext
from ..state import SpecGuardState, add_numbers
from ..steps import separator
from .commit import finish_step
from .common import Deps, Update, remaining_tokens, step_index


def target_recompute(state: SpecGuardState, runtime: Runtime[RunContext], *, deps: Deps) -> Update:
    t0 = time.perf_counter()
    cfg = deps.run_config(runtime)
    session = deps.sessions.get(state)
    sample = deps.target.sample(
        session.target,
        n=1,
        delimiter=deps.spec.delimiter,
        max_new_tokens=min(cfg.max_step_tokens, remaining_tokens(state, cfg)),
        temperature=0.0,
        seed=cfg.seed + step_index(state),
        fork=False,
    )
    cand = sample.candidates[0]
    deps.target.adopt(session.target, sample, 0)
    if deps.shared_vocab:
        session.draft.extend(cand.token_ids)
    else:
        sep = separator(deps.spec.delimiter, cand.ended)
        deps.draft.append_text(session.draft, cand.text + sep)
    elapsed = time.perf_counter() - t0
    session.spent["target_s"] = elapsed
    update = finish_step(deps, runtime, state, session, text=cand.text, source="target",
                         ended=cand.ended, tokens=cand.n_tokens)  # fmt: skip
    update["timing"] = add_numbers(update.get("timing"), {"target_s": elapsed})
    update["counts"] = add_numbers(update["counts"], {"target_tokens": cand.n_tokens})
    return update
