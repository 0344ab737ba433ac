"""An offline PlugIR questioner: questions built from what tells the candidates apart, chosen by the
expected information of their answer. No generative model is used.

Each round PlugIR has the top-n candidates of the current query and a caption per candidate. This
module reads the captions into terms (:mod:`.caption_terms`), makes yes/no and short-choice
questions from them ("Is there a ball in the photo?", "What colour is the dog: black, brown or
white?", "Where is it: beach, snow or grass?") and asks the one whose answer is expected to say the
most about which candidate is wanted:

    EIG(q) = sum_a P(a) KL(p(. | a) || p) = H(answer)   (answers read off the captions, noise-free)

where ``p = softmax(similarities)`` is the paper's candidate distribution, reweighted by what the
user has already confirmed or denied. This is the paper's KL criterion taken in expectation over
the answer. The paper picks, among an LLM's questions that survived its redundancy filter, the one
whose addition to the query moves ``p`` least (guarding against questions about things the target
probably lacks, which an LLM invents); our questions come from the candidates themselves, so that
risk is absent and the expected change is what measures a question's worth (deliberate
difference). The redundancy filter is a rule: nothing already in the description, confirmed,
denied or asked is asked again.

:func:`reformulate_with_answers` keeps the user's description and appends what was confirmed
("..., a black dog, on the beach"), so the query never loses the description (the failure of the
135M model's rewrites). Denied terms stay out of the text: a sentence encoder reads "no snow" as
snow.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from pictrieve.agents.plugir.caption_terms import (
    PLURAL_ONLY,
    CaptionTerms,
    caption_terms,
    singular,
    vocabulary,
    words,
)
from pictrieve.agents.plugir.retrieval_context import softmax

MAX_OPTIONS = 3
INCONSISTENT_WEIGHT = 0.2
"""Candidates that contradict an earlier answer keep this share of their probability (answers from
captions are not certain: a caption omits much of what a photo shows)."""

_YES = re.compile(r"^\s*(yes|yeah|yep|yup|y|sure|correct|right|true|there is|there are|it is|indeed)\b", re.I)
_NO = re.compile(r"^\s*(no|nope|n|not|none|nothing|neither|false|there isn'?t|there aren'?t)\b", re.I)
_UNKNOWN = re.compile(r"\b(unknown|not sure|don'?t know|do not know|can'?t tell|cannot tell|no idea|maybe|unsure|"
                      r"uncertain)\b", re.I)


@dataclass(frozen=True)
class Question:
    """One offline question. ``kind`` is ``yes_no`` or ``choice``; ``key`` the term asked about
    (yes/no) or the topic (``colour of dog``, ``place``); ``options`` the choices, each a term key."""

    text: str
    kind: str
    key: str
    options: tuple[str, ...] = ()
    phrase: str = ""  # what a "yes" adds to the query, e.g. "a black dog"
    noun: str = ""  # the thing a colour question is about

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["options"] = list(self.options)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Question":
        return cls(**{**data, "options": tuple(data.get("options", ()))})


# --- making questions ------------------------------------------------------------------------------
def candidate_questions(candidate_terms: Sequence[CaptionTerms], known: str = "",
                        asked: Sequence[Question] = ()) -> list[Question]:
    """Every question the candidates' terms support, minus the redundant ones.

    ``known``: the current query (description + confirmed answers); a question about a term it
    already holds is redundant. ``asked``: earlier questions, never repeated (nor their options).
    """
    vocab = vocabulary()
    known_terms = caption_terms(known) if known else CaptionTerms()
    known_keys = known_terms.keys | {singular(w) for w in words(known)}
    asked_keys = {q.key for q in asked} | {o for q in asked for o in q.options}

    def fresh(key: str) -> bool:
        return key not in known_keys and key not in asked_keys

    union = CaptionTerms()
    for terms in candidate_terms:
        union.merge(terms)
    questions: list[Question] = []
    for topic, words_of_topic in (("place", vocab["places"]), ("who", vocab["people"])):
        options = sorted(k for k in union.things if k in words_of_topic)
        if len(options) >= 2 and not any(o in known_keys for o in options) and topic not in asked_keys:
            questions.append(_choice(topic, options, candidate_terms, template=topic))
    for key in sorted(union.things):
        if key in vocab["places"]:
            continue
        if fresh(key):
            template = vocab["templates"]["plural_phrase" if key.split()[-1] in PLURAL_ONLY else "object"]
            text = template.format(a=_article(key), term=union.display.get(key, key))
            questions.append(Question(text=_tidy(text), kind="yes_no", key=key, phrase=_with_article(key)))
        # The colour of a thing is worth asking whether or not the thing itself is known.
        colours = sorted(c.split(" ", 1)[0] for c in union.coloured if c.split(" ", 1)[1] == key)
        topic = f"colour of {key}"
        if len(colours) >= 2 and topic not in asked_keys and not any(f"{c} {key}" in known_keys or
                                                                     c in known_terms.colours for c in colours):
            questions.append(_choice(topic, [f"{c} {key}" for c in colours], candidate_terms,
                                     template="colour_of", noun=key))
    for key in sorted(union.coloured | union.counted):
        if not fresh(key) or key.split(" ", 1)[1] not in union.things:
            continue
        shown = union.display.get(key, key)
        plural = key in union.counted or key.split()[-1] in PLURAL_ONLY
        template = vocab["templates"]["plural_phrase" if plural else "phrase"]
        text = template.format(a=_article(key), term=shown)
        questions.append(Question(text=_tidy(text), kind="yes_no", key=key,
                                  phrase=shown if plural else _with_article(shown)))
    for key in sorted(union.actions):
        if fresh(key):
            text = vocab["templates"]["action"].format(term=key)
            questions.append(Question(text=text, kind="yes_no", key=key, phrase=key))
    for key in sorted(union.colours):
        if fresh(key):
            text = vocab["templates"]["colour"].format(term=key)
            questions.append(Question(text=text, kind="yes_no", key=key, phrase=f"something {key}"))
    return questions


def _choice(topic: str, options: Sequence[str], candidate_terms: Sequence[CaptionTerms], *, template: str,
            noun: str = "") -> Question:
    """A short-choice question over the ``MAX_OPTIONS`` options most candidates have."""
    counts = {o: sum(t.has(o) for t in candidate_terms) for o in options}
    chosen = sorted(options, key=lambda o: (-counts[o], o))[:MAX_OPTIONS]
    labels = [o.split(" ", 1)[0] if noun else _with_article(o) if template == "who" else o for o in chosen]
    listed = ", ".join(labels[:-1]) + f" or {labels[-1]}"
    text = vocabulary()["templates"][template].format(noun=noun, options=listed)
    return Question(text=text, kind="choice", key=topic, options=tuple(chosen), noun=noun)


def _article(key: str) -> str:
    head = key.split()[-1]
    if head in vocabulary()["mass_nouns"] or head in PLURAL_ONLY or singular(head) != head:
        return ""
    return "an" if key[0] in "aeiou" else "a"


def _with_article(text: str) -> str:
    article = _article(text)
    return f"{article} {text}" if article else text


def _tidy(text: str) -> str:
    return re.sub(r"\s{2,}", " ", text)


# --- choosing one ----------------------------------------------------------------------------------
def answer_outcomes(question: Question, candidate_terms: Sequence[CaptionTerms]) -> np.ndarray:
    """Each candidate's answer as an index: yes/no -> 1/0; choice -> option index, or
    ``len(options)`` for "none of these"."""
    if question.kind == "yes_no":
        return np.array([int(t.has(question.key)) for t in candidate_terms])
    none = len(question.options)
    return np.array([next((i for i, o in enumerate(question.options) if t.has(o)), none)
                     for t in candidate_terms])


def expected_information(question: Question, candidate_terms: Sequence[CaptionTerms],
                         probabilities: np.ndarray) -> float:
    """``sum_a P(a) KL(p(.|a) || p)`` in nats: equal to the entropy of the answer when each
    candidate's answer is determined by its caption."""
    outcomes = answer_outcomes(question, candidate_terms)
    mass = np.bincount(outcomes, weights=np.asarray(probabilities, dtype=np.float64))
    mass = mass[mass > 0] / mass.sum()
    return float(-(mass * np.log(mass)).sum())


def candidate_distribution(similarities: Sequence[float], candidate_terms: Sequence[CaptionTerms],
                           answered: Sequence[tuple[Question, str]] = ()) -> np.ndarray:
    """The paper's ``softmax(similarities)`` over the candidates, with candidates that contradict an
    earlier answer down-weighted by :data:`INCONSISTENT_WEIGHT`."""
    p = softmax(np.asarray(similarities, dtype=np.float64))
    for question, answer in answered:
        chosen = read_answer(question, answer)
        if chosen is None:
            continue
        outcomes = answer_outcomes(question, candidate_terms)
        p = np.where(outcomes == chosen, p, p * INCONSISTENT_WEIGHT)
    return p / p.sum()


def choose_question(questions: Sequence[Question], candidate_terms: Sequence[CaptionTerms],
                    probabilities: np.ndarray) -> Question | None:
    """The question of highest expected information (ties: the first); ``None`` when none informs."""
    best, best_gain = None, 1e-9
    for question in questions:
        gain = expected_information(question, candidate_terms, probabilities)
        if gain > best_gain:
            best, best_gain = question, gain
    return best


# --- reading answers -------------------------------------------------------------------------------
def read_answer(question: Question, answer: str) -> int | None:
    """The outcome index an answer names (as :func:`answer_outcomes` numbers them), or ``None`` when
    it says nothing usable ("unknown", free text that names no option)."""
    text = (answer or "").strip().lower()
    if not text or _UNKNOWN.search(text):
        return None
    if question.kind == "yes_no":
        if _YES.match(text):
            return 1
        if _NO.match(text):
            return 0
        return 1 if question.key in caption_terms(text).keys else None
    said = set(words(text)) | {singular(w) for w in words(text)}
    for i, option in enumerate(question.options):
        label = option.split(" ", 1)[0] if question.noun else option
        if label in said or option in said:
            return i
    if _NO.match(text) or "none" in said or "neither" in said or "other" in said:
        return len(question.options)
    return None


def confirmed_phrase(question: Question, answer: str) -> str | None:
    """What an answer adds to the query: the asked term on "yes", the option picked, else ``None``."""
    outcome = read_answer(question, answer)
    if question.kind == "yes_no":
        return question.phrase if outcome == 1 else None
    if outcome is None or outcome >= len(question.options):
        return None
    option = question.options[outcome]
    if question.noun:
        return option
    if question.key == "who":
        return _with_article(option)
    return f"the {option}" if option != "indoors" else option


def reformulate_with_answers(description: str, turns: Sequence[Mapping[str, Any]]) -> str:
    """The description, then each confirmed term (``"..., a ball, the beach"``).

    ``turns`` are dialogue turns; those with a ``spec`` (an offline question) are read exactly;
    for free questions a free answer that is neither yes/no nor "unknown" is appended as said. What
    a person adds after a yes or no ("no, it is a cat") is kept too.
    """
    parts = [description.strip().rstrip(".").strip()]
    for turn in turns:
        spec = turn.get("spec")
        answer = str(turn.get("answer", ""))
        phrases = [confirmed_phrase(Question.from_json(spec), answer)] if spec else []
        said = _said_besides_yes_or_no(answer)
        if said and (not spec or read_answer(Question.from_json(spec), said) is None):
            phrases.append(said)
        for phrase in phrases:
            if phrase and phrase not in parts:
                parts.append(phrase)
    return ", ".join(p for p in parts if p)


_LEAD = re.compile(r"^\s*(?:(?:yes|yeah|yep|no|nope|not really|correct|right)\b[\s,.;:!-]*)?"
                   r"(?:(?:it'?s|it is|there'?s|there is|there are|they are|i think)\b\s*)?", re.I)


def _said_besides_yes_or_no(answer: str) -> str | None:
    """The informative rest of an answer ("no, it's a cat" -> "a cat"); ``None`` when there is none."""
    if not answer or _UNKNOWN.search(answer):
        return None
    rest = _LEAD.sub("", answer.strip()).strip(" .,!;:")
    return rest if caption_terms(rest).keys else None

