"""SpecGuard as a LangChain chat model: any LangGraph agent (`create_agent`,
`create_react_agent`, a hand-built `ToolNode` loop) uses it unchanged.

One assistant message is one step of the graph (`ChatSteps`): the draft writes it (k
candidates, an exact vote over their calls), its calls are checked against the tools' JSON
schemas, and the graph's score decides; a message that fails the check or scores below τ is
written by the target. `response_metadata` says who wrote it and why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from ..config import SpecGuardConfig
from ..context import RunContext
from ..errors import ConfigError
from ..models import tokens
from ..nodes.messages import quiet
from .calls import CallFormat
from .messages import finish_reason, to_ai_message, to_template
from .spec import ChatSteps, chat_question, forced_prefix
from .stream import MessageStream, stream_message

SPEC = ChatSteps()
# one message per run, greedy, no vote: the cheapest setting that is still SpecGuard
CHAT_DEFAULTS = {"k": 1, "temperature": 0.0, "max_steps": 1, "max_step_tokens": 256,
                 "max_total_tokens": 256}  # fmt: skip


# a model that has the tool results it needs should answer, not call again: without this the
# embedded target called multiply(17, 23) three times, then returned an empty message
AGENT_SYSTEM = (
    "You are a helpful assistant. Call a tool only when you need its result. Once the tool "
    "results answer the user's request, reply to the user in plain text and do not call the "
    "same tool again."
)
LOSSLESS = {"tau": 1.01, "fallback": "verify"}  # no score reaches τ > 1: the target verifies all


def chat_config(*, lossless: bool = False, **changes: Any) -> SpecGuardConfig:
    """SpecGuardConfig for chat messages: CHAT_DEFAULTS, then `changes`.

    `lossless=True`: every drafted message is verified by the target (the verify fallback at
    message level), so the agent's trajectory is the one the target alone would write."""
    if lossless:
        clash = {k: v for k, v in changes.items() if k in LOSSLESS and v != LOSSLESS[k]}
        if clash:
            raise ConfigError(f"lossless=True sets {LOSSLESS}; it cannot take {clash}")
        changes = {**changes, **LOSSLESS}
    return SpecGuardConfig().replace(**{**CHAT_DEFAULTS, **changes})


def tool_choice_name(tool_choice: Any, tools: Sequence[dict[str, Any]]) -> str | None:
    """LangChain's spellings of a tool choice -> None, "none", "required" or a tool's name."""
    if tool_choice in (None, "auto", False):
        return None
    if tool_choice in ("any", "required", True):
        return "required" if tool_choice is not True or len(tools) != 1 else _names(tools)[0]
    if tool_choice == "none":
        return "none"
    if isinstance(tool_choice, dict):
        tool_choice = (tool_choice.get("function") or tool_choice).get("name")
    if isinstance(tool_choice, str) and tool_choice in _names(tools):
        return tool_choice
    raise ConfigError(f"tool_choice {tool_choice!r} names no bound tool; tools: {_names(tools)}")


def _names(tools: Sequence[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools]


class ToolChatModel(BaseChatModel):
    """What SpecGuard's chat model and the one-model baseline (`plain.py`) share: tools bound
    as OpenAI dicts, how calls are written, the default system prompt, and the graph's question
    for a turn built from them.

    `calls`: how models write calls, "json" (native tool template) or "python" (BFCL prompting).
    `system_prompt`: put first when a conversation with tools has no system message of its own
    (`AGENT_SYSTEM`; None leaves the model's template default)."""

    calls: CallFormat = "json"
    system_prompt: str | None = AGENT_SYSTEM
    model_config = ConfigDict(arbitrary_types_allowed=True)

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, BaseMessage]:  # fmt: skip
        """Tools as LangChain accepts them: `@tool`s, functions, pydantic classes, OpenAI dicts."""
        formatted = [convert_to_openai_tool(t) for t in tools]
        choice = tool_choice_name(tool_choice, formatted)
        return super().bind(tools=formatted, tool_choice=choice, **kwargs)

    def question(self, messages: list[BaseMessage], tools: Sequence[dict[str, Any]],
                 tool_choice: str | None) -> str:  # fmt: skip
        """The turn as `ChatSteps` reads it (`chat_question`)."""
        template = with_system(to_template(messages), self.system_prompt, tools)
        return chat_question(template, tools, tool_choice, self.calls)

    # whose tokens a stream shows, and whether every token it keeps is the message's (the
    # one-model chat model) or only where a graph node says so (SpecGuard's target)
    def stream_writer(self) -> Any:
        raise NotImplementedError

    all_final: ClassVar[bool] = False

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        *,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """`_generate`'s message as its text becomes final (`agents/stream.py`)."""
        self.question(messages, tools, tool_choice)  # a bad turn fails before anything runs
        writer = self.stream_writer()
        decode = getattr(writer, "decode", None) or (lambda ids: "")
        stream = MessageStream(decode, forced_prefix(tool_choice, self.calls), self.calls)

        def generate() -> ChatResult:
            with tokens.final() if self.all_final else contextlib.nullcontext():
                return self._generate(messages, stop, tools=tools, tool_choice=tool_choice,
                                      **kwargs)  # fmt: skip

        yield from stream_message(generate, stream, run_manager)


class SpecGuardChatModel(ToolChatModel):
    """A chat model whose messages the draft writes and the target checks (see module doc).

    `draft` / `target`: step models (`load_lm(...)`, a served URL's model, `CallableStepModel`)
    or any LangChain chat model (a draft one needs token log-probs, e.g. `logprobs=True`).
    `config`: the graph's settings (`chat_config(tau=..., k=4, temperature=0.7)`).
    `calls`, `system_prompt`: `ToolChatModel`'s.
    """

    draft: Any
    target: Any
    embedder: Any = None
    config: SpecGuardConfig = Field(default_factory=chat_config)
    _graph: Any = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "specguard"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"draft": getattr(self.draft, "name", None),
                "target": getattr(self.target, "name", None), "tau": self.config.tau}  # fmt: skip

    def graph(self) -> Any:
        """The compiled SpecGuard graph this model runs (built once, on first use)."""
        if self._graph is None:
            from ..graph import build_graph
            from .chat_writer import ChatModelWriter

            for role in ("draft", "target"):  # a LangChain chat model writes through its API
                if isinstance(getattr(self, role), BaseChatModel):
                    setattr(self, role, ChatModelWriter(getattr(self, role)))
            self._graph = build_graph(self.draft, self.target, embedder=self.embedder,
                                      steps=SPEC, config=self.config).compile()  # fmt: skip
        return self._graph

    def stream_writer(self) -> Any:
        """The target: its tokens stream as it rewrites or verifies a message (marked final in
        `target_recompute`); an accepted draft message arrives whole, once accepted."""
        self.graph()  # the target a LangChain chat model names is wrapped first
        return self.target

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        *,
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: str | None = None,
        context: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if stop:
            raise ConfigError("SpecGuardChatModel does not take stop sequences: a message ends "
                              "at the model's end of turn")  # fmt: skip
        if kwargs:
            raise ConfigError(f"unknown argument(s) for SpecGuardChatModel: {', '.join(kwargs)}")
        question = self.question(messages, tools, tool_choice)
        with quiet():  # this model streams the message itself (nodes/messages.py)
            out = self.graph().invoke({"question": question}, context=check_context(context))
        step = out["steps"][-1]
        parsed = SPEC.parse(question, step["text"])
        writer = self.draft if step["source"] == "draft" else self.target
        n_in = len(writer.encode(SPEC.render_prompt(question, writer.tokenizer)))
        meta = {
            "model_name": f"specguard({getattr(self.draft, 'name', 'draft')}"
            f"->{getattr(self.target, 'name', 'target')})",
            "finish_reason": finish_reason(parsed, step.get("ended")),
            "source": step["source"], "accepted": step["accepted"], "score": step["score"],
            "grounding": step["grounding"], "logprob": step["logprob"],
            "reason": step.get("reason"), "checked": step.get("checked"),
            "candidates": len(step.get("candidates") or []),
            "draft_text": step.get("draft_text"), "time_s": step.get("time_s"),
            "fed": step.get("fed"), "timing": out.get("timing"), "spent": step.get("spent"),
        }  # fmt: skip
        usage = {"input_tokens": n_in, "output_tokens": step["tokens"],
                 "total_tokens": n_in + step["tokens"]}  # fmt: skip
        message = to_ai_message(parsed, response_metadata=meta, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


def with_system(messages: list[dict[str, Any]], system: str | None,
                tools: Sequence[Any]) -> list[dict[str, Any]]:  # fmt: skip
    """`system` first, where tools are bound and the conversation brings no system message."""
    if not system or not tools or (messages and messages[0].get("role") == "system"):
        return messages
    return [{"role": "system", "content": system}, *messages]


def check_context(context: dict[str, Any] | None) -> dict[str, Any]:
    """Per-call settings (τ, k, temperature, ...) are the graph's run context."""
    return RunContext(**(context or {})).model_dump(exclude_none=True)
