"""Each step as a message in LangGraph's `messages` stream, the one Studio and chat UIs read.

Why callbacks: that stream is built from chat-model callbacks (`StreamMessagesHandler`), and the
graph's models are not LangChain chat models. So a step opens a chat-model run on the node's
own callback manager and reports its text there: a target-written step token by token as it
is final (the deltas of `target_text`), an accepted draft step whole, at once. The run is named
after the writer (`specguard-target`, `specguard-draft`) and carries the step's index in its
metadata. Inside `SpecGuardChatModel` (`quiet`) nothing is sent: that model streams the
message itself, and its graph's steps would be a second copy.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.callbacks import CallbackManager
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult
from langgraph.config import get_config

_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("step_messages_quiet", default=False)


@contextmanager
def quiet() -> Iterator[None]:
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def _run(step: int, source: str) -> Any:
    """A chat-model run on the calling node's callbacks, or None outside a streaming graph."""
    if _QUIET.get():
        return None
    try:
        config = get_config()
    except RuntimeError:  # not inside a graph run
        return None
    manager = CallbackManager.configure(
        inheritable_callbacks=config.get("callbacks"),
        inheritable_tags=config.get("tags"),
        inheritable_metadata={**(config.get("metadata") or {}), "specguard_step": step},
    )
    if not manager.handlers:
        return None
    name = f"specguard-{source}"
    (run,) = manager.on_chat_model_start({"name": name}, [[HumanMessage(f"step {step}")]],
                                         name=name)  # fmt: skip
    return run


@contextmanager
def step_message(step: int, source: str) -> Iterator[Callable[[str], None]]:
    """Yields `send(text_so_far)`; each call streams what is new as a chunk, and the end sends
    the whole message (a step with no chunks arrives in one piece)."""
    run = _run(step, source)
    sent = [""]
    mid = f"specguard-step-{uuid.uuid4()}"

    def send(text: str) -> None:
        if run is None or not text.startswith(sent[0]) or text == sent[0]:
            return
        delta, sent[0] = text[len(sent[0]) :], text
        chunk = AIMessageChunk(content=delta, id=mid)
        run.on_llm_new_token(delta, chunk=ChatGenerationChunk(message=chunk))

    try:
        yield send
    finally:
        if run is not None:
            message = AIMessage(content=sent[0], id=mid)
            run.on_llm_end(LLMResult(generations=[[ChatGeneration(message=message)]]))


def whole_step(step: int, source: str, text: str) -> None:
    """An accepted step: one message, at once."""
    with step_message(step, source) as send:
        send(text)
