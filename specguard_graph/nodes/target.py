"""target_recompute: the target writes the whole step from the same accepted prefix."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from ..context import RunContext
from ..state import SpecGuardState, add_numbers
from ..steps import separator
from .commit import finish_step
from .common import Deps, Update, remaining_tokens, step_index, token_texts
from .program import kept_tokens, trim_step


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
    text, ended, dropped, tokens = cand.text, cand.ended, None, cand.n_tokens
    cut = trim_step(deps, state, cand.text)
    if cut is not None:  # ProgramSteps: its own output after the program is dropped
        session.target.ids = session.target.ids[: len(session.target.ids) - len(cand.token_ids)]
        text, ended, dropped = cut, "delimiter", cand.text[len(cut) :]
        tokens = kept_tokens(cut, token_texts(cand, deps.target), deps.target)
        deps.target.append_text(session.target, text + deps.spec.delimiter)
    if deps.shared_vocab and cut is None:
        session.draft.extend(cand.token_ids)
    else:
        deps.draft.append_text(session.draft, text + separator(deps.spec.delimiter, ended))
    elapsed = time.perf_counter() - t0
    session.spent["target_s"] = elapsed
    update = finish_step(deps, runtime, state, session, text=text, source="target", ended=ended,
                         tokens=tokens, dropped=dropped)  # fmt: skip
    update["timing"] = add_numbers(update.get("timing"), {"target_s": elapsed})
    update["counts"] = add_numbers(update["counts"], {"target_tokens": cand.n_tokens})
    return update
