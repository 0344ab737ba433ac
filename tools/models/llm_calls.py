"""Calling a language model: one helper and one error policy for every agent.

PlugIR's questioner, filter, reformulator and simulated user, the Vision Search Assistant's planner,
searcher and answerer, VisRet's reader and judge, and VisRet's and NEEDLE's prompt rewriting all call
their chat model through this module, so they share one policy:

- **A failed call is reported, never hidden.** A wrong API key, an unreachable endpoint, an unknown
  model, an exhausted quota, a timeout or a local model that cannot load raises
  :class:`ModelCallError`: one line naming the model, the endpoint, what went wrong and what to check.
  An empty reply standing in for a failure would only make every later step quietly worse (a fallback
  question asked, an unfiltered query, a search for the raw text).
- **Only a reply that arrived but cannot be used falls back** (no question in it, no JSON plan): the
  caller does what it did without a model and says so with :func:`note_fallback`, once per kind of
  reply per process, not once per round.

Sampling settings (temperature, top_p, max_tokens, stop) are passed per call, LangChain style, and are
honoured by ``ChatOpenAI`` and :class:`pictrieve.tools.models.chat_models.LocalChatModel` alike.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from langchain_core.messages import BaseMessage, HumanMessage

from pictrieve.errors import PictrieveError, causes

logger = logging.getLogger(__name__)


class ModelCallError(PictrieveError, RuntimeError):
    """A chat model could not be called; the message names the model, the endpoint and what to check.

    ``reason`` is one of ``auth``, ``permission``, ``not_found``, ``connection``, ``timeout``,
    ``rate_limit``, ``rejected``, ``server``, ``load`` or ``failed``.
    """

    def __init__(self, problem: str, *, model: str = "", endpoint: str = "", reason: str = "failed",
                 fix: str | None = None) -> None:
        super().__init__(problem, fix=fix)
        self.model, self.endpoint, self.reason = model, endpoint, reason


# (reason, langchain-core class, class names of provider SDKs that predate it, HTTP status, what it means, what to do)
_REASONS: tuple[tuple[str, str, tuple[str, ...], int | None, str, str], ...] = (
    ("auth", "ModelAuthenticationError", ("AuthenticationError",), 401,
     "the endpoint refused the API key", "check the key (OPENAI_API_KEY for openai: models)"),
    ("permission", "ModelPermissionDeniedError", ("PermissionDeniedError",), 403,
     "the API key may not use this model", "check the model name and what the key is allowed to use"),
    ("not_found", "ModelNotFoundError", ("NotFoundError",), 404,
     "no such model there (or a wrong URL)",
     "check the model name and the base URL (OpenAI-compatible servers usually end in /v1)"),
    ("rate_limit", "ModelRateLimitError", ("RateLimitError",), 429,
     "rate limited or out of quota", "wait a minute, or check the account's quota"),
    ("timeout", "ModelTimeoutError", ("APITimeoutError", "TimeoutException", "TimeoutError", "Timeout"), None,
     "no answer in time", "check that the server is up and not overloaded, then try again"),
    ("connection", "ModelConnectionError", ("APIConnectionError", "ConnectError", "ConnectionError"), None,
     "could not connect", "check that the server is running and the base URL"),
    ("rejected", "ModelInvalidRequestError", ("BadRequestError", "UnprocessableEntityError"), 400,
     "the endpoint rejected the request", "check the model name and its settings"),
    ("server", "ModelAPIError", ("InternalServerError",), 500,
     "the endpoint failed", "try again later"),
)


def describe_model(llm: Any) -> tuple[str, str]:
    """``(model name, endpoint)`` of a chat model, for messages (``bind``/``with_*`` wrappers unwrapped)."""
    while hasattr(llm, "bound") and not hasattr(llm, "model_name"):
        llm = llm.bound
    name = getattr(llm, "model_name", None) or getattr(llm, "model", None) or type(llm).__name__
    endpoint = None
    for attribute in ("openai_api_base", "base_url", "api_base", "anthropic_api_url", "endpoint"):
        endpoint = endpoint or getattr(llm, attribute, None)
    if endpoint is None and hasattr(llm, "root_client"):
        endpoint = str(getattr(llm.root_client, "base_url", "") or "") or None
    if endpoint is None:
        from pictrieve.tools.models.chat_models import LocalChatModel

        endpoint = "this machine (transformers)" if isinstance(llm, LocalChatModel) else "its provider's default endpoint"
    return str(name), str(endpoint)


def _reason_of(exc: BaseException) -> tuple[str, str, str]:
    """``(reason, what it means, what to do)`` for a failed call."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    status = getattr(exc, "status_code", None)
    for reason, core_name, sdk_names, code, meaning, advice in _REASONS:
        if core_name in names or names & set(sdk_names) or (code is not None and status == code):
            return reason, meaning, advice
    if isinstance(status, int) and status >= 500:
        return "server", "the endpoint failed", "try again later"
    if isinstance(exc, (OSError, ImportError)) and not isinstance(exc, ConnectionError):
        return "load", "the model could not be loaded", (
            "check the checkpoint folder or hub id (`pictrieve fetch-models` fetches the offline model)")
    return "failed", "the call failed", "run with -vv for the details"


def _detail(exc: BaseException) -> str:
    """The provider's own words, on one line and short (``Error code: 401 - {...}`` trimmed to the message)."""
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    text = str(message or getattr(exc, "message", None) or exc or type(exc).__name__)
    root = list(causes(exc))[-1]
    if getattr(exc, "status_code", None) is None and root is not exc and str(root) not in text:
        text = f"{text} {root}"  # "Connection error." says less than its cause, "Connection refused"
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def model_call_error(llm: Any, exc: BaseException) -> ModelCallError:
    """The one-line :class:`ModelCallError` for ``exc``, raised while calling ``llm``."""
    name, endpoint = describe_model(llm)
    reason, meaning, advice = _reason_of(exc)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        # The endpoint's own words stay in the log: its reply may carry what a caller of a server must not
        # read (OpenAI's 401 quotes the start and end of the key), and the status says what happened.
        logger.debug("chat model %r at %s answered HTTP %s: %s", name, endpoint, status, _detail(exc))
        said = f"HTTP {status}"
    else:
        said = _detail(exc)  # a local failure (refused connection, time-out, missing files): no remote text
    return ModelCallError(f"chat model {name!r} at {endpoint}: {meaning} ({said})",
                          model=name, endpoint=endpoint, reason=reason, fix=advice)


def is_model_call_failure(exc: BaseException) -> bool:
    """True for an error that means the model cannot be called now (as opposed to a bad reply or a
    request the model does not support, which a caller may answer with a fallback)."""
    reason = exc.reason if isinstance(exc, ModelCallError) else _reason_of(exc)[0]
    return reason not in ("rejected", "failed")


ENDPOINT_CHECK_S = 5.0
"""How long :func:`check_endpoint` waits for a named endpoint's answer, all in all."""


def check_endpoint(name: str | None, base_url: str | None = None, *, option: str = "--llm",
                   base_option: str = "--base-url", timeout: float = ENDPOINT_CHECK_S) -> None:
    """Check with one cheap call that the endpoint of a named OpenAI-compatible model answers and takes the key.

    A command that is given ``--llm openai:MODEL`` spends its first half minute on local work (loading models,
    describing photos) before it calls the model: a dead server or a wrong key was reported only then. This asks
    ``GET {base_url}/models`` (which OpenAI, vLLM, llama.cpp, Ollama and LM Studio answer; no tokens spent) with
    the key the model will use, and waits at most ``timeout`` seconds in all. A refused connection, no answer,
    HTTP 401/403/404/5xx each raise :class:`ModelCallError` with one line naming ``option`` and what to do; the
    endpoint's reply is never quoted (a 401 body may carry part of the key). A model the endpoint does not list
    is only logged (a llama.cpp server answers under any name). Names of local models (``offline``,
    ``local:DIR``) and other providers are not checked (nothing to call, or no common cheap call).
    Blocking: a server calls it before its event loop starts, or in a worker thread.
    """
    provider, _, model = (name or "").strip().partition(":")
    if provider != "openai" or not model:
        return
    import os

    base = (base_url or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
            or "https://api.openai.com/v1").rstrip("/")
    key = os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else "")
    shown = _without_credentials(base)
    answer: dict[str, Any] = {}

    def ask() -> None:
        import httpx

        try:
            with httpx.Client(timeout=timeout, follow_redirects=False) as client:
                reply = client.get(f"{base}/models", headers={"Authorization": f"Bearer {key}"} if key else {})
                answer["status"] = reply.status_code
                answer["models"] = _listed_models(reply) if reply.status_code == 200 else None
        except Exception as exc:  # noqa: BLE001 - every failure to get an answer is reported below
            answer["error"] = exc

    worker = threading.Thread(target=ask, name="endpoint-check", daemon=True)
    worker.start()
    worker.join(timeout)  # in all: an endpoint that accepts and then trickles bytes cannot hold the command

    def failed(reason: str, problem: str, fix: str) -> ModelCallError:
        return ModelCallError(f"{option} model {model!r} at {shown}: {problem}", model=model, endpoint=shown,
                              reason=reason, fix=fix)

    error = answer.get("error")
    if worker.is_alive() or _is_timeout(error):
        raise failed("timeout", f"no answer within {timeout:g} s",
                     f"check that the server is up and not overloaded, and {base_option}")
    if error is not None:
        logger.debug("endpoint check of %s failed", shown, exc_info=error)
        raise failed("connection", f"could not connect ({type(error).__name__})",
                     f"check that the server is running and {base_option} (OpenAI-compatible servers usually end "
                     "in /v1)")
    status = int(answer["status"])
    if status == 200:
        listed = answer.get("models")
        if listed and model not in listed:
            logger.warning("%s %s: the endpoint %s does not list model %r; going on (some servers answer under any "
                           "name)", option, name, shown, model)
        return
    for reason, _core, _sdk, code, meaning, advice in _REASONS:
        if code == status or (code == 500 and status >= 500):
            raise failed(reason, f"{meaning} (HTTP {status})", advice.replace("the base URL", base_option))
    raise failed("failed", f"the endpoint answered HTTP {status}", f"check {base_option} and the server")


def _is_timeout(error: BaseException | None) -> bool:
    return error is not None and any("Timeout" in cls.__name__ for cls in type(error).__mro__)


def _listed_models(reply: Any) -> set[str] | None:
    """The model ids an OpenAI-style ``/models`` reply lists (``None`` when it is not one)."""
    try:
        rows = reply.json().get("data")
        return {str(row["id"]) for row in rows if isinstance(row, dict) and "id" in row}
    except Exception:  # noqa: BLE001 - not the usual JSON: nothing to compare with
        return None


def _without_credentials(url: str) -> str:
    """``url`` without a ``user:password@`` part (a message never shows a secret)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


@contextmanager
def calling(llm: Any) -> Iterator[None]:
    """Turn any failure of the calls to ``llm`` inside the block into a :class:`ModelCallError`.

    pictrieve's own errors (already one clear line, e.g. a text-only model given an image) pass
    through unchanged, so callers can still catch them.
    """
    try:
        yield
    except PictrieveError:
        raise
    except Exception as exc:  # noqa: BLE001 - every other failure is reported as one line
        raise model_call_error(llm, exc) from exc


def message_text(message: Any) -> str:
    """The plain text of a chat-model reply (string, content blocks, or anything else)."""
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content or "")


def complete(llm: Any, messages: str | Sequence[BaseMessage], **params: Any) -> str:
    """The text of one reply to ``messages`` (a string is one user turn); :class:`ModelCallError` on failure."""
    conversation = [HumanMessage(content=messages)] if isinstance(messages, str) else list(messages)
    with calling(llm):
        return message_text(llm.invoke(conversation, **params)).strip()


def complete_batch(llm: Any, conversations: Sequence[Sequence[BaseMessage]], **params: Any) -> list[str]:
    """One reply per conversation, in one ``batch`` call; :class:`ModelCallError` if any call failed."""
    if not conversations:
        return []
    with calling(llm):
        replies = llm.batch([list(c) for c in conversations], return_exceptions=True, **params)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return [message_text(reply).strip() for reply in replies]


def sample_replies(llm: Any, messages: Sequence[BaseMessage], n: int, **params: Any) -> list[str]:
    """``n`` sampled replies to one prompt.

    Asks for all ``n`` in one request (OpenAI's and the local model's ``n``), and tops up with a
    batch of single calls for models that return fewer generations or refuse ``n``. A failure to
    reach the model is raised at once (not retried one call at a time).
    """
    texts: list[str] = []
    if n > 1:
        try:
            result = llm.generate([list(messages)], n=n, **params)
            texts = [g.text.strip() for g in result.generations[0]][:n]
        except PictrieveError:
            raise
        except Exception as exc:  # noqa: BLE001 - some providers reject `n`; sample one at a time below
            if is_model_call_failure(exc):
                raise model_call_error(llm, exc) from exc
            logger.debug("model rejected n=%d; sampling one at a time", n, exc_info=True)
            texts = []
    missing = n - len(texts)
    if missing > 0:
        texts += complete_batch(llm, [messages] * missing, **params)
    return texts


_NOTED: set[str] = set()
_NOTED_LOCK = threading.Lock()


def note_fallback(log: logging.Logger, what: str, detail: str = "") -> None:
    """Log that an unusable reply was replaced by a fallback: a warning the first time ``what`` happens
    in this process, debug lines after that (a small model's unusable replies are routine)."""
    with _NOTED_LOCK:
        first = what not in _NOTED
        _NOTED.add(what)
    if first:
        log.warning("%s%s (said once; -vv shows every case)", what, f": {detail}" if detail else "")
    else:
        log.debug("%s%s", what, f": {detail}" if detail else "")
