"""Small, failure-tolerant wrappers around chat-model calls used by the PlugIR agents.

An interactive session must never die because a language model misbehaved (a timeout, a refusal,
empty text), so every call here returns text and logs the failure instead of raising.
Sampling settings (temperature, top_p, max_tokens) are passed per call, LangChain style, and are
honoured by ``ChatOpenAI`` and :class:`pictrieve.tools.chat_models.LocalChatModel` alike.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import BaseMessage

logger = logging.getLogger(__name__)


def message_text(message: Any) -> str:
    """The plain text of a chat-model reply (string, content blocks, or anything else)."""
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content or "")


def complete(llm: BaseChatModel, messages: Sequence[BaseMessage], **params: Any) -> str:
    """One reply's text, or ``""`` when the call fails."""
    try:
        return message_text(llm.invoke(list(messages), **params)).strip()
    except Exception:  # noqa: BLE001 - a model failure must not end the session
        logger.exception("chat model call failed; continuing with an empty reply")
        return ""


def complete_batch(llm: BaseChatModel, conversations: Sequence[Sequence[BaseMessage]],
                   **params: Any) -> list[str]:
    """One reply per conversation (``""`` for any that failed)."""
    if not conversations:
        return []
    try:
        replies = llm.batch([list(c) for c in conversations], return_exceptions=True, **params)
    except Exception:  # noqa: BLE001
        logger.exception("batched chat model call failed; continuing with empty replies")
        return [""] * len(conversations)
    texts = []
    for reply in replies:
        if isinstance(reply, Exception):
            logger.warning("chat model call failed: %s", reply)
            texts.append("")
        else:
            texts.append(message_text(reply).strip())
    return texts


def sample_replies(llm: BaseChatModel, messages: Sequence[BaseMessage], n: int,
                   **params: Any) -> list[str]:
    """``n`` sampled replies to one prompt.

    Asks for all ``n`` in one request (OpenAI's and the local model's ``n``), and tops up with
    a batch of single calls for models that return fewer generations.
    """
    texts: list[str] = []
    if n > 1:
        try:
            result = llm.generate([list(messages)], n=n, **params)
            texts = [g.text.strip() for g in result.generations[0]][:n]
        except Exception:  # noqa: BLE001 - some providers reject `n`; fall back below
            logger.debug("model rejected n=%d; sampling one at a time", n, exc_info=True)
            texts = []
    missing = n - len(texts)
    if missing > 0:
        texts += complete_batch(llm, [messages] * missing, **params)
    return texts
