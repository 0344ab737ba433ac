"""The offline PlugIR questioner's questions: built from what tells the candidates apart, chosen by the
expected information of their answer. No generative model is used.

Each round PlugIR has the top-n candidates of the current query and a caption per candidate. The
captions are read into terms (:mod:`.caption_terms`); this module makes yes/no and short-choice
questions from them ("Is there a ball in the photo?", "What colour is the dog: black, brown or
white?", "Where is it: beach, snow or grass?") and asks the one whose answer is expected to say the
most about which candidate is wanted:

    value(q) = EIG(q) + yes_weight * P(yes)
    EIG(q) = sum_a P(a) KL(p(. | a) || p) = H(answer)   (answers read off the captions, noise-free)

where ``p = softmax(scores / temperature)`` is the paper's candidate distribution over the current
candidates (their scores already hold what the user confirmed or denied, see
:mod:`.offline_reranking`), and ``P(yes)`` the mass of candidates whose description holds the term:
how likely the target has it. EIG is the paper's KL criterion taken in expectation over the answer;
the ``P(yes)`` term would prefer, among questions that split the candidates alike, the one a "yes" is
likelier for. On flickr8k-train neither a sharper ``p`` nor ``yes_weight`` > 0 helped, so the graph's
defaults keep a nearly flat ``p`` and plain EIG (BENCHMARKS.md, "PlugIR offline: a chat that listens").
The paper picks, among an LLM's questions that survived its redundancy filter, the one
whose addition to the query moves ``p`` least (guarding against questions about things the target
probably lacks, which an LLM invents); our questions come from the candidates themselves, so that
risk is absent and the expected change is what measures a question's worth (deliberate
difference). The redundancy filter is a rule: nothing the description or an earlier answer already
settles is asked, counting broader words ("two dogs" settles "Is there an animal?"; a "no" to
"animal" settles "dog"), and nothing asked is asked again.

What an answer means is :mod:`.offline_answers`; how answers re-score the ranking is
:mod:`.offline_reranking`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from pictrieve.agents.plugir.caption_terms import (
    PLURAL_ONLY,
    CaptionTerms,
    caption_terms,
    is_action,
    narrower_terms,
    settled_by,
    singular,
    vocabulary,
    words,
)
from pictrieve.agents.plugir.retrieval_context import softmax


MAX_OPTIONS = 3


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
                        asked: Sequence[Question] = (), denied: Iterable[str] = ()) -> list[Question]:
    """Every question the candidates' terms support, minus the settled ones.

    ``known``: the current query (description + confirmed answers); a question about a term it
    holds, or implies through a broader word ("dogs" -> "animal"), is settled. ``denied``: terms
    answered "no"; they settle their narrower words too ("animal" -> "dog") and whatever is said
    of them ("black dog"). ``asked``: earlier questions, never repeated (nor their options).
    """
    vocab = vocabulary()
    known_terms = caption_terms(known) if known else CaptionTerms()
    known_keys = settled_by(known_terms.keys | {singular(w) for w in words(known)})
    denied = set(denied)
    denied_keys = denied | {n for d in denied for n in narrower_terms(d)}
    asked_keys = {q.key for q in asked} | {o for q in asked for o in q.options}

    def fresh(key: str) -> bool:
        thing = key.split()[-1] if key not in known_keys else key
        # A thing named by a phrase is settled by its head word ("beach" settles "sandy beach",
        # "ball" settles "tennis ball"); a colour or count of a known thing is still open.
        said_by_head = key in union.things and " " in key and key.split()[-1] in known_keys
        return (key not in known_keys and key not in asked_keys and key not in denied_keys
                and thing not in denied_keys and not said_by_head)

    union = CaptionTerms()
    for terms in candidate_terms:
        union.merge(terms)
    questions: list[Question] = []
    for topic, words_of_topic in (("place", vocab["places"]), ("who", vocab["people"])):
        options = sorted(k for k in union.things if k in words_of_topic and k not in denied_keys)
        if len(options) >= 2 and not any(o in known_keys for o in options) and topic not in asked_keys:
            questions.append(_choice(topic, options, candidate_terms, template=topic))
    for key in sorted(union.things):
        if key in vocab["places"]:
            continue
        if fresh(key):
            questions.append(_yes_no(key, union.display.get(key, key)))
        # The colour of a thing is worth asking whether or not the thing itself is known.
        colours = sorted(c.split(" ", 1)[0] for c in union.coloured if c.split(" ", 1)[1] == key)
        topic = f"colour of {key}"
        if (len(colours) >= 2 and topic not in asked_keys and key not in denied_keys
                and not any(f"{c} {key}" in known_keys or c in known_terms.colours for c in colours)):
            # "two dogs": each may have its own colour, so the question asks about them all
            several = next((known_terms.display[k].split(" ", 1)[1] for k in sorted(known_terms.counted)
                            if k.split(" ", 1)[1] == key), None)
            questions.append(_choice(topic, [f"{c} {key}" for c in colours], candidate_terms,
                                     template="colour_of_several" if several else "colour_of", noun=key,
                                     shown_noun=several))
    for key in sorted(union.coloured | union.counted):
        if not fresh(key) or key.split(" ", 1)[1] not in union.things:
            continue
        shown = union.display.get(key, key)
        plural = key in union.counted or key.split()[-1] in PLURAL_ONLY
        template = vocab["templates"]["plural_phrase" if plural else "phrase"]
        text = template.format(a=_article(key), term=shown)
        questions.append(Question(text=_tidy(text), kind="yes_no", key=key,
                                  phrase=shown if plural else with_article(shown)))
    for key in sorted(union.actions):
        if fresh(key):
            questions.append(_yes_no(key, key))
    for key in sorted(union.colours):
        if fresh(key):
            text = vocab["templates"]["colour"].format(term=key)
            questions.append(Question(text=text, kind="yes_no", key=key, phrase=f"something {key}"))
    return questions


def _yes_no(key: str, shown: str) -> Question:
    """A yes/no question about a thing ("Is there a ball in the photo?") or, for an action word, in
    the action form ("Is someone or something jumping?")."""
    templates = vocabulary()["templates"]
    if " " not in key and is_action(key):
        return Question(text=templates["action"].format(term=key), kind="yes_no", key=key, phrase=key)
    template = templates["plural_phrase" if key.split()[-1] in PLURAL_ONLY else "object"]
    text = template.format(a=_article(key), term=shown)
    return Question(text=_tidy(text), kind="yes_no", key=key, phrase=with_article(key))


def _choice(topic: str, options: Sequence[str], candidate_terms: Sequence[CaptionTerms], *, template: str,
            noun: str = "", shown_noun: str | None = None) -> Question:
    """A short-choice question over the ``MAX_OPTIONS`` options most candidates have."""
    implied = [settled_by(t.keys) for t in candidate_terms]
    counts = {o: sum(o in keys for keys in implied) for o in options}
    chosen = sorted(options, key=lambda o: (-counts[o], o))[:MAX_OPTIONS]
    labels = [o.split(" ", 1)[0] if noun else with_article(o) if template == "who" else o for o in chosen]
    listed = ", ".join(labels[:-1]) + f" or {labels[-1]}"
    text = vocabulary()["templates"][template].format(noun=shown_noun or noun, options=listed)
    return Question(text=text, kind="choice", key=topic, options=tuple(chosen), noun=noun)


def _article(key: str) -> str:
    head = key.split()[-1]
    if head in vocabulary()["mass_nouns"] or head in PLURAL_ONLY or singular(head) != head:
        return ""
    return "an" if key[0] in "aeiou" else "a"


def with_article(text: str) -> str:
    article = _article(text)
    return f"{article} {text}" if article else text


def _tidy(text: str) -> str:
    return re.sub(r"\s{2,}", " ", text)


# --- choosing one ----------------------------------------------------------------------------------


def answer_outcomes(question: Question, candidate_terms: Sequence[CaptionTerms]) -> np.ndarray:
    """Each candidate's answer as an index: yes/no -> 1/0; choice -> option index, or
    ``len(options)`` for "none of these". A description answers "yes" for what it implies ("a
    puppy": a dog, an animal)."""
    implied = [settled_by(t.keys) for t in candidate_terms]
    if question.kind == "yes_no":
        return np.array([int(question.key in keys) for keys in implied], dtype=int)
    none = len(question.options)
    return np.array([next((i for i, o in enumerate(question.options) if o in keys), none) for keys in implied],
                    dtype=int)


def expected_information(question: Question, candidate_terms: Sequence[CaptionTerms],
                         probabilities: np.ndarray) -> float:
    """``sum_a P(a) KL(p(.|a) || p)`` in nats: equal to the entropy of the answer when each
    candidate's answer is determined by its caption."""
    outcomes = answer_outcomes(question, candidate_terms)
    mass = np.bincount(outcomes, weights=np.asarray(probabilities, dtype=np.float64))
    mass = mass[mass > 0] / mass.sum()
    return float(-(mass * np.log(mass)).sum())


def candidate_distribution(scores: Sequence[float], temperature: float = 1.0) -> np.ndarray:
    """The paper's ``softmax(similarities)`` over the candidates, at ``temperature`` (cosine scores
    differ by hundredths, so at 1.0 the distribution is nearly flat)."""
    return softmax(np.asarray(scores, dtype=np.float64) / max(float(temperature), 1e-6))


def yes_probability(question: Question, candidate_terms: Sequence[CaptionTerms],
                    probabilities: np.ndarray) -> float:
    """The mass of candidates whose description answers anything but "no" / "none of these": how
    likely the target holds what is asked."""
    outcomes = answer_outcomes(question, candidate_terms)
    negative = 0 if question.kind == "yes_no" else len(question.options)
    return float(np.asarray(probabilities, dtype=np.float64)[outcomes != negative].sum())


def question_value(question: Question, candidate_terms: Sequence[CaptionTerms], probabilities: np.ndarray,
                   yes_weight: float = 0.0) -> float:
    """``EIG + yes_weight * P(yes)`` (see the module docstring)."""
    value = expected_information(question, candidate_terms, probabilities)
    if yes_weight:
        value += yes_weight * yes_probability(question, candidate_terms, probabilities)
    return value


def choose_question(questions: Sequence[Question], candidate_terms: Sequence[CaptionTerms],
                    probabilities: np.ndarray, yes_weight: float = 0.0) -> Question | None:
    """The question of highest :func:`question_value` among those that inform at all (ties: the
    first); ``None`` when none splits the candidates."""
    best, best_value = None, -np.inf
    for question in questions:
        if expected_information(question, candidate_terms, probabilities) <= 1e-9:
            continue
        value = question_value(question, candidate_terms, probabilities, yes_weight)
        if value > best_value:
            best, best_value = question, value
    return best
