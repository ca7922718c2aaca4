"""A LangChain chat model as the draft: k calls, log-probs from the response metadata."""

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.errors import ModelLoadError
from specguard_graph.models.chat import ChatStepModel

Q = {"question": "What is 2 + 3?"}


def reply(text, lps):
    meta = {"logprobs": {"content": [{"token": "t", "logprob": x} for x in lps]}}
    return AIMessage(content=text, response_metadata=meta)


def test_a_chat_model_drafts_steps_and_its_log_probs_decide(tiny):
    replies = iter([reply("2 + 3 = 5.", [-0.1, -0.2]), reply("2 + 3 = 5.", [-0.3, -0.1]),
                    reply("So the answer is \\boxed{5}.", [-9.0, -0.1]),
                    reply("The answer is \\boxed{5}.", [-8.0, -0.2])])  # fmt: skip
    draft = ChatStepModel(GenericFakeChatModel(messages=replies))
    cfg = SpecGuardConfig(k=2, beta=1.0, tau=0.5, max_steps=2, max_step_tokens=64)
    out = build_graph(draft, tiny.target, embedder=tiny.embedder, config=cfg).compile().invoke(Q)
    first, second = out["steps"]
    assert first["source"] == "draft" and first["text"] == "2 + 3 = 5."
    assert first["logprob"] == pytest.approx(-0.2)  # the selected candidate's least likely token
    assert second["source"] == "target"  # min log-prob -9 or -8: below τ after normalisation
    assert first["candidates"] == ["2 + 3 = 5.", "2 + 3 = 5."]


def test_a_chat_model_without_log_probs_is_refused(tiny):
    draft = ChatStepModel(GenericFakeChatModel(messages=iter([AIMessage(content="a step")])))
    cfg = SpecGuardConfig(k=1, beta=1.0, max_steps=1)
    with pytest.raises(ModelLoadError, match="no log-probs"):
        build_graph(draft, tiny.target, config=cfg).compile().invoke(Q)
