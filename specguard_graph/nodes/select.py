"""select_consistent: keep the medoid of the k candidates in sentence-embedding space, or, for
steps with an exact form (`vote_key`: tool calls), the majority of the k candidates."""

from __future__ import annotations

from ..errors import ConfigError
from ..scoring import consistency, medoid
from ..state import SpecGuardState
from .common import Deps, Update, emit, step_index, timed


@timed("verify_s")
def select_consistent(state: SpecGuardState, *, deps: Deps) -> Update:
    texts = [c["text"] for c in state["candidates"]]
    votes = exact_votes(deps, state["question"], texts) if len(texts) > 1 else [1.0]
    if votes is None:
        if deps.embedder is None:
            raise ConfigError("k > 1 needs an embedder for the consistency vote (or set k=1)")
        votes = consistency(deps.embedder.embed(texts)).tolist()
    selected = medoid(votes)
    emit("select", step=step_index(state), selected=selected, text=texts[selected])
    return {"selected": selected, "votes": votes}


def exact_votes(deps: Deps, question: str, texts: list[str]) -> list[float] | None:
    """Each candidate's share of the k that say exactly what it says; None where the spec has
    no exact form, or where every candidate is distinct free text (embeddings decide then)."""
    key = getattr(deps.spec, "vote_key", None)
    if key is None:
        return None
    keys = [key(question, t) for t in texts]
    if len(set(keys)) == len(keys) and deps.embedder is not None:
        if all(k.startswith("text:") for k in keys):
            return None
    return [keys.count(k) / len(keys) for k in keys]
