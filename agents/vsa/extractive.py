"""The extractive answerer: answers built from sentences of the pages read, never generated.

A 135M chat model cannot read four pages and write a grounded answer with citations (it answers
0/7 of the offline question set). This answerer needs no generative skill: it splits the pages a
searcher read into sentences, scores each by all-MiniLM-L6-v2 cosine similarity to the question
*in the light of the photo* (the question plus the regions' labels, so "the animal in this photo"
prefers the horse page over the dog page), keeps the best sentence (and the runner-up when it is
nearly as good), and quotes them verbatim, each followed by its source number ``[n]``. A sentence is chosen
only when it answers what is asked (:func:`on_target`): it shares a word with the question and holds the kind
of answer the question wants (:mod:`pictrieve.agents.answer_types`: a speed for "how fast", an origin for
"where do dogs come from?"); such a sentence also ranks higher (:data:`ANSWER_KIND_BONUS`).

Page text stays data: sentences are quoted, never interpreted, and a sentence is only chosen for
being close to the question. This is not in the paper (the authors' searcher and answerer are
LLMs); it is the offline default when the chat model is the offline small model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pictrieve.agents.answer_types import expected_answer, question_terms, stem, words_of
from pictrieve.agents.vsa.prompts import defang

_REMOVED = defang("<<<RESULT>>>")

MIN_SCORE = 0.3
"""Sentences less similar than this to the question alone are not evidence (MiniLM cosine). On the
offline set the sentences that answer score 0.37 to 0.73; unrelated ones about 0.15."""
MARGIN = 0.06
"""A runner-up sentence is kept when its score is within this of the best one."""
ANSWER_KIND_BONUS = 0.15
"""Added to the rank score of a sentence that holds the kind of answer the question wants (a speed for "how
fast"): it ranks above sentences that only talk about the same things. Its relevance gate is unchanged."""

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


def page_sentences(text: str, title: str = "") -> list[str]:
    """:func:`split_sentences` of a page, less its title repeated as a line (an HTML page's ``<h1>``): a
    title names the topic, it states nothing ("Dogs: body and senses" is no answer)."""
    name = " ".join((title or "").split()).strip(" .").lower()
    return [s for s in split_sentences(text) if not name or s.strip(" .").lower() != name]


def _ends_with_abbreviation(sentence: str) -> bool:
    last = sentence.rsplit(" ", 1)[-1].lower().lstrip("(\"'")
    return last in _ABBREVIATIONS or bool(re.fullmatch(r"[a-z]\.", last))  # "J. R. R. Tolkien"


def photo_subjects(regions: Sequence[dict[str, Any]]) -> list[str]:
    """What the photo shows, as nouns: the detected regions' labels, or for a photo the detector found
    nothing in, the whole photo's subject when its describer named one (``"dog"``)."""
    names = [r.get("subject") or r.get("label") for r in regions]
    return list(dict.fromkeys(n for n in names if n and n != "image"))


def photo_context(regions: Sequence[dict[str, Any]]) -> str:
    """What the photo shows, as words to add to a query: the regions' distinct labels (or subject)."""
    return ", ".join(photo_subjects(regions))


# -- what a sentence is about --------------------------------------------------------------------
_KIND_WORDS = {
    "person": "person people man men woman women child children boy girl human rider surfer skier cyclist "
              "swimmer player",
    "dog": "dog puppy puppies canine", "cat": "cat kitten feline", "horse": "horse pony foal",
    "bird": "bird", "cow": "cow cattle", "sheep": "sheep", "elephant": "elephant", "bear": "bear",
    "zebra": "zebra", "giraffe": "giraffe", "bicycle": "bicycle bike", "car": "car",
    "motorcycle": "motorcycle motorbike", "airplane": "airplane aeroplane plane aircraft", "bus": "bus",
    "train": "train", "truck": "truck", "boat": "boat ship yacht canoe kayak",
}
KINDS: dict[str, str] = {word: kind for kind, words in _KIND_WORDS.items() for word in words.split()}
"""Words that name a kind of thing the photo could show (the COCO classes people ask about, with common
synonyms), mapped to their kind: a sentence naming only kinds the photo does not show is about
something else ("An adult horse has 36 to 44 teeth." on a dog photo)."""
_GENERIC = frozenset("animal animals creature vehicle machine thing object one kind sort type".split())


def _word_kind(word: str) -> str | None:
    word = re.sub(r"'s?$", "", word.lower())
    for form in (word, word[:-1] if word.endswith("s") else word, word[:-2] if word.endswith("es") else word):
        if form in KINDS:
            return KINDS[form]
    return None


def kinds(text: str) -> set[str]:
    """The kinds of thing ``text`` names (``"Horses: quick facts"`` -> ``{"horse"}``)."""
    return {k for w in re.findall(r"[A-Za-z][A-Za-z']*", text or "") if (k := _word_kind(w))}


def about_something_else(sentence: str, title: str, allowed: set[str]) -> bool:
    """True when the sentence (or its page title) names kinds of thing and none of them is ``allowed``
    (the photo's subjects and what the question names): a fact about something else. People are in most
    photos, so a sentence naming things besides people is judged by those things: "a rider-propelled machine"
    on a page about bicycles is about bicycles, not about the person on a surfboard."""
    named = kinds(sentence) | kinds(title)
    things = named - {"person"}
    return bool(things and not (things & allowed)) if things else bool(named) and not (named & allowed)


def on_topic(candidates: Sequence[tuple[str, int, str]], question: str,
             subjects: Sequence[str]) -> list[tuple[str, int, str]]:
    """The ``(sentence, source, title)`` candidates not about something else than the photo's
    ``subjects`` or the things ``question`` names."""
    allowed = {k for s in subjects for k in (kinds(s) or {s})} | kinds(question)
    return [c for c in candidates if not about_something_else(c[0], c[2], allowed)]


_NOT_TARGET = frozenset("adult like one shown kind sort type photo picture image this that".split())


def target_words(part: str) -> set[str]:
    """The stems of what a question part asks about ("how many teeth does it have?" -> ``{"tooth"}``): its
    content words, less the words for the photo and the kinds of thing it shows."""
    return {stem(w) for w in question_terms(part) if w not in _NOT_TARGET and w not in _GENERIC and not _word_kind(w)}


def shares_a_word(sentence: str, part: str) -> bool:
    """Whether ``sentence`` shares a word with what ``part`` asks about (a part without such words: yes)."""
    wanted = target_words(part)
    return not wanted or bool(wanted & words_of(sentence))


def on_target(sentence: str, part: str) -> bool:
    """Whether ``sentence`` can answer ``part``: it shares a word with what is asked, and holds the kind of
    answer ``part`` wants (:func:`pictrieve.agents.answer_types.expected_answer`: a number with a unit of speed
    for "how fast", an origin for "where do ... come from"); a sentence holding a ``strong`` kind ("about 70
    km/h") answers without repeating a word of the question."""
    expected = expected_answer(part)
    if expected is None:
        return shares_a_word(sentence, part)
    return expected.answers(sentence, shares_a_word=shares_a_word(sentence, part))


# -- saying what the pages do not say ------------------------------------------------------------
_ASKS_WHAT_IT_IS = re.compile(
    r"^\s*(what|which)\b(\s+[\w-]+){0,3}\s+(is|are)\s+(this|that|these|those|it|shown|in\s+(this|the))\b",
    re.IGNORECASE)
_AUX = re.compile(r"\b(does|do|did|can|could|will|would|is|are|was|were)\b", re.IGNORECASE)
_REFERENCE = re.compile(
    r"\b(?:an?|the|this|that)\s+(?:adult\s+)?(animal|creature|vehicle|machine|thing|object|one)\b"
    r"(?:\s+like\s+the\s+one)?(?:\s+(?:shown\s+)?in\s+(?:this|the)\s+(?:photo|picture|image))?", re.IGNORECASE)
_QUALIFIED = re.compile(r"\s+(sitting|standing|lying|next|on|with|near|behind|that|which|who|in\s+the)\b",
                        re.IGNORECASE)
_IN_PHOTO = re.compile(r"\b(?:shown\s+)?in\s+this\s+(photo|picture|image)\b", re.IGNORECASE)


def asks_what_it_is(part: str) -> bool:
    """Whether ``part`` asks what the photo shows ("what animal is this?"): the photo answers it."""
    return bool(_ASKS_WHAT_IT_IS.match(part))


def only_the_photo_answers(part: str) -> bool:
    """Whether ``part`` asks only what kind of thing the photo shows ("what animal is this?", "what is this?"): the
    photo line answers it, and no sentence of a page does (a page on dog breeds says nothing of this photo)."""
    if not asks_what_it_is(part):
        return False
    asked = re.match(r"^\s*(?:what|which)\s+([\w-]+)", part, re.IGNORECASE)
    return asked is None or asked.group(1).lower() in _GENERIC | {"is", "are"}


def _third_person(verb: str) -> str:
    irregular = {"have": "has", "do": "does", "go": "goes", "be": "is"}
    if verb in irregular:
        return irregular[verb]
    return verb + ("es" if verb.endswith(("s", "sh", "ch", "x", "o")) else "s")


_PARTICIPLES = frozenset("made built born found known called worn grown seen done taken given kept held bred fed thrown "
                         "shown sold bought brought caught taught won hung spun woven frozen".split())


def _participle(word: str) -> bool:
    """Whether ``word`` reads as a past participle ("invented", "built"): a passive question's verb."""
    word = word.lower()
    return word in _PARTICIPLES or (word.endswith("ed") and len(word) > 4)


def missing_clause(part: str, subject: str | None) -> str:
    """``part`` as the clause of "The pages read do not say ...", about ``subject`` when the question
    refers to the photo ("how many teeth does it have?", dog -> "how many teeth a dog has")."""
    text = part.strip().rstrip("?.! ").strip()
    if subject:
        noun = subject if not subject.lower().startswith(("a ", "an ", "the ")) else subject.split(" ", 1)[1]
        # "the dog sitting next to the man", but "how many teeth a dog has" (a fact about any dog)
        text, n = _REFERENCE.subn(lambda m: f"{'the' if _QUALIFIED.match(text, m.end()) else 'a'} {noun}", text,
                                  count=1)
        if not n:
            text = re.sub(r"\b(it|this)\b(?!\s+(?:photo|picture|image))", _with_article(noun), text, count=1,
                          flags=re.IGNORECASE)
    text = _IN_PHOTO.sub("in the photo", text)
    found = _AUX.search(text)
    if found and found.start() > 0:
        wh, aux, rest = text[:found.start()].strip(), found.group(1).lower(), text[found.end():].strip()
        words = rest.split()
        if aux in ("is", "are", "was", "were") and len(words) >= 2 and _participle(words[-1]):
            text = f"{wh} {' '.join(words[:-1])} {aux} {words[-1]}"  # "when a boat was invented"
        elif aux in ("is", "are", "was", "were") and words:
            text = f"{wh} {rest} {aux}"
        elif len(words) >= 2:
            body, verb = " ".join(words[:-1]), words[-1]
            if aux == "does":
                verb = _third_person(verb)
            elif aux not in ("do",):
                verb = f"{aux} {verb}"
            text = f"{wh} {body} {verb}"
    return text[:1].lower() + text[1:]


def main_subject(subjects: Sequence[str], part: str) -> str | None:
    """The subject of the photo a question part is about: an animal for "the animal", a vehicle for "the
    vehicle" or "machine", else the first that is not a person (people are in most photos)."""
    wanted = {"animal": ANIMALS, "creature": ANIMALS, "vehicle": VEHICLES, "machine": VEHICLES}
    for word, group in wanted.items():
        if re.search(rf"\b{word}\b", part, re.IGNORECASE):
            for s in subjects:
                if kinds(s) & group:
                    return s
    return next((s for s in subjects if "person" not in kinds(s)), subjects[0] if subjects else None)


ANIMALS = frozenset("dog cat horse bird cow sheep elephant bear zebra giraffe".split())
VEHICLES = frozenset("bicycle car motorcycle airplane bus train truck boat".split())


def _query(question: str, context: str) -> str:
    return f"{question} (the photo shows: {context})" if context else question


def score_sentences(question: str, candidates: Sequence[tuple[str, int, str]], *, context: str = "",
                    encode: Callable[[list[str]], np.ndarray]) -> list[Evidence]:
    """``(sentence, source, title)`` candidates scored against the question + photo context, best first.

    A sentence is embedded with its page title in front ("Horses: quick facts: An adult ... "), so a
    sentence that says "it" still knows what it is about. One that holds the kind of answer the question wants
    ranks :data:`ANSWER_KIND_BONUS` higher (``score``; ``relevance`` stays the cosine).
    """
    if not candidates:
        return []
    vectors = encode([question, _query(question, context)] + [f"{title}: {s}" for s, _, title in candidates])
    relevance, scores = vectors[2:] @ vectors[0], vectors[2:] @ vectors[1]
    expected = expected_answer(question)
    if expected is not None:
        scores = scores + ANSWER_KIND_BONUS * np.array([expected.met_by(s) for s, _, _ in candidates], dtype=float)
    found = [Evidence(sentence, source, float(score), float(rel))
             for (sentence, source, _), score, rel in zip(candidates, scores, relevance)]
    return sorted(found, key=lambda e: (-e.score, e.source))


def choose(scored: Sequence[Evidence], *, max_sentences: int = 2, min_score: float = MIN_SCORE,
           margin: float = MARGIN, part: str | None = None, near: frozenset[int] = frozenset()) -> list[Evidence]:
    """The best relevant sentence, plus runners-up within ``margin`` of it; no repeats.

    ``scored`` is best first; a sentence is relevant when its ``relevance`` reaches ``min_score``. With
    ``part`` (the question part it answers), the best sentence must also be :func:`on_target` (share a
    word with what is asked: a horse's teeth do not answer how long a horse lives); a runner-up from the
    same page continues its passage ("... given in knots. One knot is ...") and need not, nor need a
    sentence from a page in ``near`` (pages already quoted for an earlier part of the question).
    """
    chosen: list[Evidence] = []
    for item in scored:
        if not chosen and part is not None and item.source not in near and not on_target(item.sentence, part):
            continue
        if len(chosen) == max_sentences or (chosen and item.score < chosen[0].score - margin):
            break
        if chosen and part is not None and item.source != chosen[0].source and not on_target(item.sentence, part):
            continue
        if item.relevance >= min_score and item.sentence not in {c.sentence for c in chosen}:
            chosen.append(item)
    return chosen


def cite(evidence: Sequence[Evidence]) -> str:
    """Quoted sentences, each followed by its source number: ``"... in the 1880s. [1]"``.

    A quote without an end mark (a list item, a table row) gets a full stop after its number, so
    that the number never sits in the middle of what reads as one sentence.
    """
    return " ".join(f"{e.sentence} [{e.source}]" + ("" if _ENDED.search(e.sentence) else ".") for e in evidence)


def _with_article(noun: str) -> str:
    if noun.lower().startswith(("a ", "an ", "the ")):
        return noun
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def photo_line(regions: Sequence[dict[str, Any]]) -> str:
    """What the photo shows, in one sentence: its subjects, else the whole photo's description."""
    subjects = photo_subjects(regions)
    if subjects:
        named = [_with_article(s) for s in subjects]
        listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
        return f"The photo shows {listed}."
    described = next((r.get("description") for r in regions if r.get("description")), "")
    return f"The photo, described whole: {described.rstrip('.')}." if described else "The photo was not described."


def compose_answer(question: str, regions: Sequence[dict[str, Any]], evidence: Sequence[Evidence],
                   missing: Sequence[str] = ()) -> str:
    """One answer: what the photo shows, the chosen sentences with their citations, then one sentence per
    part of the question nothing read answers ("The pages read do not say how many teeth a dog has.")."""
    parts = [photo_line(regions)]
    if evidence:
        parts.append(cite(evidence))
    parts.extend(f"The pages read do not say {clause}." for clause in missing)
    if not evidence and not missing:
        parts.append("The search found nothing that answers the question.")
    return " ".join(parts)
