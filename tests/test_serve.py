"""`specguard serve`: OpenAI's clients drive the chat models through it, streaming and not;
bad requests get a 400 naming the field; concurrent requests queue; a client that leaves
mid-stream frees the model."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import uvicorn
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from specguard_graph import CallableStepModel, SpecGuardChatModel, StepOutput, chat_config
from specguard_graph.agents.plain import PlainChatModel
from specguard_graph.serve import Served, build_app, prompt_counter
from specguard_graph.testing import tiny_exact_lm, tiny_tokenizer

KEY = "sk-test"
ADD = {"type": "function", "function": {"name": "add", "description": "Add two numbers.",
       "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                         "b": {"type": "number"}},
                      "required": ["a", "b"]}}}  # fmt: skip


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def _script(prompt: str, n: int, **kw):
    """Calls add(17, 25) first; once a tool result is in the prompt, answers with it."""
    results = re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", prompt, re.DOTALL)
    call = {"name": "add", "arguments": {"a": 17, "b": 25}}
    text = (f"The answer is {results[-1].strip()}." if results
            else f"<tool_call>\n{json.dumps(call)}\n</tool_call>")  # fmt: skip
    return [StepOutput(text=text, token_logprobs=[-0.01] * 4, ended="eos")] * n


@pytest.fixture(scope="module")
def server():
    lm = tiny_exact_lm(newline_bias=0.0)
    scripted = CallableStepModel(_script, name="s", has_logprobs=True, tokenizer=tiny_tokenizer())
    spec = SpecGuardChatModel(draft=scripted, target=scripted,
                              config=chat_config(beta=1.0, tau=0.1))  # fmt: skip
    plain = PlainChatModel(lm=lm, max_tokens=24)
    long = PlainChatModel(lm=lm, max_tokens=300)  # long enough to leave in the middle of
    models = {"specguard": Served(spec), "target": Served(plain, prompt_counter(plain), 600),
              "long": Served(long)}  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(build_app(models, api_key=KEY), host="127.0.0.1",
                                        port=port, log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started
    yield f"http://127.0.0.1:{port}/v1", models
    srv.should_exit = True
    thread.join(10)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)


USER = [{"role": "user", "content": "Say something."}]


def test_the_openai_client_gets_the_same_message_streamed_and_not(server):
    url, _ = server
    c = client(url)
    assert {m.id for m in c.models.list()} == {"specguard", "target", "long"}
    whole = c.chat.completions.create(model="target", messages=USER)
    parts = list(c.chat.completions.create(model="target", messages=USER, stream=True))
    text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert text == whole.choices[0].message.content and len(parts) > 2
    assert parts[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert parts[-1].usage.total_tokens == whole.usage.total_tokens
    assert whole.model_extra["specguard"]["source"] == "plain"  # the documented extension


def test_tool_calls_arrive_in_openais_format_streamed_and_not(server):
    url, _ = server
    c = client(url)
    whole = c.chat.completions.create(model="specguard", messages=USER, tools=[ADD])
    (tc,) = whole.choices[0].message.tool_calls
    assert tc.function.name == "add" and json.loads(tc.function.arguments) == {"a": 17, "b": 25}
    assert whole.choices[0].finish_reason == "tool_calls"
    parts = list(c.chat.completions.create(model="specguard", messages=USER, tools=[ADD],
                                           stream=True))  # fmt: skip
    deltas = [d for p in parts for d in (p.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "add" and deltas[0].id
    assert json.loads("".join(d.function.arguments for d in deltas)) == {"a": 17, "b": 25}
    assert parts[-1].model_extra["specguard"]["accepted"] is True


@pytest.mark.parametrize("streaming", [False, True])
def test_chatopenai_drives_an_agent_through_the_server(server, streaming):
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    url, _ = server
    llm = ChatOpenAI(base_url=url, api_key=KEY, model="specguard", streaming=streaming,
                     max_retries=0)  # fmt: skip
    agent = create_agent(llm, tools=[add])
    out = agent.invoke({"messages": [HumanMessage("What is 17 + 25?")]})
    assert out["messages"][-1].content == "The answer is 42.0."


def post(url: str, body, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}/chat/completions", content=raw, headers=headers, timeout=60)


@pytest.mark.parametrize("body, param", [
    (b"{not json", None),
    ({"model": "target"}, "messages"),
    ({"model": "target", "messages": []}, "messages"),
    ({"model": "nope", "messages": USER}, "model"),
    ({"model": "target", "messages": USER, "tools": [{"type": "retrieval"}]}, "tools.0.type"),
    ({"model": "target", "messages": USER, "tools": [ADD],
      "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "tool_choice"),
    ({"model": "target", "messages": [{"role": "user", "content": "word " * 800}]}, "messages"),
    ({"model": "target", "messages": [{"role": "tool", "content": "1"}]},
     "messages.0.tool_call_id"),
])  # fmt: skip
def test_a_bad_request_is_a_400_naming_the_field_and_the_server_goes_on(server, body, param):
    url, _ = server
    r = post(url, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert post(url, {"model": "target", "messages": USER}).status_code == 200


def test_unknown_fields_are_ignored_and_a_key_is_required(server):
    url, _ = server
    extra = {"model": "target", "messages": USER, "temperature": 0.2, "user": "x", "seed": 3,
             "frobnicate": {"a": 1}}  # fmt: skip
    assert post(url, extra).status_code == 200
    assert post(url, extra, key=None).status_code == 401
    assert post(url, extra, key="wrong").status_code == 401


def test_eight_concurrent_clients_get_the_answers_they_get_one_at_a_time(server):
    url, _ = server
    asks = [[{"role": "user", "content": f"Question number {i}?"}] for i in range(8)]
    c = client(url)
    alone = [c.chat.completions.create(model="target", messages=m).choices[0].message.content
             for m in asks]  # fmt: skip
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(
            lambda m: c.chat.completions.create(model="target", messages=m)
            .choices[0].message.content, asks))  # fmt: skip
    assert together == alone


def test_a_client_that_leaves_mid_stream_frees_the_model(server):
    url, models = server
    served = models["long"]
    forwards = []
    hook = served.model.lm.model.register_forward_hook(lambda *a: forwards.append(1))
    try:
        whole = post(url, {"model": "long", "messages": USER}).json()
        assert whole["choices"][0]["finish_reason"] == "length"  # it writes all 300 tokens
        full, forwards[:] = len(forwards), []
        body = {"model": "long", "messages": USER, "stream": True}
        with httpx.stream("POST", f"{url}/chat/completions", json=body,
                          headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as r:  # fmt: skip
            for line in r.iter_lines():
                if line.startswith("data:"):
                    break  # one chunk read, then the client goes
        deadline = time.time() + 30
        while served.lock.locked() and time.time() < deadline:
            time.sleep(0.01)
        assert not served.lock.locked()
        assert len(forwards) < full / 2  # it stopped, not wrote the message out
        engine_lock = served.model.lm.lock  # the generation was unwound, not left holding it
        assert engine_lock.acquire(timeout=5)
        engine_lock.release()
    finally:
        hook.remove()
    assert post(url, {"model": "target", "messages": USER}).status_code == 200


def test_a_call_opened_before_its_name_is_sent_with_its_id_and_name_together():
    from langchain_core.messages import AIMessageChunk

    from specguard_graph.serve.schema import Reply

    def piece(**c):
        blank = {"name": None, "id": None, "args": "", "index": 0, "type": "tool_call_chunk"}
        return AIMessageChunk(content="", tool_call_chunks=[blank | c])

    reply = Reply("target")
    opened = reply.chunk(piece(id="call_1"), True)["choices"][0]["delta"]
    assert opened == {"role": "assistant"}  # held: OpenAI's first call delta names the tool
    named = reply.chunk(piece(name="add"), False)["choices"][0]["delta"]["tool_calls"]
    assert named == [{"index": 0, "id": "call_1", "type": "function",
                      "function": {"name": "add", "arguments": ""}}]  # fmt: skip
    args = reply.chunk(piece(args='{"a": 1}'), False)["choices"][0]["delta"]["tool_calls"]
    assert args == [{"index": 0, "function": {"arguments": '{"a": 1}'}}]
