"""The embedded pair behind SpecGuardChatModel in a real LangChain agent (`create_agent`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage

from specguard_graph import SpecGuardChatModel, chat_config

pytestmark = pytest.mark.real
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import tool_agent  # noqa: E402


def test_a_drafted_call_is_schema_checked_and_runs(real_pair):
    draft, target, _ = real_pair
    model = SpecGuardChatModel(draft=draft, target=target, config=chat_config())
    msg = model.bind_tools(tool_agent.TOOLS).invoke("What is 17 times 25? Use a tool.")
    assert msg.tool_calls, msg.content
    call = msg.tool_calls[0]
    assert call["name"] == "multiply" and {call["args"]["a"], call["args"]["b"]} == {17, 25}
    assert msg.response_metadata["checked"] == "ok"
    assert msg.usage_metadata["input_tokens"] > 200  # the four tools are in the prompt


def test_the_tool_agent_computes_a_multi_step_task_on_the_embedded_pair(real_pair):
    """What the pair does: it looks both cities up and the add tool computes their sum, each
    message decided by SpecGuard. The run is bounded: a model that keeps calling ends in a
    GraphRecursionError (a repeated call now goes to the target, which may answer instead)."""
    from langgraph.errors import GraphRecursionError

    draft, target, _ = real_pair
    agent = tool_agent.build_agent(draft, target)
    task = "What is the combined population of Paris and Berlin? Look both up, then add them."
    results, sources = [], []
    try:
        for update in agent.stream({"messages": [("user", task)]}, stream_mode="updates",
                                   config={"recursion_limit": 10}):  # fmt: skip
            for message in next(iter(update.values()))["messages"]:
                if isinstance(message, ToolMessage):
                    results.append(message.content)
                else:
                    sources.append(message.response_metadata["source"])
    except GraphRecursionError:
        pass
    assert "2102650" in results and "3878100" in results  # both lookups ran in the ToolNode
    assert "5980750.0" in results  # and the add tool summed them
    assert set(sources) <= {"draft", "target"} and "draft" in sources


def test_the_readme_agent_quickstart_answers_as_written(real_pair, monkeypatch):
    """The README's agent example, run unchanged on the embedded pair: it returns the product
    (before the conversation checks it called multiply(17, 23) until the recursion limit)."""
    import re

    from langchain_core.messages import AIMessage

    from specguard_graph.models import loading

    draft, target, _ = real_pair  # loaded once for the session: the README's load_lm is these
    pair = {"draft": draft, "target": target}
    monkeypatch.setattr(loading, "load_lm", lambda role, *a, **k: pair[role])
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    assert "create_agent" in block and "recursion_limit" in block
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    last = namespace["out"]["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert "391" in last.content
