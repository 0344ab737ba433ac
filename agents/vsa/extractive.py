"""The extractive answerer: answers built from sentences of the pages read, never generated.

A 135M chat model cannot read four pages and write a grounded answer with citations (it answers
0/7 of the offline question set). This answerer needs no generative skill: it splits the pages a
searcher read into sentences, scores each by all-MiniLM-L6-v2 cosine similarity to the question
*in the light of the photo* (the question plus the regions' labels, so "the animal in this photo"
prefers the horse page over the dog page), keeps the best sentence (and the runner-up when it is
nearly as good), and quotes them verbatim, each followed by its source number ``[n]``.

Page text stays data: sentences are quoted, never interpreted, and a sentence is only chosen for
being close to the question. This is not in the paper (the authors' searcher and answerer are
LLMs); it is the offline default when the chat model is the offline small model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pictrieve.agents.vsa.prompts import defang

_REMOVED = defang("<<<RESULT>>>")

MIN_SCORE = 0.3
"""Sentences less similar than this to the question alone are not evidence (MiniLM cosine). On the
offline set the sentences that answer score 0.37 to 0.73; unrelated ones about 0.15."""
MARGIN = 0.06
"""A runner-up sentence is kept when its score is within this of the best one."""

_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_ENDED = re.compile(r"[.!?:;][\"')\]]*$")
_ABBREVIATIONS = frozenset(
    "e.g. i.e. etc. vs. cf. al. approx. ca. c. no. nos. fig. figs. vol. pp. p. mr. mrs. ms. dr. prof. "
    "st. mt. ft. jr. sr. inc. ltd. co. corp. u.s. u.k. jan. feb. mar. apr. jun. jul. aug. sep. sept. "
    "oct. nov. dec.".split())
"""Words after which a full stop does not end the sentence ("Mr. Smith", "St. Louis", "c. 1850")."""
_MARKER = re.compile(r"\s*(#{1,6}\s|[-*+>]\s|>|\d{1,9}[.)]\s)\s*")


@dataclass(frozen=True)
class Evidence:
    """One quoted sentence, the source it came from (its number among the pages read), its scores.

    ``score`` (similarity to the question with the photo's labels) ranks; ``relevance``
    (similarity to the question alone) gates, so that the photo's labels cannot make a sentence
    about the horse "answer" a question that is not about it.
    """

    sentence: str
    source: int
    score: float
    relevance: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"sentence": self.sentence, "source": self.source, "score": round(self.score, 4),
                "relevance": round(self.relevance, 4)}


def split_sentences(text: str) -> list[str]:
    """Whole sentences of ``text``, paragraph by paragraph (headings, fragments and pieces under four words dropped).

    Page text comes one paragraph per line (trafilatura's HTML; plain text and Markdown unwrapped by
    :func:`pictrieve.tools.web.page_text.unwrap_paragraphs`), so sentences are split inside a line, never
    at its end. A line that still starts in lower case continues the line before when that one has
    no end mark (a source we could not unwrap), and is otherwise a fragment whose start we never
    saw: it is dropped, so that no answer quotes "domesticated, more than 15,000 years ago."
    """
    text = defang(text or "").replace(_REMOVED, "\n")  # a forged fence marker ends a sentence
    paragraphs: list[list] = []  # [text, its Markdown marker ("#", "-", ">", "1." ...) or ""]
    for raw in text.split("\n"):
        found = _MARKER.match(raw)
        marker = found.group(1).strip() if found else ""
        line = " ".join((raw[found.end():] if found else raw).split())
        if not line:
            continue
        previous = paragraphs[-1] if paragraphs else None
        if (previous and not marker and line[0].islower() and not previous[1].startswith("#")
                and not _ENDED.search(previous[0])):
            previous[0] += " " + line  # one sentence broken across lines
        else:
            paragraphs.append([line, marker])
    out = []
    for paragraph, marker in paragraphs:
        if marker.startswith("#"):
            continue  # a heading names a topic; it is not a sentence to quote
        sentences: list[str] = []
        for piece in _SPLIT.split(paragraph):
            if sentences and _ends_with_abbreviation(sentences[-1]):
                sentences[-1] += " " + piece
            else:
                sentences.append(piece)
        if sentences and sentences[0][:1].islower() and not marker:
            sentences = sentences[1:]  # the tail of a sentence that began elsewhere
        out.extend(s for s in sentences if len(s.split()) >= 4)
    return out


def _ends_with_abbreviation(sentence: str) -> bool:
    last = sentence.rsplit(" ", 1)[-1].lower().lstrip("(\"'")
    return last in _ABBREVIATIONS or bool(re.fullmatch(r"[a-z]\.", last))  # "J. R. R. Tolkien"


def photo_context(regions: Sequence[dict[str, Any]]) -> str:
    """What the photo shows, as words to add to a query: the regions' distinct labels."""
    labels = [r["label"] for r in regions if r.get("label") and r["label"] != "image"]
    return ", ".join(dict.fromkeys(labels))


def _query(question: str, context: str) -> str:
    return f"{question} (the photo shows: {context})" if context else question


def score_sentences(question: str, candidates: Sequence[tuple[str, int, str]], *, context: str = "",
                    encode: Callable[[list[str]], np.ndarray]) -> list[Evidence]:
    """``(sentence, source, title)`` candidates scored against the question + photo context, best first.

    A sentence is embedded with its page title in front ("Horses: quick facts: An adult ... "), so a
    sentence that says "it" still knows what it is about.
    """
    if not candidates:
        return []
    vectors = encode([question, _query(question, context)] + [f"{title}: {s}" for s, _, title in candidates])
    relevance, scores = vectors[2:] @ vectors[0], vectors[2:] @ vectors[1]
    found = [Evidence(sentence, source, float(score), float(rel))
             for (sentence, source, _), score, rel in zip(candidates, scores, relevance)]
    return sorted(found, key=lambda e: (-e.score, e.source))


def choose(scored: Sequence[Evidence], *, max_sentences: int = 2, min_score: float = MIN_SCORE,
           margin: float = MARGIN) -> list[Evidence]:
    """The best relevant sentence, plus runners-up within ``margin`` of it; no repeats.

    ``scored`` is best first; a sentence is relevant when its ``relevance`` reaches ``min_score``.
    """
    chosen: list[Evidence] = []
    for item in scored:
        if len(chosen) == max_sentences or (chosen and item.score < chosen[0].score - margin):
            break
        if item.relevance >= min_score and item.sentence not in {c.sentence for c in chosen}:
            chosen.append(item)
    return chosen


def cite(evidence: Sequence[Evidence]) -> str:
    """Quoted sentences, each followed by its source number: ``"... in the 1880s. [1]"``.

    A quote without an end mark (a list item, a table row) gets a full stop after its number, so
    that the number never sits in the middle of what reads as one sentence.
    """
    return " ".join(f"{e.sentence} [{e.source}]" + ("" if _ENDED.search(e.sentence) else ".") for e in evidence)


def compose_answer(question: str, regions: Sequence[dict[str, Any]], evidence: Sequence[Evidence]) -> str:
    """One answer: what the photo shows, then the chosen sentences with their citations."""
    context = photo_context(regions)
    seen = f"The photo shows: {context}." if context else "No object was detected in the photo."
    if not evidence:
        return f"{seen} The search found nothing that answers the question."
    return f"{seen} {cite(evidence)}"
