"""What kind of answer a question expects, and whether a sentence has that kind: the extractive answerers' cues.

An extractive answerer (the Vision Search Assistant's offline one, :mod:`pictrieve.agents.vsa.extractive`;
the gallery reader's, :func:`pictrieve.agents.visret.reader.quote_photo_words`) quotes sentences, it writes
none, so what it can do is pick the sentence that answers. Similarity to the question alone picks the sentence
that *talks about* the same things: for "how fast can a dog run?" a sentence about dogs running in the snow, not
"the greyhound reaches about 70 km/h", which shares no word with the question. A question says what kind of
answer it wants, and a sentence shows whether it holds one: "how fast" wants a number with a unit of speed,
"where do dogs come from?" wants an origin ("descend from", "originated in"), "why" a cause ("because"), "in
what year" a year. These rules read both sides (English only, hand-written, no model; a question with no cue
expects nothing in particular).

:func:`expected_answer` reads the question; :meth:`Expectation.met_by` checks a sentence. An expectation is
``strong`` when a sentence having it is on target even without a word of the question ("70 km/h" answers "how
fast"; a number alone does not answer "how many teeth", a sentence about teeth with a number does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = (r"(?:\d[\d,]*(?:\.\d+)?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
           r"thirty|forty|fifty|sixty|hundred|a\s+hundred|thousand|a\s+thousand|million|a\s+million|dozen|a\s+dozen|"
           r"half|a\s+half)")
_APPROX = r"(?:\s*(?:to|-|–|and|or)\s*" + _NUMBER + r")?"
_PER_HOUR = r"(?:km/h|kph|km\s*/\s*h|mph|knots?|m/s|(?:kilomet(?:re|er)s?|miles?|nautical\s+miles?|met(?:re|er)s?)\s+(?:per|an|a)\s+(?:hour|second))"


def _with_number(units: str) -> re.Pattern[str]:
    """A number (a range too: "38.3 to 39.2") followed by one of ``units``."""
    return re.compile(rf"\b{_NUMBER}{_APPROX}\s*(?:{units})(?![a-z])", re.IGNORECASE)


@dataclass(frozen=True)
class Expectation:
    """The kind of answer a question wants (``kind``), how a sentence shows it (``pattern``), and whether that
    alone puts the sentence on target (``strong``)."""

    kind: str
    pattern: re.Pattern[str]
    strong: bool
    required: bool = True
    """A sentence without it does not answer (a "how many" sentence without a number); ``False`` for the kinds
    whose answers take many forms (an origin, a place, a cause), where it only ranks."""

    def met_by(self, sentence: str) -> bool:
        """Whether ``sentence`` holds an answer of this kind."""
        return bool(self.pattern.search(sentence or ""))

    def answers(self, sentence: str, *, shares_a_word: bool) -> bool:
        """Whether ``sentence`` can answer: it holds this kind (for a ``required`` one) and, unless the kind is
        ``strong``, shares a word with what is asked (``shares_a_word``)."""
        met = self.met_by(sentence)
        if self.required and not met:
            return False
        return shares_a_word or (self.strong and met)


def _cue(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


_MONTHS = "january|february|march|april|june|july|august|september|october|november|december"
_ANY_NUMBER = re.compile(rf"\b{_NUMBER}\b|\d", re.IGNORECASE)

_PLACE = re.compile(r"\b(?:[Ii]n|[Aa]t|[Ff]rom|[Nn]ear|[Aa]cross|[Tt]hroughout|[Aa]round)\s+(?:the\s+|ancient\s+|"
                    r"modern\s+|present-day\s+)?[A-Z][a-z]+|\b[Nn]ative\s+to\b")
"""A place named after a preposition ("in ancient Polynesia", "from Mannheim"): a capitalised word (a name)."""
_ORIGIN = (r"(?i:\b(?:descend(?:s|ed|ants?)?\s+(?:\w+\s+){0,2}from|originat\w*|came\s+from|comes?\s+from|"
                     r"ancest(?:or|ors|ral|ry)|domesticated\s+(?:\w+\s+){0,3}(?:from|in)|evolved\s+from|native\s+to|"
                     r"(?:first\s+)?bred\s+(?:in|from)|first\s+(?:appeared|domesticated)\s+in)\b)")
"""Where a thing comes from, in words ("descend from", "originated", "native to"); case-insensitive."""


# (kind, what the question says, what an answering sentence holds, strong, required);
# the first whose question cue matches is the expectation, so the specific ones come first.
_RULES: tuple[tuple[str, str, re.Pattern[str], bool, bool], ...] = (
    ("colour", r"\b(?:what|which)\s+colou?rs?\b",
     _cue(r"\b(?:white|black|brown|red|orange|yellow|green|blue|purple|pink|gr[ae]y|golden|tan|beige|silver|cream|"
          r"dark|light|pale)\b"), True, True),
    ("speed", r"\bhow\s+(?:fast|quickly)\b|\b(?:top|maximum|max|average|cruising)\s+speed\b|\bwhat\s+speed\b|"
              r"\bwhat\s+is\s+the\s+speed\b",
     _with_number(_PER_HOUR), True, True),
    ("temperature", r"\b(?:what|which)\s+(?:\w+\s+){0,4}temperature\b|\bhow\s+(?:hot|cold|warm)\b",
     _with_number(r"°\s*[CFK]?|degrees?(?:\s+(?:celsius|fahrenheit|c|f))?|celsius|fahrenheit|kelvin"), True, True),
    ("weight", r"\bhow\s+heavy\b|\bhow\s+much\s+(?:\w+\s+){0,6}weigh\b|\bwhat\s+(?:\w+\s+){0,3}weigh(?:s|t)?\b",
     _with_number(r"kg|kilo(?:gram)?s?|grams?|g|pounds?|lbs?|tonnes?|tons?|ounces?|oz|stone"), True, True),
    ("share", r"\bwhat\s+(?:fraction|percentage|proportion|share|part)\b|\bwhat\s+percent\b|\bhow\s+much\s+of\b",
     _cue(rf"\b{_NUMBER}{_APPROX}\s*(?:%|per\s*cent|percent)|\b(?:half|a\s+third|a\s+quarter|two\s+thirds|"
          r"three\s+quarters|most|\d+\s*/\s*\d+)\b"), True, True),
    ("size", r"\bhow\s+(?:tall|high|big|large|far|deep|wide|small|long\s+is)\b|\bwhat\s+(?:size|height|length|"
             r"width|depth|distance)\b",
     _with_number(r"mm|cm|m|km|met(?:re|er)s?|centimet(?:re|er)s?|millimet(?:re|er)s?|kilomet(?:re|er)s?|"
                  r"inch(?:es)?|in\.|feet|foot|ft|yards?|miles?|hands?"), True, True),
    ("origin", r"\bwhere\s+(?:\w+\s+){1,5}(?:come|came|originate|originated|descend|descended|evolve|evolved)\b|"
               r"\b(?:what|which)\s+(?:\w+\s+){0,3}(?:origin|origins|ancestor|ancestors)\b|"
               r"\bwhat\s+(?:\w+\s+){1,4}(?:descend|descended|evolve|evolved)\s+from\b|\borigin\s+of\b",
     re.compile(f"{_ORIGIN}|{_PLACE.pattern}"), True, False),
    ("time", r"^\s*when\b|\bin\s+what\s+year\b|\bwhat\s+(?:year|century|decade|date|month)\b|\bhow\s+long\s+ago\b|"
             r"\b(?:which|what)\s+era\b",
     _cue(rf"\b(?:1[0-9]{{3}}|20[0-9]{{2}})s?\b|\b\d+(?:st|nd|rd|th)\s+century\b|\bcentur(?:y|ies)\b|"
          rf"\b[\d,]+\s+years\s+ago\b|\b(?:{_MONTHS})\b|\b(?:BC|BCE|AD|CE)\b"), True, True),
    ("place", r"^\s*where\b|\bin\s+(?:what|which)\s+(?:country|city|place|region|part|town|continent|state)\b",
     _PLACE, True, False),
    ("cause", r"^\s*why\b|\bwhat\s+(?:causes|caused|makes|made)\b|\bfor\s+what\s+reason\b|\bhow\s+come\b",
     _cue(r"\b(?:because|since|due\s+to|owing\s+to|so\s+that|in\s+order\s+to|which\s+is\s+why|that\s+is\s+why|"
          r"as\s+a\s+result|caused\s+by|causes?|thanks\s+to|the\s+reason)\b"), True, False),
    ("duration", r"\bhow\s+long\b|\bhow\s+old\b|\bhow\s+many\s+(?:years|months|weeks|days|hours|minutes)\b|"
                 r"\blifespan\b|\blife\s+expectancy\b",
     _with_number(r"years?|months?|weeks?|days?|hours?|minutes?|seconds?"), False, True),
    ("number", r"\bhow\s+(?:many|much)\b|\bwhat\s+(?:is\s+|was\s+)?(?:the\s+)?(?:total|number|amount|price|cost|"
               r"count|sum|score|balance)\b|\bhow\s+much\s+(?:did|does|was|is)\b",
     _ANY_NUMBER, False, True),
)
EXPECTATIONS: tuple[tuple[re.Pattern[str], Expectation], ...] = tuple(
    (re.compile(question, re.IGNORECASE), Expectation(kind, pattern, strong, required))
    for kind, question, pattern, strong, required in _RULES)
"""The rules, in the order they are tried (the module docstring)."""


def expected_answer(question: str) -> Expectation | None:
    """The kind of answer ``question`` wants (the first rule whose cue it holds), or ``None`` for no cue."""
    for cue, expectation in EXPECTATIONS:
        if cue.search(question or ""):
            return expectation
    return None


# --- a question's words ---------------------------------------------------------------------------------------

_STOP = {"what", "which", "who", "whom", "whose", "where", "when", "why", "how", "is", "are", "was", "were", "the",
         "a", "an", "this", "that", "these", "those", "of", "in", "on", "at", "to", "for", "do", "does", "did", "it",
         "its", "and", "or", "with", "from", "by", "can", "could", "photo", "picture", "image", "there", "many",
         "much", "be", "have", "has", "they", "them", "their", "about", "kind", "type"}


def question_terms(question: str) -> list[str]:
    """The question's content words (a cheap stand-in for its nouns), lower case, first seen first."""
    words = re.findall(r"[A-Za-z][A-Za-z-]+", question.lower())
    return list(dict.fromkeys(w for w in words if w not in _STOP and len(w) > 2))


_IRREGULAR = {"teeth": "tooth", "children": "child", "men": "man", "women": "woman", "mice": "mouse"}


def stem(word: str) -> str:
    """A crude stem, enough to match "teeth" to "tooth" and "runs" to "run" ("dog's" -> "dog")."""
    word = re.sub(r"'s?$", "", word.lower())
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def words_of(text: str) -> set[str]:
    """The stems of every word of ``text``."""
    return {stem(w) for w in re.findall(r"[A-Za-z][A-Za-z']*", text or "")}


__all__ = ["EXPECTATIONS", "Expectation", "expected_answer", "question_terms", "stem", "words_of"]
