"""SpecGuard as a tool-calling chat model: calls parsed and checked against their schemas,
the exact vote, routing to the target, and real LangGraph agents running on it unchanged."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import BaseModel, Field

from specguard_graph import CallableStepModel, SpecGuardChatModel, StepOutput, chat_config
from specguard_graph.agents.calls import check_calls, parse_calls
from specguard_graph.agents.spec import ChatSteps, chat_question
from specguard_graph.errors import ConfigError
from specguard_graph.testing import tiny_models, tiny_tokenizer


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


class Weather(BaseModel):
    """The weather in a city."""

    city: str = Field(description="the city")
    days: int = Field(1, description="how many days ahead")


TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}},
                   "required": ["a", "b"]}}}]  # fmt: skip


def call(name: str, **args: object) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


# -- parsing and checking --------------------------------------------------------------------


def test_native_calls_parse_bare_fenced_and_broken():
    two = parse_calls(call("add", a=1, b=2) + "\n" + call("multiply", a=3, b=4))
    assert [c["name"] for c in two.calls] == ["add", "multiply"] and not two.invalid
    bare = parse_calls('```json\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```')
    assert bare.calls == [{"name": "add", "arguments": {"a": 1, "b": 2}}]
    broken = parse_calls('<tool_call>\n{"name": "add", "arguments": {"a": 1,}\n</tool_call>')
    assert not broken.calls and broken.invalid
    text = parse_calls("The answer is 3.")
    assert text.content == "The answer is 3." and not text.calls and not text.invalid


@pytest.mark.parametrize(
    "text, calls, invalid, content",
    [
        ('{"name": "mkdir", "arguments": {"dir_name": "a"}}\n{"response": "None"}',
         [("mkdir", {"dir_name": "a"})], [], '{"response": "None"}'),  # a call, a made-up answer
        ('[{"name": "add", "arguments": {"a": 1}}, {"name": "add", "arguments": {"a": 2}}] ok',
         [("add", {"a": 1}), ("add", {"a": 2})], [], "ok"),
        ('```json\n{"name": "add", "arguments": {"a": 1}}\n```\nDone.',
         [("add", {"a": 1})], [], "Done."),
        ('{"name": "add", "arguments": {"a": 1}}\n{"name": "add", "arguments": "x"}\nthen',
         [("add", {"a": 1})], ["add"], "then"),  # a named object that is no call: invalid
        ('{"name": "add", "arguments": {"a": 1}} and ' + call("multiply", a=2, b=3),
         [("add", {"a": 1}), ("multiply", {"a": 2, "b": 3})], [], "and"),
        ('{"name": "add", "arguments": {"a": 1, "b": ', [], ["add"], ""),  # cut at the budget
        ('{"arguments": {"a": 1}, "name": "add"}', [("add", {"a": 1})], [], ""),  # named late
        ('I will call {"name": "add", "arguments": {}} now.', [], [],
         'I will call {"name": "add", "arguments": {}} now.'),  # in a sentence: text
    ],
)  # fmt: skip
def test_bare_calls_at_the_head_of_a_message_are_calls_and_what_follows_is_content(
    text, calls, invalid, content
):
    parsed = parse_calls(text)
    assert [(c["name"], c["arguments"]) for c in parsed.calls] == calls
    assert [i["name"] for i in parsed.invalid] == invalid
    assert parsed.content == content


def test_python_calls_parse_with_dotted_names_and_free_text_stays_text():
    p = parse_calls('[math.factorial(number=5), geo.dist(a="x", b=[1, 2])]', "python")
    assert p.calls == [{"name": "math.factorial", "arguments": {"number": 5}},
                       {"name": "geo.dist", "arguments": {"a": "x", "b": [1, 2]}}]  # fmt: skip
    assert parse_calls("math.factorial(number=5)", "python").calls  # BFCL adds the brackets
    assert parse_calls("None of the functions can be used.", "python").content
    assert parse_calls("[f(1)]", "python").invalid  # positional arguments are refused


def test_the_canonical_form_ignores_call_order_and_key_order():
    a = parse_calls(call("add", a=1, b=2) + call("multiply", a=3, b=4)).canonical()
    b = parse_calls(call("multiply", b=4, a=3) + call("add", b=2, a=1)).canonical()
    assert a == b and a != parse_calls(call("add", a=1, b=3)).canonical()


@pytest.mark.parametrize(
    ("text", "choice", "why"),
    [
        (call("sub", a=1, b=2), None, "unknown tool 'sub'"),
        (call("add", a=1), None, "'b' is a required property"),
        (call("add", a=1, b="two"), None, "'two' is not of type 'number'"),
        (call("add", a=1, b=2, c=3), None, "Additional properties"),
        (call("add", a=1, b=2), "none", "tool_choice is 'none'"),
        ("I will not call.", "required", "requires one"),
        ('<tool_call>\n{"name": "add", "arguments": [1]}\n</tool_call>', None, "does not parse"),
    ],
)
def test_a_call_that_breaks_its_schema_names_why(text, choice, why):
    assert why in (check_calls(parse_calls(text), TOOLS, choice) or "")


def test_a_valid_call_passes_the_check():
    assert check_calls(parse_calls(call("add", a=1, b=2.5)), TOOLS) is None
    assert check_calls(parse_calls("Just text."), TOOLS) is None  # tool_choice auto


def test_a_named_tool_choice_starts_the_turn_with_the_call():
    spec = ChatSteps()
    q = chat_question([{"role": "user", "content": "hi"}], TOOLS, "add")
    assert spec.render_prompt(q, tiny_tokenizer()).endswith('{"name": "add", "arguments": ')
    parsed = spec.parse(q, '{"a": 1, "b": 2}}\n</tool_call>')
    assert parsed.calls[0]["arguments"] == {"a": 1, "b": 2}


# -- the chat model on scripted models ------------------------------------------------------


def scripted(replies, *, name, seen=None):
    """A step model that answers each prompt from `replies(prompt, i)`, with fixed log-probs."""

    def fn(prompt, n, **kw):
        if seen is not None:
            seen.append(prompt)
        out = []
        for i in range(n):
            text, lp = replies(prompt, i)
            out.append(StepOutput(text=text, token_logprobs=[lp] * max(1, len(text) // 4),
                                  ended="eos"))  # fmt: skip
        return out

    return CallableStepModel(fn, name=name, has_logprobs=True, tokenizer=tiny_tokenizer())


def chat(draft_reply, target_reply, **cfg):
    draft = scripted(draft_reply, name="draft")
    target = scripted(target_reply, name="target")
    return SpecGuardChatModel(draft=draft, target=target,
                              config=chat_config(beta=1.0, **cfg))  # fmt: skip


def test_a_confident_valid_draft_call_is_the_message():
    m = chat(lambda p, i: (call("add", a=2, b=3), -0.01),
             lambda p, i: pytest.fail("the target was asked"))  # fmt: skip
    msg = m.bind_tools([add, multiply]).invoke("2 + 3?")
    assert msg.tool_calls[0]["name"] == "add" and msg.tool_calls[0]["args"] == {"a": 2, "b": 3}
    meta = msg.response_metadata
    assert meta["source"] == "draft" and meta["checked"] == "ok"
    assert meta["finish_reason"] == "tool_calls"
    assert msg.usage_metadata["output_tokens"] > 0 and msg.usage_metadata["input_tokens"] > 0


def test_a_draft_call_that_breaks_the_schema_goes_to_the_target_whatever_its_score():
    m = chat(lambda p, i: (call("add", a=2, b="three"), 0.0),
             lambda p, i: (call("add", a=2, b=3), -0.5))  # fmt: skip
    msg = m.bind_tools([add]).invoke("2 + 3?")
    assert msg.response_metadata["source"] == "target"
    assert "'three' is not of type 'number'" in msg.response_metadata["reason"]
    assert msg.tool_calls[0]["args"] == {"a": 2, "b": 3}


def test_a_low_scoring_draft_message_goes_to_the_target():
    m = chat(lambda p, i: (call("add", a=2, b=4), -9.0), lambda p, i: (call("add", a=2, b=3), 0))
    msg = m.bind_tools([add]).invoke("2 + 3?")
    assert msg.response_metadata["source"] == "target" and "< tau" in msg.response_metadata[
        "reason"]  # fmt: skip


def test_k4_votes_exactly_on_the_calls_not_on_their_spelling():
    texts = [call("add", a=1, b=9), call("add", b=2, a=1), call("add", a=1, b=2),
             call("multiply", a=1, b=2)]  # fmt: skip
    m = chat(lambda p, i: (texts[i], -0.01), lambda p, i: pytest.fail("target"), k=4,
             temperature=0.7)  # fmt: skip
    msg = m.bind_tools([add, multiply]).invoke("1 + 2?")
    assert msg.tool_calls[0]["args"] == {"a": 1, "b": 2}  # 2 of 4 agree, spelled differently


def test_unparsable_calls_are_invalid_tool_calls():
    broken = '<tool_call>\n{"name": "add", "arguments": {"a": 1,\n</tool_call>'
    m = chat(lambda p, i: (broken, 0.0), lambda p, i: (broken, 0.0))
    msg = m.bind_tools([add]).invoke("1 + 2?")
    assert not msg.tool_calls and msg.invalid_tool_calls
    assert msg.response_metadata["source"] == "target"


def test_bind_tools_takes_what_langchain_takes():
    def power(base: float, exponent: float) -> float:
        """Raise base to a power."""
        return base**exponent

    seen: list[str] = []
    m = chat(lambda p, i: ("ok", -0.01), lambda p, i: ("ok", 0))
    m.draft = scripted(lambda p, i: ("ok", -0.01), name="draft", seen=seen)
    bound = m.bind_tools([add, Weather, power, TOOLS[0]], tool_choice="auto")
    assert bound.invoke("hi").content == "ok"
    names = [t["function"]["name"] for t in bound.kwargs["tools"]]
    assert names == ["add", "Weather", "power", "add"]
    with pytest.raises(ConfigError, match="names no bound tool"):
        m.bind_tools([add], tool_choice="nope")


def test_invoke_ainvoke_and_stream_agree():
    m = chat(lambda p, i: (call("add", a=2, b=3), -0.01), lambda p, i: ("x", 0)).bind_tools([add])
    a = m.invoke("2 + 3?")
    b = asyncio.run(m.ainvoke("2 + 3?"))
    chunks = list(m.stream("2 + 3?"))
    assert a.tool_calls[0]["args"] == b.tool_calls[0]["args"] == {"a": 2, "b": 3}
    assert chunks and chunks[-1].tool_calls[0]["args"] == {"a": 2, "b": 3}


def _agent_script(prompt: str, i: int) -> tuple[str, float]:
    """Calls add, then multiply on add's result, then answers: reads the tool results."""
    results = re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", prompt)
    if not results:
        return call("add", a=17, b=25), -0.01
    if len(results) == 1:
        return call("multiply", a=float(results[0]), b=3), -0.01
    return f"The answer is {results[1]}.", -0.01


def test_create_agent_runs_on_it_unchanged():
    from langchain.agents import create_agent

    model = chat(_agent_script, lambda p, i: pytest.fail("the target was asked"))
    agent = create_agent(model, [add, multiply])
    out = agent.invoke({"messages": [HumanMessage("What is (17 + 25) * 3?")]})
    tools_run = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert tools_run == ["42.0", "126.0"]
    assert out["messages"][-1].content == "The answer is 126.0."


def test_create_react_agent_runs_on_it_and_the_target_fixes_a_bad_call():
    from langgraph.prebuilt import create_react_agent

    def draft(prompt, i):  # the first call has a wrong argument name
        text, lp = _agent_script(prompt, i)
        return (text.replace('"a": 17', '"x": 17'), lp)

    model = chat(draft, _agent_script)
    agent = create_react_agent(model, [add, multiply])
    out = agent.invoke({"messages": [HumanMessage("What is (17 + 25) * 3?")]})
    ai = [m for m in out["messages"] if isinstance(m, AIMessage)]
    assert [m.response_metadata["source"] for m in ai] == ["target", "draft", "draft"]
    assert out["messages"][-1].content == "The answer is 126.0."


def test_stop_sequences_and_unknown_arguments_are_refused_by_name():
    m = chat(lambda p, i: ("x", 0), lambda p, i: ("x", 0))
    with pytest.raises(ConfigError, match="stop"):
        m.invoke("hi", stop=["\n"])
    with pytest.raises(ConfigError, match="frequency_penalty"):
        m.invoke("hi", frequency_penalty=1.0)


# -- tiny real models: the whole path on a transformers model --------------------------------


def test_the_chat_model_runs_on_tiny_local_models_with_both_signals():
    draft, target, embedder = tiny_models()
    m = SpecGuardChatModel(draft=draft, target=target, embedder=embedder,
                           config=chat_config(max_step_tokens=12, max_total_tokens=12))  # fmt: skip
    msg = m.bind_tools([add]).invoke([HumanMessage("2 + 3?")])
    meta = msg.response_metadata
    assert meta["source"] in ("draft", "target") and meta["checked"]
    assert meta["grounding"] is not None and meta["logprob"] is not None
    assert 0 < msg.usage_metadata["output_tokens"] <= 12
    # where the time went: the draft's prompt prefill is part of its seconds
    spent = meta["spent"]
    assert 0 < spent["draft_prefill_s"] <= spent["draft_s"]
    assert 0 <= spent["target_prefill_s"] <= spent["target_s"]


def test_json_lines_of_calls_parse_as_calls():
    lines = '{"name": "add", "arguments": {"a": 1, "b": 2}}\n{"name": "add", "arguments": {}}'
    assert [c["arguments"] for c in parse_calls(lines).calls] == [{"a": 1, "b": 2}, {}]


def test_a_draft_message_cut_at_its_budget_goes_to_the_target():
    m = chat(lambda p, i: ("word " * 100, -0.01), lambda p, i: ("Short answer.", 0),
             max_step_tokens=40, max_total_tokens=40)  # fmt: skip
    msg = m.invoke("hi")
    assert msg.response_metadata["source"] == "target" and "cut" in msg.response_metadata["reason"]
    assert msg.content == "Short answer."


# -- any LangChain chat model as draft or target --------------------------------------------


class ScriptedChat(BaseChatModel):
    """A provider-like chat model: bind_tools, tool calls, log-probs in the metadata."""

    reply: AIMessage
    seen: list = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, *, tool_choice=None, **kw):
        self.seen.append(("bind", [t["function"]["name"] for t in tools], tool_choice))
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        self.seen.append(("call", [type(m).__name__ for m in messages]))
        return ChatResult(generations=[ChatGeneration(message=self.reply)])


def test_a_langchain_chat_model_can_be_the_draft_and_the_target():
    lp = {"logprobs": {"content": [{"logprob": -0.01}] * 5}}
    good = AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "c1"}],
                     response_metadata=lp)  # fmt: skip
    bad = AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2}, "id": "c2"}],
                    response_metadata=lp)  # fmt: skip
    draft, target = ScriptedChat(reply=bad, seen=[]), ScriptedChat(reply=good, seen=[])
    model = SpecGuardChatModel(draft=draft, target=target, config=chat_config(beta=1.0))
    history = [HumanMessage("2 + 3?"),
               AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 1}, "id": "c0"}]),
               ToolMessage("2.0", tool_call_id="c0")]  # fmt: skip
    msg = model.bind_tools([add], tool_choice="add").invoke(history)
    assert msg.response_metadata["source"] == "target"  # the draft's call misses "b"
    assert msg.tool_calls[0]["args"] == {"a": 2, "b": 3}
    assert draft.seen[0] == ("bind", ["add"], "add")
    # the conversation as LangChain messages, after the default agent system prompt
    assert draft.seen[1] == ("call", ["SystemMessage", "HumanMessage", "AIMessage", "ToolMessage"])


def test_a_served_template_renders_tools_as_transformers_does():
    from specguard_graph.models.served.template import ServerTemplate

    template = ("{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
                "{% for m in messages %}{{ m['content'] }}{% endfor %}")  # fmt: skip
    tok = tiny_tokenizer()
    tools = [{"type": "function", "function": {"name": "cmp", "description": "a < b & c"}}]
    messages = [{"role": "user", "content": "hi"}]
    local = tok.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False)
    served = ServerTemplate(template).apply_chat_template(messages, tools=tools)
    assert served == local and "a < b & c" in served


def test_the_doubled_braces_of_qwen_coders_template_still_parse():
    """Qwen2.5-Coder's template shows {{"name": ...}} in its instruction; the model copies it."""
    doubled = '{{"name": "add", "arguments": {"a": 1, "b": 2}}}'
    assert parse_calls(doubled).calls == [{"name": "add", "arguments": {"a": 1, "b": 2}}]
    assert parse_calls(f"<tool_call>\n{doubled}\n</tool_call>").calls[0]["name"] == "add"
    assert parse_calls(doubled + "\n" + doubled).calls[1]["arguments"] == {"a": 1, "b": 2}
    # the form the embedded target wrote in benchmarks/agent_task.py: both closing braces doubled
    four = '{{"name": "multiply", "arguments": {"a": 17, "b": 25}}}}'
    assert parse_calls(four).calls == [{"name": "multiply", "arguments": {"a": 17, "b": 25}}]
    assert parse_calls('{{"name": "f", "arguments": {}}} and then text').calls == []
