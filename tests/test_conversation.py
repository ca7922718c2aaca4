"""The agent surface's conversation-aware checks, the fixed Qwen tool template, the lossless
agent mode and the default system prompt."""

import pytest

from specguard_graph import chat_config
from specguard_graph.agents.calls import ParsedMessage
from specguard_graph.agents.chat_model import AGENT_SYSTEM, with_system
from specguard_graph.agents.conversation import (
    EMPTY,
    IMPERSONATION,
    REPEAT,
    answered_calls,
    conversation_check,
)
from specguard_graph.agents.spec import ChatSteps, chat_question
from specguard_graph.errors import ConfigError
from specguard_graph.models.tool_template import DOUBLED, SINGLE, fix_tokenizer, fixed

TOOL = {"type": "function", "function": {"name": "multiply", "description": "a * b",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                        "b": {"type": "number"}},
                       "required": ["a", "b"]}}}  # fmt: skip
ASKED = [{"role": "user", "content": "What is 17 * 23?"}]
CALLED = [*ASKED, {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "id": "c1", "function": {"name": "multiply",
                                                  "arguments": {"a": 17, "b": 23}}}]}]  # fmt: skip
ANSWERED = [*CALLED, {"role": "tool", "content": "391.0", "name": "multiply",
                      "tool_call_id": "c1"}]  # fmt: skip
CALL = '<tool_call>\n{"name": "multiply", "arguments": {"b": 23, "a": 17}}\n</tool_call>'


def check(messages, text):
    return ChatSteps().check(chat_question(messages, [TOOL]), text)


def test_a_call_already_made_and_answered_goes_to_the_target():
    assert check(ANSWERED, CALL) == REPEAT  # the same call, its arguments in another order
    assert check(CALLED, CALL) is None  # made but not answered yet: not a repeat
    assert check(ANSWERED, CALL.replace("23", "24")) is None  # another call
    assert check(ANSWERED, "17 * 23 is 391.") is None  # the answer


def test_an_empty_message_and_a_message_that_writes_another_turn_go_to_the_target():
    assert check(ANSWERED, "") == EMPTY
    assert check(ANSWERED, "  \n") == EMPTY
    assert check(ANSWERED, 'Human: <tool_response>{"error": "no"}</tool_response>') == (
        IMPERSONATION
    )
    assert check(ANSWERED, "The answer is 391.\nUser: thanks") == IMPERSONATION
    made_up = '{"name": "multiply", "arguments": {"a": 17, "b": 23}} {"response": "391.0"}'
    assert check(ASKED, made_up) == IMPERSONATION  # the call parses; then the tool's answer
    assert check(ANSWERED, "The user asked for 17 * 23: it is 391.") is None


def test_schema_failures_still_come_first():
    bad = CALL.replace('"b": 23', '"b": "x"')
    assert "multiply" in check(ANSWERED, bad)


def test_answered_calls_reads_string_arguments_and_missing_ids():
    msgs = [*ASKED, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "multiply", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "content": "2"}]  # fmt: skip
    assert len(answered_calls(msgs)) == 1
    parsed = ParsedMessage("", calls=[{"name": "multiply", "arguments": {"b": 2, "a": 1}}])
    assert conversation_check(msgs, parsed) == REPEAT


def test_the_doubled_brace_call_format_is_fixed_and_other_templates_are_untouched():
    buggy = '{{- "<tool_call>\\n' + DOUBLED + '\\n</tool_call>" }}'
    assert fixed(buggy) == '{{- "<tool_call>\\n' + SINGLE + '\\n</tool_call>" }}'
    mine = "{{ messages[0]['content'] }} {{'{{'}}"
    assert fixed(mine) == mine

    class Tok:
        chat_template = buggy

    assert SINGLE in fix_tokenizer(Tok()).chat_template


def test_lossless_mode_verifies_every_message():
    cfg = chat_config(lossless=True)
    assert cfg.tau > 1 and cfg.fallback == "verify" and cfg.k == 1 and cfg.temperature == 0
    assert chat_config(lossless=True, k=1).tau > 1
    with pytest.raises(ConfigError, match="lossless"):
        chat_config(lossless=True, tau=0.5)


def test_the_default_system_prompt_comes_only_with_tools_and_without_a_system_message():
    assert with_system(ASKED, AGENT_SYSTEM, [TOOL])[0] == {"role": "system",
                                                          "content": AGENT_SYSTEM}  # fmt: skip
    assert with_system(ASKED, AGENT_SYSTEM, []) == ASKED
    own = [{"role": "system", "content": "be brief"}, *ASKED]
    assert with_system(own, AGENT_SYSTEM, [TOOL]) == own
    assert with_system(ASKED, None, [TOOL]) == ASKED


def test_the_plain_chat_model_writes_alone_and_its_next_call_reuses_the_conversation():
    import copy

    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from specguard_graph import PlainChatModel
    from specguard_graph.models.local import numerics
    from specguard_graph.models.local.hf import LocalCausalLM
    from specguard_graph.testing import tiny_lm

    base = tiny_lm(layers=2, hidden=64, heads=4, seed=4)
    lm = LocalCausalLM(numerics.apply(copy.deepcopy(base.model), "int8", "cpu"), base.tokenizer)
    model = PlainChatModel(lm=lm, max_tokens=6).bind_tools([TOOL])
    first = model.invoke([HumanMessage("What is 17 * 23?")])
    meta = first.response_metadata
    assert meta["source"] == "plain" and meta["fed"]["reused"] == 0
    assert meta["fed"]["prefill"] == first.usage_metadata["input_tokens"] - 1
    assert meta["prefill_s"] > 0 and meta["decode_s"] > 0
    call = {"name": "multiply", "args": {"a": 17, "b": 23}, "id": "c1"}
    convo = [HumanMessage("What is 17 * 23?"), AIMessage("", tool_calls=[call]),
             ToolMessage("391.0", tool_call_id="c1", name="multiply")]  # fmt: skip
    second = model.invoke(convo).response_metadata["fed"]
    assert second["reused"] >= meta["fed"]["prefill"] - 8  # the system block and the question
    assert second["prefill"] < meta["fed"]["prefill"]


def test_the_plain_chat_model_through_prompt_lookup_writes_the_same_messages_in_fewer_forwards():
    import copy

    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from specguard_graph import PlainChatModel
    from specguard_graph.models.local import numerics
    from specguard_graph.models.local.hf import LocalCausalLM
    from specguard_graph.testing import tiny_lm

    base = tiny_lm(layers=4, hidden=128, heads=4, seed=2, init_range=0.3)  # varied greedy text
    lm = LocalCausalLM(numerics.apply(copy.deepcopy(base.model), "int8", "cpu"), base.tokenizer)
    call = {"name": "multiply", "args": {"a": 17, "b": 23}, "id": "c1"}
    convos = [[HumanMessage("What is 17 * 23?")],
              [HumanMessage("What is 17 * 23?"), AIMessage("", tool_calls=[call]),
               ToolMessage("391.0", tool_call_id="c1", name="multiply")]]  # fmt: skip
    plain = PlainChatModel(lm=lm, max_tokens=40).bind_tools([TOOL])
    looked = PlainChatModel(lm=lm, max_tokens=40, lookup=True).bind_tools([TOOL])
    for convo in convos:
        want, got = plain.invoke(convo), looked.invoke(convo)
        assert (got.content, got.tool_calls) == (want.content, want.tool_calls)
        fed = got.response_metadata["fed"]
        assert fed["decode"] == want.response_metadata["fed"]["decode"] == 40  # the whole budget
        assert fed["forwards"] < fed["decode"]  # some proposals taken: fewer forwards than tokens
        assert "forwards" not in want.response_metadata["fed"]
    with pytest.raises(ConfigError, match="row-invariant"):
        PlainChatModel(lm=base, lookup=True)  # float32: a checked chunk rounds differently


def test_a_call_written_as_text_that_the_parser_cannot_read_goes_to_the_target():
    from specguard_graph.agents.conversation import UNREAD_CALL

    seen = 'I will call {"name": "multiply", "arguments": {"a": 17, "b": 23}} now.'
    assert check(ASKED, seen) == UNREAD_CALL  # inside a sentence: no call parsed
    assert check(ASKED, 'I used {"name": "weather"} once.') is None  # not a bound tool
    assert check(ASKED, CALL) is None  # a call that parses
