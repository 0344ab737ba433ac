"""Visual RAG over retrieved images: a reader answers from them, a judge grades the answer (VisRet §4).

The reader gets the question and the top images. A chat model that takes image content (any
OpenAI-compatible VLM endpoint) sees the pictures themselves; a text-only model (the offline
SmolLM2) reads what is known about each picture instead: its stored captions, or descriptions made
by a captioner. It reasons first, then answers (``### Reasoning: ... ### Answer: ...``), trusting the
pictures over its memory when they disagree.

A chat model whose words are not shown (:func:`pictrieve.agents.shown_text.may_show`: the offline SmolLM2-135M
wrote "The total on the receipt is 3." for a receipt reading 42.50) writes no answer here: the reader quotes
the photos' own words instead (:func:`quote_photo_words`: the stored captions and the text read in the photos
that answer the question), or says that nothing of them does and that a capable model writes an answer.

The judge is :mod:`pictrieve.agents.judge` with the Visual-RAG grading rubric the paper uses
(``judge_answer`` and ``parse_score`` are its own; this module only calls them). Deliberate difference from the authors'
code: image parts carry ``detail`` (their code sent a ``quality`` field the API ignores).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from pictrieve import prompts
from pictrieve.agents.answer_types import expected_answer, question_terms, stem, words_of
from pictrieve.agents.judge import judge_answer, parse_score
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
    """The gallery photo for the reader, read as the file that was indexed (a photo replaced by a link since is
    never sent to a model), or ``None`` when it cannot be read."""
    from pictrieve.tools.core.gallery_photos import load_gallery_image
    from pictrieve.tools.models.vlm import image_data_url

    try:
        return image_data_url(load_gallery_image(path))
    except (OSError, ValueError):  # gone, unreadable, no image, replaced by a link (ChangedPhotoError)
        return None


def read_images(question: str, hits: Sequence[ImageHit], reader: Any, *, images: bool | None = None,
                captioner: Callable[[list[str]], list[str]] | None = None) -> dict[str, Any]:
    """Answer ``question`` from ``hits`` with the chat model ``reader``.

    ``images``: send the pictures (``None``: try, and fall back to descriptions when the model
    refuses image content). Returns ``{"answer", "reasoning", "read_images", "answerer"}`` (``"llm"``, or
    ``"extractive"`` for a reader whose words are not shown: :func:`quote_photo_words`).
    """
    from pictrieve.agents.shown_text import may_show
    from pictrieve.tools.models.chat_models import UnsupportedContentError
    from pictrieve.tools.models.llm_calls import complete

    if not may_show(reader):  # its words would be shown as the answer: quote the photos' own instead
        return {**quote_photo_words(question, hits), "reasoning": "", "read_images": False}
    if images is not False:
        try:
            reasoning, answer = parse_answer(complete(reader, reader_messages(question, hits, images=True)))
            return {"answer": answer, "reasoning": reasoning, "read_images": True, "answerer": "llm"}
        except UnsupportedContentError:
            if images:
                raise
    descriptions = describe_hits(hits, captioner)
    reasoning, answer = parse_answer(complete(reader, reader_messages(question, hits, images=False,
                                                                      descriptions=descriptions)))
    return {"answer": answer, "reasoning": reasoning, "read_images": False, "answerer": "llm"}


def answer_from_gallery(gallery: Any, question: str, reader: Any, *, k: int = 3, images: bool | None = None,
                        captioner: Callable[[list[str]], list[str]] | None = None) -> dict[str, Any]:
    """Visual RAG over a gallery: the ``k`` photos that best match ``question`` (text search), and the
    reader's answer from them (:func:`read_images`). Returns ``{"answer", "reasoning", "read_images", "answerer",
    "hits"}``."""
    hits = gallery.search_text(question, k=k)
    return {**read_images(question, hits, reader, images=images, captioner=captioner), "hits": hits}


# --- the extractive reader: the photos' own words ---------------------------------------------------------

MIN_RELEVANCE = 0.3
"""A caption or line of photo text less similar than this to the question (MiniLM cosine) is not evidence, as for
the web pages' sentences: "TOTAL 42.50" meets "what is the total on the receipt?" at 0.53 and "a white dog runs
through the snow" meets "what colour is the dog in the snow?" at 0.54; "MILK 1.20" and "a red boat on a calm
lake" meet them at 0.19 and 0.20 (measured)."""

KIND_BONUS = 0.15
"""Added to the rank of words holding the kind of answer the question wants (a number for "what is the total")."""
_NOT_ASKED = frozenset("photo photos picture pictures image images my our shown show".split())


def photo_words(hit: ImageHit) -> list[tuple[str, str]]:
    """``(where, words)`` a photo says itself: each stored caption, each line of the text read in it, and each
    two lines of that text together (a receipt's "TOTAL" and "42.50" are often two lines)."""
    found = [("caption", caption.strip()) for caption in hit.captions if caption.strip()]
    lines = [line.strip() for line in hit.photo_text.splitlines() if line.strip()]
    found += [("text", line) for line in lines]
    found += [("text", f"{a} {b}") for a, b in zip(lines, lines[1:])]
    return found


def quote_photo_words(question: str, hits: Sequence[ImageHit], *,
                      encode: Callable[[list[str]], Any] | None = None) -> dict[str, Any]:
    """An answer quoted from the photos' own words, never written: the caption or line of photo text that best
    answers ``question`` (it shares a word with what is asked and holds the kind of answer the question wants:
    :mod:`pictrieve.agents.answer_types`; ranked by MiniLM similarity, plus a bonus for that kind), named by
    its picture (``Picture 2's text reads "TOTAL 42.50".``). None answers: a sentence saying so and that a
    capable model writes an answer (:func:`pictrieve.agents.shown_text.not_written`). Returns ``{"answer",
    "answerer": "extractive", "quoted"}`` (``quoted``: ``{"picture", "where", "words", "score"}`` or ``None``)."""
    import numpy as np

    from pictrieve.agents.shown_text import not_written

    expected = expected_answer(question)
    wanted = {stem(w) for w in question_terms(question)} - _NOT_ASKED
    candidates = []
    for number, hit in enumerate(hits, start=1):
        for where, words in photo_words(hit):
            shares = bool(wanted & words_of(words)) if wanted else True
            fits = expected.answers(words, shares_a_word=shares) if expected is not None else shares
            if fits:
                candidates.append((number, where, words))
    quoted = None
    if candidates:
        if encode is None:
            from pictrieve.tools.web.local_pages import shared_encoder

            encode = shared_encoder().encode
        vectors = np.asarray(encode([question] + [words for _, _, words in candidates]), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        relevance = vectors[1:] @ vectors[0]
        bonus = [KIND_BONUS if expected is not None and expected.met_by(words) else 0.0 for _, _, words in candidates]
        ranked = sorted(((float(r) + b, float(r), c) for r, b, c in zip(relevance, bonus, candidates)),
                        key=lambda item: (-item[0], item[2][0]))
        best = next((item for item in ranked if item[1] >= MIN_RELEVANCE), None)
        if best is not None:
            number, where, words = best[2]
            quoted = {"picture": number, "where": where, "words": words, "score": round(best[0], 4)}
    if quoted is None:
        answer = ("None of these photos' captions or text answers it. " + not_written()) if hits else \
            "No photo was found to read. " + not_written()
    else:
        said = "caption says" if quoted["where"] == "caption" else "text reads"
        answer = (f'Picture {quoted["picture"]}\'s {said} "{quoted["words"]}". '
                  "(Quoted from the photo; no answer is written by the offline chat model.)")
    return {"answer": answer, "answerer": "extractive", "quoted": quoted}

