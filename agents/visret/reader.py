"""Visual RAG over retrieved images: a reader answers from them, a judge grades the answer (VisRet §4).

The reader gets the question and the top images. A chat model that takes image content (any
OpenAI-compatible VLM endpoint) sees the pictures themselves; a text-only model (the offline
SmolLM2) reads what is known about each picture instead: its stored captions, or descriptions made
by a captioner. It reasons first, then answers (``### Reasoning: ... ### Answer: ...``), trusting the
pictures over its memory when they disagree.

The judge follows the Visual-RAG grading rubric the paper uses (our wording): a score in [0, 1],
partial credit per key feature, -0.5 for a stated feature the reference does not support, 0 for "I
don't know". Deliberate differences from the authors' code: the judge runs at temperature 0 (their
calls used the API default, so grades varied between runs), scores are clamped to [0, 1], and image
parts carry ``detail`` (their code sent a ``quality`` field the API ignores).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pictrieve.vectorstore.hits import ImageHit

_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"
SCORE = re.compile(r"Score:\s*(-?[0-9]*\.?[0-9]+)")


def _prompt(name: str) -> str:
    return (_PROMPTS / name).read_text(encoding="utf-8")


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
    return [SystemMessage(_prompt("visret/reader.txt")), HumanMessage(content=content)]


def _data_url(path: str) -> str | None:
    from pictrieve.tools.vlm import image_data_url

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
    from pictrieve.tools.chat_models import UnsupportedContentError
    from pictrieve.tools.llm_calls import complete

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


def parse_score(reply: str) -> float:
    """The first ``Score: x`` in a judge's reply, clamped to [0, 1]; 0 when there is none."""
    match = SCORE.search(reply or "")
    return 0.0 if not match else min(1.0, max(0.0, float(match.group(1))))


def judge_answer(judge: Any, question: str, reference: str | Sequence[str], answer: str) -> tuple[float, str]:
    """``(score, the judge's reply)`` for ``answer`` against ``reference`` (a list: any item counts)."""
    from pictrieve.tools.llm_calls import complete

    if not isinstance(reference, str):
        reference = ", or ".join(reference)  # the authors' join lacked the space after "or"
    prompt = _prompt("visret_judge.txt").format(question=question, reference=reference, answer=answer)
    bound = judge.bind(temperature=0) if hasattr(judge, "bind") else judge
    reply = complete(bound, prompt)
    return parse_score(reply), reply
