"""Chat models for pictrieve graphs: one factory from a name to a LangChain ``BaseChatModel``.

Every graph talks to a ``langchain_core`` chat model, so a user can plug in any provider. This module
adds the offline default, a local transformers model (SmolLM2-135M-Instruct unless told otherwise)
wrapped as a proper ``BaseChatModel``, and :func:`create_chat_model`, which maps a name to a model:

- ``"offline"`` / ``"smollm2-135m-instruct"`` / a local checkpoint directory / ``"local:<name>"``:
  :class:`LocalChatModel` on :func:`pictrieve.tools.causal_lm.shared_causal_lm`;
- ``"openai:<model>"``: ``langchain_openai.ChatOpenAI`` against the OpenAI API or any
  OpenAI-compatible server (``base_url``, e.g. vLLM, llama.cpp, Ollama);
- a ``BaseChatModel`` instance: returned as is.

Sampling settings are per call, the LangChain way: ``model.bind(temperature=0.7, top_p=0.8,
max_tokens=32)`` or ``model.invoke(messages, temperature=0.0, max_tokens=10, stop=[...])``; both
the local model and ``ChatOpenAI`` honour the same keyword names. The local model also accepts
``n`` (several samples of one prompt in one batched ``generate``; they come back as several
generations, as with OpenAI's ``n``) and batches ``batch()`` calls into one padded forward pass,
because one-at-a-time generation dominates the cost of an interactive round on a CPU.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from pydantic import ConfigDict, Field, PrivateAttr

from pictrieve.errors import PictrieveError
from pictrieve.tools.causal_lm import OFFLINE_DEFAULT_LM

logger = logging.getLogger(__name__)

OFFLINE_CHAT_MODEL = "offline"
_OFFLINE_ALIASES = {OFFLINE_CHAT_MODEL, OFFLINE_DEFAULT_LM, "smollm2", "default"}
_ROLE_NAMES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


class UnknownChatModelError(PictrieveError, ValueError):
    """The chat-model name names nothing :func:`create_chat_model` can build."""


class LocalChatModel(BaseChatModel):
    """A local transformers causal LM (chat template) as a LangChain chat model.

    ``temperature == 0`` means greedy decoding; otherwise nucleus sampling with ``top_p``.
    Generation stops at the end-of-turn token, at ``max_tokens`` new tokens, or at the first
    ``stop`` string (the text is cut before it, as OpenAI does).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_name: str = Field(default=OFFLINE_DEFAULT_LM)
    """A name or checkpoint directory for :func:`pictrieve.tools.causal_lm.shared_causal_lm`."""
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    stop: list[str] | None = None
    device: str | None = None

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "pictrieve-local-transformers"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "temperature": self.temperature,
                "top_p": self.top_p, "max_tokens": self.max_tokens}

    # -- LangChain entry points -------------------------------------------------------------
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        n = int(kwargs.pop("n", 1) or 1)
        texts = self._complete([messages] * n, stop=stop, **kwargs)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=t)) for t in texts])

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[AIMessage]:
        """Generate for several prompts in one padded forward pass (no per-item callbacks)."""
        if not inputs:
            return []
        try:
            conversations = [self._convert_input(item).to_messages() for item in inputs]
            stop = kwargs.pop("stop", None)
            texts = self._complete(conversations, stop=stop, **kwargs)
        except Exception as exc:  # same contract as Runnable.batch
            if return_exceptions:
                return [exc] * len(inputs)  # type: ignore[list-item]
            raise
        return [AIMessage(content=t) for t in texts]

    # -- generation ------------------------------------------------------------------------
    def _complete(self, conversations: Sequence[list[BaseMessage]], *, stop: list[str] | None = None,
                  **kwargs: Any) -> list[str]:
        import torch

        from pictrieve.tools.causal_lm import shared_causal_lm

        temperature = float(kwargs.get("temperature", self.temperature) or 0.0)
        top_p = float(kwargs.get("top_p", self.top_p) or 1.0)
        max_tokens = int(kwargs.get("max_tokens", kwargs.get("max_new_tokens", self.max_tokens)))
        stops = [s for s in (stop or kwargs.get("stop") or self.stop or []) if s]

        model, tokenizer = shared_causal_lm(self.model_name, self.device)
        prompts = [
            tokenizer.apply_chat_template(_to_chat_dicts(conv), add_generation_prompt=True,
                                          tokenize=False)
            for conv in conversations
        ]
        with self._lock:  # one generate at a time on the shared model
            padding_side = tokenizer.padding_side
            tokenizer.padding_side = "left"  # decoder-only batches pad on the left
            try:
                encoded = tokenizer(prompts, return_tensors="pt", padding=True,
                                    add_special_tokens=False).to(model.device)
            finally:
                tokenizer.padding_side = padding_side
            sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} \
                if temperature > 0 else {"do_sample": False}
            if stops:  # end each sequence early at a stop string (it is cut off below)
                sampling.update(stop_strings=stops, tokenizer=tokenizer)
            with torch.inference_mode():
                output = model.generate(**encoded, max_new_tokens=max_tokens,
                                        pad_token_id=tokenizer.pad_token_id, **sampling)
        new_tokens = output[:, encoded["input_ids"].shape[1]:]
        texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return [_cut_at_stop(t, stops).strip() for t in texts]


def _to_chat_dicts(messages: list[BaseMessage]) -> list[dict[str, str]]:
    out = []
    for message in messages:
        role = _ROLE_NAMES.get(message.type, "user")
        content = message.content if isinstance(message.content, str) else message.text
        out.append({"role": role, "content": content})
    return out


def _cut_at_stop(text: str, stops: list[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


def create_chat_model(name: str | BaseChatModel | None = None, base_url: str | None = None,
                      **kwargs: Any) -> BaseChatModel:
    """Build a chat model from ``name`` (see the module docstring); ``kwargs`` go to its constructor.

    ``base_url`` points ``openai:`` models at any OpenAI-compatible endpoint; the API key comes
    from ``OPENAI_API_KEY`` (or ``api_key=``), and a placeholder is used for local servers that
    need none.
    """
    if isinstance(name, BaseChatModel):
        return name
    name = (name or OFFLINE_CHAT_MODEL).strip()
    family, sep, spec = name.partition(":")
    if name.lower() in _OFFLINE_ALIASES:
        return LocalChatModel(model_name=OFFLINE_DEFAULT_LM, **kwargs)
    if sep and family == "local":
        return LocalChatModel(model_name=spec or OFFLINE_DEFAULT_LM, **kwargs)
    if sep and family == "openai":
        try:
            from langchain_openai import ChatOpenAI
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise UnknownChatModelError("openai: models need `pip install langchain-openai`") from exc
        import os

        if base_url and "api_key" not in kwargs and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = "not-needed"  # local OpenAI-compatible servers ignore it
        return ChatOpenAI(model=spec, base_url=base_url, **kwargs)
    from pathlib import Path

    if Path(name).expanduser().is_dir():
        return LocalChatModel(model_name=str(Path(name).expanduser()), **kwargs)
    raise UnknownChatModelError(
        f"unknown chat model {name!r}: use 'offline' (SmolLM2-135M-Instruct, no network), "
        "'local:<checkpoint dir or HF id>', or 'openai:<model>' with --base-url for any "
        "OpenAI-compatible server"
    )
