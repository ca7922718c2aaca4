"""The chat template a server publishes, rendered here so that a served model's prompts match
the local model's (llama.cpp's /props; vLLM and SGLang publish none on a completions route, so
pass `tokenizer=` there)."""

from __future__ import annotations

from typing import Any

from ...errors import InputError
from ..tool_template import fixed


class ServerTemplate:
    """The chat template a server publishes (llama.cpp's /props), rendered with jinja2 the way
    transformers renders one, so prompts match the local model's."""

    def __init__(self, template: str, bos: str = "", eos: str = ""):
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        env.filters["tojson"] = _tojson  # transformers' own: no HTML escaping, keys in order
        self.chat_template = template = fixed(template)  # as the local models' (tool_template)
        self._template: jinja2.Template = env.from_string(template)
        self.bos_token, self.eos_token = bos, eos

    def apply_chat_template(self, messages: list[dict[str, str]], *, tokenize: bool = False,
                            add_generation_prompt: bool = True, **kw: Any) -> str:  # fmt: skip
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token, eos_token=self.eos_token, tools=kw.get("tools"),
        )  # fmt: skip


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:  # fmt: skip
    import json

    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)  # fmt: skip


def _raise(message: str) -> None:
    raise InputError(f"chat template: {message}")


class EngineTemplate:
    """A server that renders its own chat template (vLLM's `/tokenize` with `messages`, then
    `/detokenize`): the prompt is the engine's own rendering, tools included, two requests
    per prompt (a run renders one)."""

    chat_template = "engine"  # rendered by the server: there is one

    def __init__(self, root: str, model: str, timeout: float = 30.0):
        self.root, self.model, self.timeout = root, model, timeout

    def apply_chat_template(self, messages: list[dict[str, Any]], *, tokenize: bool = False,
                            add_generation_prompt: bool = True, **kw: Any) -> str:  # fmt: skip
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": messages,
                                "add_generation_prompt": add_generation_prompt}  # fmt: skip
        if kw.get("tools"):
            body["tools"] = kw["tools"]
        try:
            ids = self._post(httpx, "/tokenize", body)["tokens"]
            return str(self._post(httpx, "/detokenize", {"model": self.model, "tokens": ids})
                       ["prompt"])  # fmt: skip
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise InputError(f"{self.root}: cannot render the chat template: {exc}") from None

    def _post(self, httpx: Any, route: str, body: dict[str, Any]) -> Any:
        r = httpx.post(self.root + route, json=body, timeout=self.timeout)
        r.raise_for_status()
        return r.json()


def server_template(base_url: str, model: str | None = None, timeout: float = 10.0
                    ) -> ServerTemplate | EngineTemplate | None:  # fmt: skip
    """The chat template a server publishes (llama.cpp's /props), else one it renders itself
    (vLLM's /tokenize), else None: pass `tokenizer=` then (SGLang)."""
    import httpx

    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        props = httpx.get(root + "/props", timeout=timeout)
        data = props.json() if props.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return None
    template = data.get("chat_template") if isinstance(data, dict) else None
    if template:
        return ServerTemplate(template, data.get("bos_token") or "", data.get("eos_token") or "")
    if model is None:
        return None
    probe = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    try:
        ok = httpx.post(root + "/tokenize", json=probe, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return None
    return EngineTemplate(root, model) if ok else None
