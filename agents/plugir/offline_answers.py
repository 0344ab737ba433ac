"""What a person's answer to an offline PlugIR question means: confirmed and denied facts, free-text facts.

An answer is read against the question it answers (:func:`answer_facts`): a yes or no, an option of a
choice, and any other thing, colour, action or place the person mentioned ("one is black and one is
brown", "none of these, indoors on a carpet"), which becomes a fact too; a thing mentioned only in
passing is not a yes. :func:`answered_facts` folds a dialogue into what is confirmed and denied, a later
answer overriding an earlier one.

:func:`reformulate_with_answers` keeps the user's description and appends what was confirmed
("..., a black dog, on the beach"), so the query never loses the description (the failure of the
135M model's rewrites). Denied terms stay out of the text: a sentence encoder reads "no snow" as
snow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve.agents.plugir.caption_terms import (
    CaptionTerms,
    broader_terms,
    caption_terms,
    narrower_terms,
    settled_by,
    singular,
    vocabulary,
    words,
)
from pictrieve.agents.plugir.offline_questions import Question, with_article


# "there is a ..." is read from what it names (a passing mention is not a yes), not as a yes itself.
_YES = re.compile(r"^\s*(yes|yeah|yep|yup|y|sure|correct|right|true|indeed)\b", re.I)
_NO = re.compile(r"^\s*(no|nope|n|not|none|nothing|neither|false|there isn'?t|there aren'?t)\b", re.I)
_UNKNOWN = re.compile(r"\b(unknown|not sure|don'?t know|do not know|can'?t tell|cannot tell|no idea|maybe|unsure|"
                      r"uncertain)\b", re.I)


# --- a dialogue's facts ----------------------------------------------------------------------------


class DialogueFacts(TypedDict, total=False):
    """What a dialogue's answers mean, folded answer by answer (the state's ``facts``): the term keys
    ``confirmed`` and ``denied`` (never sharing a key) and the ``phrases`` the answers added to the
    query, in order (before removing those a later answer denied). Plain JSON lists, so any
    checkpointer stores it."""

    confirmed: list[str]
    denied: list[str]
    phrases: list[str]


def fold_facts(facts: DialogueFacts | None, answer: AnswerFacts | DialogueFacts) -> DialogueFacts:
    """``facts`` with one more ``answer`` (:func:`answer_facts`) folded in: the reducer of the state's
    ``facts``, so each answer is read once, when it is given.

    A later answer overrides an earlier one: what it confirms is no longer denied (nor what that
    implies: "a dog" now voids an earlier "no" to "animal"), what it denies is no longer confirmed
    (nor what that covers: "no animal" now voids an earlier "a dog"). Within one answer a thing
    said in words beats an option left unpicked.
    """
    facts = facts or {}
    confirmed, denied = set(facts.get("confirmed", ())), set(facts.get("denied", ()))
    if isinstance(answer, AnswerFacts):
        said, unsaid, phrases = answer.confirmed, answer.denied, answer.phrases
    else:
        said, unsaid, phrases = set(answer.get("confirmed", ())), set(answer.get("denied", ())), \
            tuple(answer.get("phrases", ()))
    newly_denied = set(unsaid) - set(said)
    for key in said:
        denied.discard(key)
        denied.difference_update(broader_terms(key))
    for key in newly_denied:
        confirmed.discard(key)
        confirmed.difference_update(narrower_terms(key))
    confirmed |= set(said)
    denied |= newly_denied
    return DialogueFacts(confirmed=sorted(confirmed), denied=sorted(denied),
                         phrases=[*facts.get("phrases", ()), *phrases])


def turn_facts(turn: Mapping[str, Any]) -> AnswerFacts:
    """What one dialogue turn's answer says, read against its question when it was an offline one."""
    spec = turn.get("spec")
    return answer_facts(Question.from_json(spec) if spec else None, str(turn.get("answer", "")))


def dialogue_facts(turns: Sequence[Mapping[str, Any]]) -> DialogueFacts:
    """Every turn's answer folded (:func:`fold_facts`): what a dialogue means, read from its text."""
    facts: DialogueFacts = {}
    for turn in turns:
        facts = fold_facts(facts, turn_facts(turn))
    return facts


def answered_facts(turns: Sequence[Mapping[str, Any]]) -> tuple[set[str], set[str]]:
    """``(confirmed, denied)`` term keys of every answer so far (:func:`dialogue_facts`)."""
    facts = dialogue_facts(turns)
    return set(facts.get("confirmed", ())), set(facts.get("denied", ()))


# --- reading answers -------------------------------------------------------------------------------
# What a person answers is read clause by clause (split at punctuation and "but"): a leading yes, no or
# "none of these"; then what each clause says, as caption terms. A clause after "no"/"not"/"without"
# denies what it names; a clause that mentions something only in passing ("only a jar of pasta behind
# the toaster" to "Is there food?") says nothing; every other clause's things, colours and actions are
# facts ("none of these, indoors on a carpet next to brick steps": indoors, carpet, brick steps).
_CLAUSE = re.compile(r"[,;.!?]+|\s+(?:but|although|though|whereas)\s+", re.I)
_NEGATION = re.compile(r"\b(?:no|not|without|nothing|never|neither|nor|isn'?t|aren'?t|wasn'?t|weren'?t|"
                       r"doesn'?t|don'?t)\b", re.I)
# Captions name things after an article or a preposition ("in the snow"); a person answering says "there is
# snow" or "it's outside". Such a copula opens a noun phrase in an answer, as "with" does in a caption.
_COPULA = re.compile(r"\b(?:there(?:'s|\s+is|\s+are|\s+was|\s+were)|it(?:'s|\s+is|\s+was)|"
                     r"they(?:'re|\s+are|\s+were)|(?:this|that)(?:'s|\s+is))\b", re.I)
_SCENE_WORDS = frozenset({"outside", "outdoors", "inside", "indoors", "underwater", "upstairs", "downstairs"})
"""Where a photo was taken, said as one word: facts of an answer, though a caption's stop words drop them."""


@dataclass(frozen=True)


class AnswerFacts:
    """What one answer says: term keys it ``confirmed`` and ``denied``, and the ``phrases`` it adds to
    the query text, in order (denied things never enter the text)."""

    confirmed: frozenset[str] = frozenset()
    denied: frozenset[str] = frozenset()
    phrases: tuple[str, ...] = ()


@dataclass(frozen=True)


class _Told:
    """An answer's clauses past its lead: those that say something (with their terms), what the
    negated parts name, and whether some clause was only in passing."""

    said: tuple[tuple[str, CaptionTerms], ...]
    unsaid: CaptionTerms
    passing: bool

    def keys(self) -> set[str]:
        return {key for _, terms in self.said for key in terms.keys}

    def words(self) -> set[str]:
        found = {w for clause, _ in self.said for w in words(clause)}
        return found | {singular(w) for w in found}


def _asked_words(question: Question | None) -> set[str]:
    """The words a clause would use to name what ``question`` asks about (its term, or an option)."""
    if question is None:
        return set()
    if question.kind == "yes_no":
        return {question.key}
    return set(question.options) | {o.split(" ", 1)[0] if question.noun else o for o in question.options}


def _in_passing(question: Question | None, clause: str) -> bool:
    """Whether ``clause`` mentions things only in passing: a background or smallness marker anywhere
    ("in the background", "a bit of"), or "only"/"just"/"a little" with what was asked about (or
    something it covers: "only a jar of pasta" to "Is there food?")."""
    lowered = " " + " ".join(words(clause)) + " "
    passing = vocabulary()["in_passing"]
    if any(f" {marker} " in lowered for marker in passing["always"]):
        return True
    if not any(f" {marker} " in lowered for marker in passing["with_the_asked"]):
        return False
    asked = _asked_words(question)
    said = settled_by(caption_terms(clause).keys) | set(words(clause))
    return bool(asked & said)


def _told(question: Question | None, answer: str) -> _Told:
    rest = _LEAD.sub("", answer.strip(), count=1)
    said: list[tuple[str, CaptionTerms]] = []
    unsaid = CaptionTerms()
    passing = False
    for clause in _CLAUSE.split(rest):
        clause = clause.strip(" .,!;:-")
        if not clause or _UNKNOWN.search(clause):
            continue
        if _in_passing(question, clause):
            passing = True
            continue
        negation = _NEGATION.search(clause)
        if negation:
            unsaid.merge(_answer_terms(clause[negation.end():]))
            clause = clause[:negation.start()].strip(" .,!;:-")
        terms = _answer_terms(clause) if clause else CaptionTerms()
        if terms.keys:
            said.append((clause, terms))
    return _Told(tuple(said), unsaid, passing)


def _answer_terms(clause: str) -> CaptionTerms:
    """The caption terms of an answer's clause, reading a copula as opening a noun phrase ("yes, and there is
    snow": snow) and one-word scenes ("it's outside") as things."""
    terms = caption_terms(_COPULA.sub(" with ", clause))
    for word in words(clause):
        if word in _SCENE_WORDS and word not in terms.things:
            terms.things.add(word)
            terms.display.setdefault(word, word)
    return terms


def _fact_keys(terms: CaptionTerms) -> set[str]:
    return terms.things | terms.coloured | terms.counted | terms.actions | terms.colours


def read_answer(question: Question, answer: str) -> int | None:
    """The outcome index an answer names (as :func:`answer_outcomes` numbers them), or ``None`` when
    it says nothing usable ("unknown", free text that names no option, or names the asked thing
    only in passing)."""
    text = (answer or "").strip()
    if not text or _UNKNOWN.search(text):
        return None
    if question.kind == "yes_no":
        if _YES.match(text):
            return 1
        if _NO.match(text):
            return 0
        told = _told(question, text)
        if question.key in settled_by(told.keys()):
            return 1
        return 0 if question.key in settled_by(told.unsaid.keys) else None
    said = _told(question, text).words()
    for i, option in enumerate(question.options):
        label = option.split(" ", 1)[0] if question.noun else option
        if label in said or option in said:
            return i
    lowered = set(words(text))
    if _NO.match(text) or lowered & {"none", "neither", "other"}:
        return len(question.options)
    return None


def other_values(question: Question, answer: str) -> list[str]:
    """For a choice question, the answers of the same kind outside the options, as term keys: colours
    for a colour question ("red" -> "red dog"), scene words for "where", person words for "who";
    none for "yes", or "black" to "Where is it?"."""
    if question.kind != "choice":
        return []
    vocab = vocabulary()
    said = [w for w in dict.fromkeys(singular(w) for clause, _ in _told(question, answer).said for w in words(clause))]
    if question.noun:
        return [f"{w} {question.noun}" for w in said if w in vocab["colours"] and f"{w} {question.noun}" not in question.options]
    kind = vocab["places"] if question.key == "place" else vocab["people"] if question.key == "who" else ()
    return [w for w in said if w in kind and w not in question.options]


def other_value(question: Question, answer: str) -> str | None:
    """The first of :func:`other_values`, or ``None``."""
    values = other_values(question, answer)
    return values[0] if values else None


def answer_facts(question: Question | None, answer: str) -> AnswerFacts:
    """What ``answer`` to ``question`` (``None``: a free question) says, as facts and query phrases.

    - yes/no: "yes" confirms the asked term, "no" denies it; with no yes or no, the answer confirms it
      when it names it (or something narrower: "a puppy" to "Is there a dog?") other than in passing.
    - choice: every option named is confirmed ("one is black and one is brown": both), as is a value
      of the same kind outside the options ("red"); then the options not named are denied, as they
      are by "none of these".
    - Every clause's other words are facts too: its things, colours and actions are confirmed and the
      clause is added to the query as said; a negated clause denies what it names; a clause in
      passing adds nothing. "yes, a red one" to "Is there a ball?" confirms "red ball".
    """
    text = (answer or "").strip()
    if not text:
        return AnswerFacts()
    told = _told(question, text)
    confirmed = {key for _, terms in told.said for key in _fact_keys(terms)}
    denied = _fact_keys(told.unsaid) - confirmed
    covered: set[str] = set()  # what the question's own phrases already say
    own: list[str] = []
    if question is not None and question.kind == "yes_no":
        outcome = read_answer(question, text)
        if outcome == 1:
            confirmed.add(question.key)
            colours = [w for _, terms in told.said if not terms.things for w in sorted(terms.colours)]
            if colours and " " not in question.key:  # "yes, a red one": the colour of the asked thing
                confirmed.add(f"{colours[0]} {question.key}")
                confirmed -= set(colours)  # the colour is the asked thing's, not a fact of its own
                own.append(with_article(f"{colours[0]} {question.key}"))
                covered |= set(colours)
            elif _YES.match(text):  # a yes read from the words ("a pizza" to "food?") adds those words
                own.append(question.phrase)
            covered |= settled_by({question.key})
        elif outcome == 0:
            denied.add(question.key)
            confirmed.discard(question.key)
    elif question is not None:
        said = told.words()
        named = [o for o in question.options
                 if (o.split(" ", 1)[0] if question.noun else o) in said or o in said]
        chosen = named + other_values(question, text)
        if chosen or read_answer(question, text) == len(question.options):
            denied |= {o for o in question.options if o not in chosen}
        confirmed |= set(chosen)
        if question.noun:  # "black" said of the dog is the black dog's colour, not a fact of its own
            confirmed -= {o.split(" ", 1)[0] for o in chosen}
        own += [_option_phrase(question, o) for o in chosen]
        covered |= settled_by(chosen) | {o.split(" ", 1)[0] for o in chosen}
    denied -= confirmed
    phrases = [clause for clause, terms in told.said if _fact_keys(terms) - covered]
    told_words = {w for clause in phrases for w in words(clause)}
    # An option the person's own words already say ("indoors on a carpet") is not added twice.
    own = [p for p in own if p and not set(words(p)) - {"a", "an", "the", "some"} <= told_words]
    return AnswerFacts(frozenset(confirmed), frozenset(denied), tuple(own + phrases))


def _option_phrase(question: Question, option: str) -> str:
    """A choice answer as query words: "black dog", "the beach", "indoors", "a man"."""
    if question.noun:
        return option
    if question.key == "who":
        return with_article(option)
    return f"the {option}" if option != "indoors" else option


def is_valid_answer(question: Question, answer: str) -> bool:
    """Whether ``answer`` answers ``question``. A yes/no question takes anything (a person may say
    more than yes or no); a choice question takes an option, "none of these", a value of the same
    kind outside the options (:func:`other_value`), "don't know", or words that tell something
    (a thing or an action: "on a carpet"), not "yes" or a lone unrelated word ("black" to "Where?")."""
    if question.kind != "choice":
        return True
    if read_answer(question, answer) is not None or other_value(question, answer) is not None \
            or _UNKNOWN.search(answer or ""):
        return True
    return any(terms.things or terms.actions for _, terms in _told(question, answer or "").said)


def clarified(question: Question) -> str:
    """The question again with its choices spelled out, for an answer that was not one of them."""
    labels = [o.split(" ", 1)[0] if question.noun else o for o in question.options]
    listed = ", ".join(labels) + f" or {vocabulary()['none_option']}"
    return vocabulary()["templates"]["ask_again"].format(question=question.text, options=listed)


def query_parts(description: str, facts: DialogueFacts | Sequence[Mapping[str, Any]]) -> list[str]:
    """The description, then each phrase the answers added, in order and without repeats.

    ``facts`` are a dialogue's folded facts (the state's ``facts``), or its turns, read here
    (:func:`dialogue_facts`). A phrase whose thing a later answer denied is left out; denied things
    never enter the text (a sentence encoder reads "no snow" as snow).
    """
    if not isinstance(facts, Mapping):
        facts = dialogue_facts(facts)
    denied = set(facts.get("denied", ()))
    parts = [description.strip().rstrip(".").strip()]
    for phrase in facts.get("phrases", ()):
        if phrase and phrase not in parts and not caption_terms(phrase).things & denied:
            parts.append(phrase)
    return [p for p in parts if p]


def reformulate_with_answers(description: str, facts: DialogueFacts | Sequence[Mapping[str, Any]]) -> str:
    """The description, then what each answer added (``"..., a ball, the beach, on a carpet"``):
    :func:`query_parts` joined."""
    return ", ".join(query_parts(description, facts))


_LEAD = re.compile(r"^\s*(?:(?:yes|yeah|yep|yup|sure|no|nope|nah|not really|correct|right|none of (?:these|them|those)|"
                   r"none|neither)\b[\s,.;:!-]*)?"
                   r"(?:(?:it'?s|it is|there'?s|there is|there are|they'?re|they are|i think)\b\s*)?", re.I)
