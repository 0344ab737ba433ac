"""Visual RAG over retrieved images: a reader answers from them, a judge grades the answer (VisRet §4).

The reader gets the question and the top images. A chat model that takes image content (any
OpenAI-compatible VLM endpoint) sees the pictures themselves; a text-only model (the offline
SmolLM2) reads what is known about each picture instead: its stored captions, or descriptions made
by a captioner. It reasons first, then answers (``### Reasoning: ... ### Answer: ...``), trusting the
pictures over its memory when they disagree.

The judge is :mod:`pictrieve.agents.judge` with the Visual-RAG grading rubric the paper uses
(``judge_answer`` and ``parse_score`` are re-exported here). Deliberate difference from the authors'
code: image parts carry ``detail`` (their code sent a ``quality`` field the API ignores).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from pictrieve import prompts
from pictrieve.agents.judge import SCORE, judge_answer, parse_score  # noqa: F401  (the judge: re-exported)
from pictrieve.vectorstore.hits import ImageHit

def parse_answer(reply: str) -> tuple[str, str]:
    """``(reasoning, answer)`` from a ``### Reasoning: ... ### Answer: ...`` reply (the whole reply
    is the answer when the model ignored the format)."""
    text = reply.replace("**", "")
    match = re.search(r"###\s*Answer:\s*(.*)", text, flags=re.S)
    if not match:
        return "", text.strip()
    reasoning = re.search(r"###\s*Reasoning:\s*(.*?)###\s*Answer:", text, flags=re.S)
    return (reasoning.group(1).strip() if reasoning else ""), match.group(1).strip()


def describe_hits(hits: Sequence[ImageHit], captioner: Callable[[list[str]], list[str]] | None = None) -> list[str]:
    """What a text-only reader knows of each image: its stored captions, else a captioner's words."""
    missing = [hit.path for hit in hits if not hit.captions]
    made = dict(zip(missing, captioner(missing))) if (captioner and missing) else {}
    return ["; ".join(hit.captions[:3]) if hit.captions else made.get(hit.path, "(no description available)")
            for hit in hits]


def reader_messages(question: str, hits: Sequence[ImageHit], *, images: bool,
                    descriptions: Sequence[str] | None = None) -> list[Any]:
    """The reader's messages: instructions, then the question and each image (or its description)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    parts: list[dict[str, Any]] = [{"type": "text", "text": f"{question}\nRetrieved pictures:"}]
    for number, hit in enumerate(hits, start=1):
        picture = _data_url(hit.path) if images else None
        if picture:
            parts.append({"type": "text", "text": f"Picture {number}:"})
            parts.append({"type": "image_url", "image_url": {"url": picture, "detail": "high"}})
        else:
            described = descriptions[number - 1] if descriptions else hit.caption or "(no description available)"
            if images:  # a file that cannot be read (moved since indexing): its caption stands in
                described = f"(picture unreadable) {described}"
            parts.append({"type": "text", "text": f"Picture {number}: {described}"})
    content: Any = parts if images else "\n".join(part["text"] for part in parts)
    return [SystemMessage(prompts.text("visret", "reader")), HumanMessage(content=content)]


def _data_url(path: str) -> str | None:
    from pictrieve.tools.models.vlm import image_data_url

    try:
        return image_data_url(path)
    except (OSError, ValueError):
        return None


def read_images(question: str, hits: Sequence[ImageHit], reader: Any, *, images: bool | None = None,
                captioner: Callable[[list[str]], list[str]] | None = None) -> dict[str, Any]:
    """Answer ``question`` from ``hits`` with the chat model ``reader``.

    ``images``: send the pictures (``None``: try, and fall back to descriptions when the model
    refuses image content). Returns ``{"answer", "reasoning", "read_images"}``.
    """
    from pictrieve.tools.models.chat_models import UnsupportedContentError
    from pictrieve.tools.models.llm_calls import complete

    if images is not False:
        try:
            reasoning, answer = parse_answer(complete(reader, reader_messages(question, hits, images=True)))
            return {"answer": answer, "reasoning": reasoning, "read_images": True}
        except UnsupportedContentError:
            if images:
                raise
    descriptions = describe_hits(hits, captioner)
    reasoning, answer = parse_answer(complete(reader, reader_messages(question, hits, images=False,
                                                                      descriptions=descriptions)))
    return {"answer": answer, "reasoning": reasoning, "read_images": False}


def answer_from_gallery(gallery: Any, question: str, reader: Any, *, k: int = 3, images: bool | None = None,
                        captioner: Callable[[list[str]], list[str]] | None = None) -> dict[str, Any]:
    """Visual RAG over a gallery: the ``k`` photos that best match ``question`` (text search), and the
    reader's answer from them. Returns ``{"answer", "reasoning", "read_images", "hits"}``."""
    hits = gallery.search_text(question, k=k)
    return {**read_images(question, hits, reader, images=images, captioner=captioner), "hits": hits}
