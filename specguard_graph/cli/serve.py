"""`specguard serve`: the SpecGuard chat model (and the target alone) behind OpenAI's chat API."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import SpecGuardError
from .common import DraftPath, Quantize, QuantizeOpt, TargetPath, err, fail, load_models


def serve(
    host: Annotated[str, typer.Option(help="address to bind (0.0.0.0 exposes it)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="port")] = 8000,
    api_key: Annotated[
        str | None, typer.Option(envvar="SPECGUARD_API_KEY", help="require this bearer key")
    ] = None,
    lossless: Annotated[
        bool, typer.Option(help="the target verifies every message (its own trajectory)")
    ] = False,
    tau: Annotated[
        float | None, typer.Option(help="accept threshold (not with --lossless)")
    ] = None,
    max_tokens: Annotated[int, typer.Option(min=1, help="token budget per message")] = 256,
    draft: DraftPath = None,
    target: TargetPath = None,
    quantize: QuantizeOpt = Quantize.auto,
) -> None:
    """Serve the SpecGuard chat model as `specguard`, and the target alone as `target`, at
    /v1/chat/completions (OpenAI's format, `stream: true` as server-sent events)."""
    try:
        import uvicorn

        from ..agents.chat_model import SpecGuardChatModel, chat_config
        from ..agents.plain import PlainChatModel
        from ..serve import Served, build_app, prompt_counter

        d, t, _ = load_models((draft, target, None), quantize=quantize, need_embedder=False)
        changes = {"max_step_tokens": max_tokens, "max_total_tokens": max_tokens}
        if tau is not None:
            changes["tau"] = tau
        config = chat_config(lossless=lossless, **changes)
        specguard = SpecGuardChatModel(draft=d, target=t, config=config)
        plain = PlainChatModel(lm=t, max_tokens=max_tokens)
        limit = getattr(t, "context_window", None)
        limit = None if limit is None else limit - max_tokens
        app = build_app({name: Served(m, prompt_counter(m), limit)
                         for name, m in (("specguard", specguard), ("target", plain))},
                        api_key=api_key)  # fmt: skip
    except SpecGuardError as exc:
        raise fail(str(exc)) from None
    err.print(f"serving specguard and target at http://{host}:{port}/v1", markup=False)
    uvicorn.run(app, host=host, port=port, log_level="warning")
