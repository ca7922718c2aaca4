"""`specguard serve`: chat models (SpecGuard's, or one model alone) behind OpenAI's chat API.

Why: other agent frameworks, the OpenAI SDK and LiteLLM speak that API, not LangChain's. The
server is Starlette on uvicorn, with server-sent events for `stream: true` (`sse-starlette`).

* `/v1/models` lists the served models; `/v1/chat/completions` takes `messages`, `tools`,
  `tool_choice` and `stream` (`schema.py` reads and writes the format). The model's own
  metadata (who wrote the message, its score, what the target checked) is in the response's
  `specguard` field (non-standard; clients ignore it).
* Requests queue: every model call runs on one engine thread of the server's, one at a time,
  so concurrent answers equal the ones the same requests get alone, and the process keeps one
  OpenMP team (on a second thread torch would start another, and libgomp then throttles every
  forward: docs/numerics.md, "One OpenMP team"). The event loop only moves bytes.
* A client that disconnects mid-stream stops its generation at the next token (the stream's
  reader is gone, `agents/stream.py`) and frees the model for the next request.
* Bad input is a 400 naming the field (`schema.RequestError`), and a prompt over the model's
  limit is refused before any model work. Binds to 127.0.0.1 unless told otherwise; an API key,
  if set, is required as `Authorization: Bearer <key>`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import SpecGuardError
from . import schema
from .schema import RequestError

Count = Callable[[list[BaseMessage], Sequence[dict[str, Any]], "str | None"], int]


@dataclass
class Served:
    """One model behind the server: the chat model, how it counts a prompt's tokens, its limit."""

    model: BaseChatModel
    count: Count | None = None
    max_prompt_tokens: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while the model works


def prompt_counter(model: Any) -> Count | None:
    """How many tokens the writer's prompt for a turn takes (ToolChatModel's own template)."""
    writer = getattr(model, "target", None) or getattr(model, "lm", None)
    if writer is None or not hasattr(model, "question"):
        return None
    from ..agents.chat_model import SPEC

    def count(messages: list[BaseMessage], tools: Sequence[dict[str, Any]],
              choice: str | None) -> int:  # fmt: skip
        prompt = SPEC.render_prompt(model.question(messages, tools, choice), writer.tokenizer)
        return len(writer.encode(prompt))

    return count


def _error(status: int, message: str, param: str | None = None, kind: str = "") -> JSONResponse:
    body = RequestError(message, param).body()
    if kind:
        body["error"]["type"] = kind
    return JSONResponse(body, status_code=status)


def build_app(models: dict[str, Served], *, api_key: str | None = None) -> Starlette:
    """The server's app: `models` by the name clients ask for."""
    if not models:
        raise ValueError("build_app needs at least one model")
    engine = ThreadPoolExecutor(1, thread_name_prefix="specguard-engine")

    def authorised(request: Request) -> bool:
        return api_key is None or request.headers.get("authorization") == f"Bearer {api_key}"

    async def list_models(request: Request) -> Response:
        if not authorised(request):
            return _error(401, "a valid API key is required", kind="authentication_error")
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "specguard"}
                for name in models]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    async def completions(request: Request) -> Response:
        if not authorised(request):
            return _error(401, "a valid API key is required", kind="authentication_error")
        try:
            req = schema.read_request(await request.body())
            served = models.get(req.model)
            if served is None:
                raise RequestError(f"unknown model {req.model!r}; served: {', '.join(models)}",
                                   "model")  # fmt: skip
            messages, tools = schema.to_messages(req), schema.tool_dicts(req)
            choice = schema.tool_choice(req)
            if served.count is not None and served.max_prompt_tokens is not None:
                n = await run_in_threadpool(served.count, messages, tools, choice)
                if n > served.max_prompt_tokens:
                    raise RequestError(f"the prompt takes {n} tokens; this model takes at most "
                                       f"{served.max_prompt_tokens}", "messages")  # fmt: skip
            bound = served.model.bind_tools(tools, tool_choice=choice) if tools else served.model
        except RequestError as exc:
            return JSONResponse(exc.body(), status_code=400)
        except SpecGuardError as exc:  # the model refuses the turn (its own checks)
            return _error(400, str(exc))
        reply = schema.Reply(req.model)
        if req.stream:
            return EventSourceResponse(_events(engine, served, bound, messages, reply), ping=15)

        def answer() -> Any:
            with served.lock:
                return bound.invoke(messages)

        try:
            message = await asyncio.get_running_loop().run_in_executor(engine, answer)
        except SpecGuardError as exc:
            return _error(400, str(exc))
        return JSONResponse(reply.completion(message))

    routes = [Route("/v1/models", list_models, methods=["GET"]),
              Route("/v1/chat/completions", completions, methods=["POST"])]  # fmt: skip
    return Starlette(routes=routes)


async def _events(engine: ThreadPoolExecutor, served: Served, bound: Any,
                  messages: list[BaseMessage],
                  reply: schema.Reply) -> AsyncIterator[dict[str, str]]:  # fmt: skip
    """The message's chunks as SSE events, from the engine thread; when the client goes, the
    engine closes the model's stream, which unwinds the generation (`agents/stream.py`)."""
    loop = asyncio.get_running_loop()
    got: asyncio.Queue[Any] = asyncio.Queue()
    gone = threading.Event()

    def work() -> None:
        try:
            with served.lock:
                if gone.is_set():
                    return
                stream = bound.stream(messages)
                try:
                    for piece in stream:
                        if gone.is_set():
                            break
                        loop.call_soon_threadsafe(got.put_nowait, piece)
                finally:
                    stream.close()
        except Exception as exc:
            loop.call_soon_threadsafe(got.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(got.put_nowait, None)

    engine.submit(work)
    first = True
    try:
        while (piece := await got.get()) is not None:
            if isinstance(piece, Exception):
                err = {"error": {"message": str(piece), "type": "server_error"}}
                yield {"data": json.dumps(err)}
                break
            yield {"data": json.dumps(reply.chunk(piece, first))}
            first = False
        else:
            yield {"data": "[DONE]"}
    finally:
        gone.set()
