"""The chat-model factory and the local transformers chat model."""

from pathlib import Path

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from pictrieve.tools.chat_models import (
    LocalChatModel,
    UnknownChatModelError,
    _cut_at_stop,
    _to_chat_dicts,
    create_chat_model,
)


def test_factory_names():
    offline = create_chat_model("offline", temperature=0.0)
    assert isinstance(offline, LocalChatModel) and offline.temperature == 0.0
    assert isinstance(create_chat_model("smollm2-135m-instruct"), LocalChatModel)
    assert create_chat_model("local:/some/dir").model_name == "/some/dir"
    fake = GenericFakeChatModel(messages=iter([AIMessage(content="hi")]))
    assert create_chat_model(fake) is fake
    with pytest.raises(UnknownChatModelError, match="openai:"):
        create_chat_model("no-such-model")


def test_openai_models_point_at_any_compatible_server(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat = create_chat_model("openai:gpt-4o-mini", base_url="http://localhost:8000/v1")
    assert isinstance(chat, BaseChatModel)
    assert chat.model_name == "gpt-4o-mini" and chat.openai_api_base == "http://localhost:8000/v1"


def test_message_conversion_and_stop_strings():
    chat = _to_chat_dicts([SystemMessage("s"), HumanMessage("u"), AIMessage("a")])
    assert [m["role"] for m in chat] == ["system", "user", "assistant"]
    assert _cut_at_stop("a dog. more\nnext", [".", "\n"]) == "a dog"
    assert _cut_at_stop("no stop here", ["?"]) == "no stop here"


def _offline_model_available() -> bool:
    try:
        from pictrieve.tools.causal_lm import resolve_checkpoint

        return Path(resolve_checkpoint("smollm2-135m-instruct")).is_dir()
    except Exception:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _offline_model_available(), reason="offline SmolLM2 model not available")
def test_local_model_honours_per_call_settings():
    chat = create_chat_model("offline")
    greedy = chat.bind(temperature=0.0, max_tokens=8)
    first = greedy.invoke("List three colors.").content
    assert first == greedy.invoke("List three colors.").content  # temperature 0 is greedy
    assert len(first.split()) <= 8
    assert "," not in chat.invoke("List three colors, separated by commas.", temperature=0.0,
                                  max_tokens=20, stop=[","]).content
    result = chat.generate([[HumanMessage("Ask me a question.")]], n=3, temperature=0.7,
                           top_p=0.8, max_tokens=12)
    assert len(result.generations[0]) == 3
    replies = chat.batch(["Say yes.", "Say no."], temperature=0.0, max_tokens=4)
    assert len(replies) == 2 and all(isinstance(r, AIMessage) for r in replies)
