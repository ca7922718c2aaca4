"""Streaming chat models: chunks arrive as their text becomes final, and the joined chunks are
the message `invoke` returns, on every path (accepted, rewritten, verified, lookup, cut at the
budget, a forced tool choice)."""

from __future__ import annotations

import itertools
import json

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from specguard_graph import CallableStepModel, SpecGuardChatModel, StepOutput, chat_config
from specguard_graph.agents.calls import parse_calls
from specguard_graph.agents.plain import PlainChatModel
from specguard_graph.agents.stream import safe_content
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.testing import tiny_exact_lm, tiny_models, tiny_tokenizer

TIMES = ("time_s", "prefill_s", "decode_s", "timing", "spent", "fed")  # clocks differ per call


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def call(name: str, **args: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


TEXTS = {
    "json": [
        "The sum is 5.",
        "  Let me add them.\n" + call("add", a=2, b=3) + "\nDone, then.  ",
        call("add", a=1, b=2) + call("add", a=3, b=4),
        '{"name": "add", "arguments": {"a": 1, "b": 2}}',
        '```json\n{"name": "add", "arguments": {}}\n```',
        "x < 3 and <tool_ca is not a tag, <b>bold</b>",
        "Broken: <tool_call>\n{not json\n</tool_call> after",
        "cut in the middle <tool_call>\n{\"name\": \"add\"",
        '{"name": "add", "arguments": {"a": 1}}\n{"response": "None"}',
        '[{"name": "add", "arguments": {}}, {"name": "add", "arguments": {"a": 2}}]\nok',
        '{"name": "add", "arguments": {"a": 1}} then ' + call("add", a=2, b=3) + " end",
        '{"name": "add", "arguments": {"a": 1, "b": ',
    ],
    "python": ["add(a=1, b=2)", "[add(a=1), add(b=2)]", "The answer is 7.", "Hello world",
               "```python\nadd(a=1)\n```", "addition(a=1) is what I would call"],
}  # fmt: skip


@pytest.mark.parametrize("calls", sorted(TEXTS))
def test_what_is_sent_early_is_always_a_prefix_of_the_final_content(calls):
    for text in TEXTS[calls]:
        final = parse_calls(text, calls).content
        sent = ""
        for end in range(len(text) + 1):
            safe = safe_content(text[:end], calls)
            assert final.startswith(safe), (text, text[:end], safe, final)
            assert safe.startswith(sent) or len(safe) < len(sent), (text[:end], safe, sent)
            sent = max(sent, safe, key=len)


def test_content_streams_before_the_message_ends_and_calls_wait_for_their_block():
    text = "Let me add them. " + call("add", a=2, b=3)
    assert safe_content(text[:10], "json") == "Let me add"
    assert safe_content(text[: text.index("<") + 4], "json") == "Let me add them."
    assert safe_content('{"name": "ad', "json") == ""  # could be a bare call
    assert safe_content("The answer", "python") == "The answer"
    assert safe_content("add", "python") == ""  # could become add(


def joined(chunks):
    out = chunks[0]
    for c in chunks[1:]:
        out = out + c
    return out


def assert_same(streamed, invoked):
    assert streamed.content == invoked.content
    strip = [{k: v for k, v in c.items() if k != "id"} for c in invoked.tool_calls]
    assert [{k: v for k, v in c.items() if k != "id"} for c in streamed.tool_calls] == strip
    # an invalid call joins invalid, with its name and text (its parse error has no field)
    assert [(c["name"], c["args"]) for c in streamed.invalid_tool_calls] == [
        (c["name"], c["args"]) for c in invoked.invalid_tool_calls
    ]
    assert all(c["name"] for c in streamed.tool_calls)  # none joined as a nameless call
    a = {k: v for k, v in streamed.response_metadata.items() if k not in TIMES}
    b = {k: v for k, v in invoked.response_metadata.items() if k not in TIMES}
    assert a == b
    assert streamed.usage_metadata == invoked.usage_metadata


def stream_and_invoke(model, messages):
    chunks = [c for c in model.stream(messages)]
    return chunks, model.invoke(messages)


@pytest.fixture(scope="module")
def int8_target() -> LocalCausalLM:
    return tiny_exact_lm(newline_bias=0.0)


@pytest.mark.parametrize("lookup", [False, True])
def test_the_one_model_chat_model_streams_each_token_and_joins_to_invoke(int8_target, lookup):
    model = PlainChatModel(lm=int8_target, max_tokens=24, lookup=lookup)
    chunks, invoked = stream_and_invoke(model, [HumanMessage("Say something.")])
    assert_same(joined(chunks), invoked)
    assert invoked.response_metadata["finish_reason"] in ("length", "stop", "tool_calls")
    if len(invoked.content) > 10:  # text arrives over several chunks, not at the end
        assert len([c for c in chunks if c.content]) > 2


def test_a_message_cut_at_its_budget_and_a_forced_call_join_to_invoke(int8_target):
    model = PlainChatModel(lm=int8_target, max_tokens=5)
    chunks, invoked = stream_and_invoke(model, [HumanMessage("Talk.")])
    assert invoked.response_metadata["finish_reason"] == "length"
    assert_same(joined(chunks), invoked)
    forced = PlainChatModel(lm=int8_target, max_tokens=8).bind_tools([add], tool_choice="add")
    chunks, invoked = stream_and_invoke(forced, [HumanMessage("2 + 3?")])
    assert_same(joined(chunks), invoked)
    assert all(not c.content for c in chunks[:-1])  # a forced call streams no text


def scripted(reply, *, name):
    def fn(prompt, n, **kw):
        return [StepOutput(text=reply, token_logprobs=[-0.01] * 4, ended="eos")] * n

    return CallableStepModel(fn, name=name, has_logprobs=True, tokenizer=tiny_tokenizer())


def test_an_accepted_draft_message_arrives_in_one_chunk_and_joins_to_invoke():
    m = SpecGuardChatModel(draft=scripted("All done: " + call("add", a=2, b=3), name="d"),
                           target=scripted("target", name="t"),
                           config=chat_config(beta=1.0, tau=0.1)).bind_tools([add])  # fmt: skip
    chunks, invoked = stream_and_invoke(m, [HumanMessage("2 + 3?")])
    assert invoked.response_metadata["accepted"] and len(chunks) == 1
    assert_same(joined(chunks), invoked)
    assert joined(chunks).tool_calls[0]["args"] == {"a": 2, "b": 3}


@pytest.mark.parametrize("fallback", ["rewrite", "verify"])
def test_a_message_the_target_writes_streams_its_tokens_and_joins_to_invoke(fallback):
    draft, target, embedder = tiny_models()
    m = SpecGuardChatModel(draft=draft, target=target, embedder=embedder,
                           config=chat_config(tau=1.01, fallback=fallback, max_step_tokens=20,
                                              max_total_tokens=20))  # fmt: skip
    chunks, invoked = stream_and_invoke(m, [HumanMessage("Say something.")])
    assert invoked.response_metadata["source"] == "target"
    assert_same(joined(chunks), invoked)
    if len(invoked.content) > 10:
        assert len([c for c in chunks if c.content]) > 2


def test_a_forced_tool_choice_joins_to_invoke_on_specguard():
    m = SpecGuardChatModel(draft=scripted('{"a": 2, "b": 3}}\n</tool_call>', name="d"),
                           target=scripted("x", name="t"),
                           config=chat_config(beta=1.0, tau=0.1))  # fmt: skip
    forced = m.bind_tools([add], tool_choice="add")
    chunks, invoked = stream_and_invoke(forced, [HumanMessage("2 + 3?")])
    assert_same(joined(chunks), invoked)
    assert joined(chunks).tool_calls and joined(chunks).tool_calls[0]["name"] == "add"


def test_an_agent_streams_the_message_token_by_token_in_langgraph_messages_mode(int8_target):
    from langchain.agents import create_agent

    agent = create_agent(PlainChatModel(lm=int8_target, max_tokens=16), tools=[add])
    parts = [m for m, _ in agent.stream({"messages": [HumanMessage("Say something.")]},
                                        stream_mode="messages")]  # fmt: skip
    final = agent.invoke({"messages": [HumanMessage("Say something.")]})["messages"][-1]
    texts = [p.content for p in parts if p.content]
    assert len(texts) > 2 and "".join(texts) == final.content


def test_a_long_prefill_reports_its_progress_to_a_callback_and_the_custom_stream(int8_target):
    from langchain.agents import create_agent

    from specguard_graph.models import tokens

    long_question = "Please read this carefully. " * 120  # several chunks of 256 rows
    seen: list[tuple[int, int]] = []
    int8_target.prefix_store.clear()
    with tokens.on_prefill(lambda fed, total: seen.append((fed, total))):
        PlainChatModel(lm=int8_target, max_tokens=2).invoke([HumanMessage(long_question)])
    assert len(seen) >= 2 and [f for f, _ in seen] == sorted(f for f, _ in seen)
    assert all(t == seen[0][1] and 0 < f < t for f, t in seen)
    int8_target.prefix_store.clear()
    agent = create_agent(PlainChatModel(lm=int8_target, max_tokens=2), tools=[add])
    stream = agent.stream({"messages": [HumanMessage(long_question)]}, stream_mode="custom")
    got = [(e["fed"], e["total"]) for e in stream if e.get("event") == "prefill"]
    # the agent's prompt also holds its tools: as many chunks or more, one total, in order
    assert len(got) >= len(seen) and got[0][1] >= seen[0][1]
    assert [f for f, _ in got] == [256 * (i + 1) for i in range(len(got))]


def test_a_streamed_message_is_written_on_the_callers_thread_with_no_new_team(int8_target):
    """A generation on another thread would start a second OpenMP team (docs/numerics.md)."""
    import os
    import threading

    model = PlainChatModel(lm=int8_target, max_tokens=12)
    model.invoke([HumanMessage("Warm up.")])  # this thread's team exists now
    before = len(os.listdir("/proc/self/task"))
    writers = set()
    hook = int8_target.model.register_forward_hook(
        lambda *a: writers.add(threading.get_ident()))  # fmt: skip
    try:
        chunks = list(model.stream([HumanMessage("Say something.")]))
    finally:
        hook.remove()
    assert len(chunks) > 1 and writers == {threading.get_ident()}
    assert len(os.listdir("/proc/self/task")) == before


def test_the_graph_streams_the_targets_step_as_it_is_written_in_its_custom_stream():
    from specguard_graph import SpecGuardConfig, build_graph

    draft, target, embedder = tiny_models()
    graph = build_graph(draft, target, embedder=embedder,
                        config=SpecGuardConfig(tau=1.01, max_steps=2, max_step_tokens=16)
                        ).compile()  # fmt: skip
    texts: dict[int, list[str]] = {}
    final = None
    for mode, data in graph.stream({"question": "What is 2 + 3?"},
                                   stream_mode=["custom", "values"]):  # fmt: skip
        if mode == "custom" and data["event"] == "target_text":
            texts.setdefault(data["step"], []).append(data["text"])
        elif mode == "values":
            final = data
    steps = final["steps"]
    assert steps and all(s["source"] == "target" for s in steps)
    for i, step in enumerate(steps):
        seen = texts[i]
        assert len(seen) > 1 and all(b.startswith(a) for a, b in itertools.pairwise(seen))
        assert seen[-1].startswith(step["text"])  # then the delimiter, which the step drops


def test_the_live_view_shows_a_prefill_bar_and_the_targets_text_as_plain_text():
    from specguard_graph.cli.live import LiveView

    view = LiveView("q")
    view.handle({"event": "prefill", "fed": 512, "total": 2048})
    assert "512 / 2,048 tokens" in view.status and "█████·" in view.status
    view.handle({"event": "target_text", "step": 3, "text": "x = [/INST] \\\\[ 1"})
    assert view.status.endswith("x = [/INST] \\\\[ 1") and "step 3" in view.status
    view.render()  # rich takes it as text: no MarkupError


def fed_char_by_char(text: str, prefix: str = ""):
    """A `MessageStream` fed one character per token; the chunks, where each call's name and
    arguments went out, and the message `invoke` returns for the same text."""
    from specguard_graph.agents.messages import to_ai_message
    from specguard_graph.agents.stream import MessageStream

    stream = MessageStream(lambda ids: "".join(map(chr, ids)), prefix, "json")
    chunks, named_at, args_at = [], {}, {}
    for i, ch in enumerate(text):
        piece = stream.add([ord(ch)])
        if piece is not None:
            chunks.append(piece)
            for c in piece.tool_call_chunks:
                if c["name"]:
                    named_at[c["index"]] = i
                if c["args"]:
                    args_at[c["index"]] = i
    invoked = to_ai_message(parse_calls(prefix + text), response_metadata={"finish_reason": "x"},
                            usage_metadata={"input_tokens": 1, "output_tokens": len(text),
                                            "total_tokens": 1 + len(text)})  # fmt: skip
    chunks.append(stream.finish(invoked))
    return chunks, named_at, args_at, invoked


def test_a_calls_name_goes_out_when_written_and_its_arguments_when_its_block_closes():
    text = ("Adding. " + call("add", a=1, b=2) + " then <tool_call>\n{broken\n</tool_call> and "
            + call("add", a=3, b=4) + " done.")  # fmt: skip
    chunks, named_at, args_at, invoked = fed_char_by_char(text)
    closes = [i + len("</tool_call>") - 1 for i in range(len(text)) if text.startswith("</", i)]
    names = [i + len('"add"') - 1 for i in range(len(text)) if text.startswith('"add"', i)]
    assert named_at == {0: names[0], 2: names[1]}  # at the name's closing quote
    assert args_at == {0: closes[0], 2: closes[2]}  # the broken block waits for the end
    assert_same(joined(chunks), invoked)
    assert [c["args"] for c in joined(chunks).tool_calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert joined(chunks).invalid_tool_calls[0]["args"] == "<tool_call>\n{broken\n</tool_call>"


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": ',  # cut at the budget
        '<tool_call>\n{"name": "add", "arguments": {"a": 1,}}\n</tool_call>',  # bad JSON
        '<tool_call>\n{"name": "add", "arguments": "a=1"}\n</tool_call>',
        '<tool_call>\n{"name": "add", "name": "mul", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "add", "arguments": {"a": 1}}',  # ends without its closing tag
        '<tool_call>\n{"arguments": {"a": 1}, "name": "add"}\n</tool_call>',  # named late
        '<tool_call>\n{{"name": "add", "arguments": {"a": 1}}}\n</tool_call>',
    ],
)
def test_a_call_named_early_that_then_fails_joins_invalid_never_runnable(text):
    chunks, named_at, _, invoked = fed_char_by_char(text)
    out = joined(chunks)
    assert_same(out, invoked)
    if invoked.invalid_tool_calls:
        assert not out.tool_calls and out.invalid_tool_calls[0]["name"] == "add"
        assert named_at  # the name had gone out before the call failed
    else:
        assert out.tool_calls[0]["name"] == "add" and out.tool_calls[0]["args"] == {"a": 1}


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "add", "arguments": {"a": 1}}\n{"response": "None"}',  # a made-up answer after
        '```json\n[{"name": "add", "arguments": {"a": 1}}, {"name": "add", "arguments": {}}]\n```',
        '{"name": "add", "arguments": {"a": 1}}\n' + call("add", a=2, b=3) + " then text",
        '{"name": "add", "arguments": {"a": 1, "b": ',  # cut at the budget: joins invalid
        '{"name": "add", "arguments": "a=1"}\n{"name": "add", "arguments": {"a": 1}}',
    ],
)
def test_a_bare_calls_name_goes_out_when_written_and_its_arguments_when_its_object_closes(text):
    chunks, named_at, args_at, invoked = fed_char_by_char(text)
    assert_same(joined(chunks), invoked)
    names = [i + len('"add"') - 1 for i in range(len(text)) if text.startswith('"add"', i)]
    assert named_at[0] == names[0]  # at the first name's closing quote, before its arguments
    assert all(not c.content for c in chunks[:-1])  # content waits for the last chunk
    whole = '{"name": "add", "arguments": {"a": 1}}'
    _, _, args_at, _ = fed_char_by_char(whole + "\n" + whole + " ok")
    assert args_at == {0: len(whole) - 1, 1: 2 * len(whole)}  # each at its closing brace


def test_a_call_opens_with_its_id_at_its_tag_before_its_name_and_a_mere_object_never_opens():
    ids_at = {}
    for text in (call("add", a=1, b=2), '{"name": "add", "arguments": {"a": 1}}\n{"response": 1}'):
        chunks, _, _, invoked = fed_char_by_char(text)
        opened = [
            (i, c) for i, ch in enumerate(chunks[:-1]) for c in ch.tool_call_chunks if c["id"]
        ]
        assert len(opened) == 1 and opened[0][1]["index"] == 0 and opened[0][1]["name"] is None
        ids_at[text[:3]] = opened[0][0]
        assert_same(joined(chunks), invoked)
        assert joined(chunks).tool_calls[0]["id"] == opened[0][1]["id"]
    # the tag is whole at its '>' (chunk 0: nothing came before it); a bare object once it opens
    # `{"name": "`, the name still being written
    assert ids_at == {"<to": 0, '{"n': 0}
    chunks, _, _, _ = fed_char_by_char('<tool_call>\n{"name": "add"')
    assert chunks[0].tool_call_chunks[0]["id"] and chunks[1].tool_call_chunks[0]["name"] == "add"


def test_a_forced_calls_name_is_in_the_first_chunk():
    prefix = '<tool_call>\n{"name": "add", "arguments": '
    chunks, named_at, _, invoked = fed_char_by_char('{"a": 2, "b": 3}}\n</tool_call>', prefix)
    assert named_at == {0: 0} and chunks[0].tool_call_chunks[0]["name"] == "add"
    assert_same(joined(chunks), invoked)


def test_the_graph_streams_each_step_as_a_message_in_langgraphs_messages_mode():
    from specguard_graph import SpecGuardConfig, build_graph

    draft, target, embedder = tiny_models()
    for tau, source in ((1.01, "target"), (0.0, "draft")):  # every step rewritten / accepted
        graph = build_graph(draft, target, embedder=embedder,
                            config=SpecGuardConfig(tau=tau, max_steps=2, max_step_tokens=16)
                            ).compile()  # fmt: skip
        chunks: dict[str, list] = {}
        final = None
        for mode, data in graph.stream({"question": "What is 2 + 3?"},
                                       stream_mode=["messages", "values"]):  # fmt: skip
            if mode == "messages":
                message, meta = data
                assert meta["langgraph_node"] == ("target_recompute" if source == "target"
                                                  else "commit_step")  # fmt: skip
                chunks.setdefault(message.id, []).append((message.content, meta))
            else:
                final = data
        steps = final["steps"]
        assert steps and all(s["source"] == source for s in steps)
        assert len(chunks) == len(steps)
        for step, parts in zip(steps, chunks.values(), strict=True):
            joined = "".join(text for text, _ in parts)
            assert (
                joined.startswith(step["text"]) and parts[0][1]["specguard_step"] == step["index"]
            )
            if source == "draft":
                assert len(parts) == 1 and joined == step["text"]  # at once, whole
            else:
                assert len(parts) > 1  # as the target writes it


def test_the_chat_model_streams_its_message_once_not_its_graphs_steps_too():
    from langgraph.graph import END, START, MessagesState, StateGraph

    draft, target, embedder = tiny_models()
    model = SpecGuardChatModel(draft=draft, target=target, embedder=embedder,
                               config=chat_config(tau=1.01, max_step_tokens=16),
                               disable_streaming=True)  # fmt: skip
    # not streamed, the model runs its graph on the node's thread, inside the node's callbacks
    graph = StateGraph(MessagesState)
    graph.add_node("chat", lambda s: {"messages": [model.invoke(s["messages"])]})
    graph.add_edge(START, "chat")
    graph.add_edge("chat", END)
    for subgraphs in (False, True):  # with subgraphs, LangGraph passes on nested graphs' runs
        out = graph.compile().stream({"messages": [HumanMessage("Hi")]}, stream_mode="messages",
                                     subgraphs=subgraphs)  # fmt: skip
        ids = {(item[1] if subgraphs else item)[0].id for item in out}
        assert len(ids) == 1, subgraphs
