"""select_consistent: keep the medoid of the k candidates in sentence-embedding space."""

from __future__ import annotations

from ..errors import ConfigError
from ..scoring import consistency, medoid
from ..state import SpecGuardState
from .common import Deps, Update, emit, step_index, timed


@timed("verify_s")
def select_consistent(state: SpecGuardState, *, deps: Deps) -> Update:
    texts = [c["text"] for c in state["candidates"]]
    if len(texts) == 1:
        votes = [1.0]
    else:
        if deps.embedder is None:
            raise ConfigError("k > 1 needs an embedder for the consistency vote (or set k=1)")
        votes = consistency(deps.embedder.embed(texts)).tolist()
    selected = medoid(votes)
    emit("select", step=step_index(state), selected=selected, text=texts[selected])
    return {"selected": selected, "votes": votes}
