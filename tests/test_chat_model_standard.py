"""LangChain's own standard suites for chat models (langchain-tests), run against LocalChatModel as
partner packages run them against theirs.

On the tiny random chat checkpoint of ``test_chat_models`` (no download, every CI run) and, marked
``slow``, on the real offline SmolLM2 when it is already on this machine (``pictrieve fetch-models``).
Only what the model cannot do is switched off, through the suites' documented properties: it calls no
tools and has no structured output (text in, text out) and reads no images, PDFs or audio (it refuses
them with ``UnsupportedContentError``). Everything else runs unchanged, streaming and usage included.
"""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from pictrieve.tools.models.causal_lm import OFFLINE_DEFAULT_LM
from pictrieve.tools.models.chat_models import LocalChatModel
from helpers.qc2_fakes import one_thread  # noqa: F401  (autouse: one torch thread)
from helpers.chat_checkpoints import private_cache, tiny_chat_checkpoint  # noqa: F401  (fixtures)


class _TextOnlyLocalModel:
    """What the suites need to know about LocalChatModel (mixed into each suite below)."""

    checkpoint: str

    @property
    def chat_model_class(self) -> type[LocalChatModel]:
        return LocalChatModel

    @property
    def has_tool_calling(self) -> bool:
        return False  # a plain causal LM: no tool-call format

    @property
    def has_structured_output(self) -> bool:
        return False

    @property
    def supports_image_inputs(self) -> bool:
        return False  # text only: image blocks are refused, never dropped


class _OnTinyCheckpoint(_TextOnlyLocalModel):
    @pytest.fixture(autouse=True)
    def _checkpoint(self, tiny_chat_checkpoint):  # noqa: F811
        self.checkpoint = tiny_chat_checkpoint


class TestLocalChatModelUnit(_OnTinyCheckpoint, ChatModelUnitTests):
    @property
    def chat_model_params(self) -> dict:
        return {"model_name": self.checkpoint, "device": "cpu"}  # the suite adds temperature, max_tokens, stop


class TestLocalChatModelIntegration(_OnTinyCheckpoint, ChatModelIntegrationTests):
    @property
    def chat_model_params(self) -> dict:
        return {"model_name": self.checkpoint, "device": "cpu", "temperature": 0.0, "max_tokens": 12}


@pytest.mark.slow
class TestOfflineChatModelIntegration(_TextOnlyLocalModel, ChatModelIntegrationTests):
    """The same suite on the real SmolLM2-135M-Instruct (skipped when it is not on this machine)."""

    @pytest.fixture(autouse=True)
    def _offline(self, offline_llm):
        self.checkpoint = OFFLINE_DEFAULT_LM  # offline_llm points this test's cache at the user's copy

    @property
    def chat_model_params(self) -> dict:
        return {"model_name": self.checkpoint, "temperature": 0.0, "max_tokens": 24}
