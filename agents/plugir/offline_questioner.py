"""An offline PlugIR questioner: questions built from what tells the candidates apart, chosen by the
expected information of their answer. No generative model is used.

Each round PlugIR has the top-n candidates of the current query and a caption per candidate. This
module reads the captions into terms (:mod:`.caption_terms`), makes yes/no and short-choice
questions from them ("Is there a ball in the photo?", "What colour is the dog: black, brown or
white?", "Where is it: beach, snow or grass?") and asks the one whose answer is expected to say the
most about which candidate is wanted:

    value(q) = EIG(q) + yes_weight * P(yes)
    EIG(q) = sum_a P(a) KL(p(. | a) || p) = H(answer)   (answers read off the captions, noise-free)

where ``p = softmax(scores / temperature)`` is the paper's candidate distribution over the current
candidates (their scores already hold what the user confirmed or denied, see
:func:`answer_adjustments`), and ``P(yes)`` the mass of candidates whose description holds the term:
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

Answers change the ranking both ways (:func:`answer_adjustments`): candidates whose description
implies a confirmed term gain ``confirm_weight``, those implying a denied one lose ``deny_weight``
(the graph scales both by the candidates' score spread; a "no" was what most answers were, and before
this it changed nothing). :func:`vector_evidence` is the same evidence read off the photos' own
vectors, for photos without a description (measured, off by default).

:func:`reformulate_with_answers` keeps the user's description and appends what was confirmed
("..., a black dog, on the beach"), so the query never loses the description (the failure of the
135M model's rewrites). Denied terms stay out of the text: a sentence encoder reads "no snow" as
snow.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from pictrieve.agents.plugir.caption_terms import (
    PLURAL_ONLY,
    CaptionTerms,
    broader_terms,
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

# "there is a ..." is read from what it names (a passing mention is not a yes), not as a yes itself.
_YES = re.compile(r"^\s*(yes|yeah|yep|yup|y|sure|correct|right|true|indeed)\b", re.I)
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
                                  phrase=shown if plural else _with_article(shown)))
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
    return Question(text=_tidy(text), kind="yes_no", key=key, phrase=_with_article(key))


def _choice(topic: str, options: Sequence[str], candidate_terms: Sequence[CaptionTerms], *, template: str,
            noun: str = "", shown_noun: str | None = None) -> Question:
    """A short-choice question over the ``MAX_OPTIONS`` options most candidates have."""
    implied = [settled_by(t.keys) for t in candidate_terms]
    counts = {o: sum(o in keys for keys in implied) for o in options}
    chosen = sorted(options, key=lambda o: (-counts[o], o))[:MAX_OPTIONS]
    labels = [o.split(" ", 1)[0] if noun else _with_article(o) if template == "who" else o for o in chosen]
    listed = ", ".join(labels[:-1]) + f" or {labels[-1]}"
    text = vocabulary()["templates"][template].format(noun=shown_noun or noun, options=listed)
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


# --- what answers do to the ranking ------------------------------------------------------------------
def answered_facts(turns: Sequence[Mapping[str, Any]]) -> tuple[set[str], set[str]]:
    """``(confirmed, denied)`` term keys of every answer so far (:func:`answer_facts` of each turn).

    A later answer overrides an earlier one: what it confirms is no longer denied (nor what that
    implies: "a dog" now voids an earlier "no" to "animal"), what it denies is no longer confirmed
    (nor what that covers: "no animal" now voids an earlier "a dog"). Within one answer a thing
    said in words beats an option left unpicked. The two sets never share a key.
    """
    confirmed: set[str] = set()
    denied: set[str] = set()
    for turn in turns:
        spec = turn.get("spec")
        facts = answer_facts(Question.from_json(spec) if spec else None, str(turn.get("answer", "")))
        newly_denied = facts.denied - facts.confirmed
        for key in facts.confirmed:
            denied.discard(key)
            denied.difference_update(broader_terms(key))
        for key in newly_denied:
            confirmed.discard(key)
            confirmed.difference_update(narrower_terms(key))
        confirmed |= facts.confirmed
        denied |= newly_denied
    return confirmed, denied


def implies(terms: CaptionTerms, key: str) -> bool:
    """Whether a description's terms say ``key`` or something narrower ("a puppy" implies "dog" and
    "animal"; "a tennis ball" implies "ball")."""
    return key in settled_by(terms.keys)


def answer_adjustments(candidate_terms: Sequence[CaptionTerms | None], confirmed: Iterable[str],
                       denied: Iterable[str], *, confirm_weight: float, deny_weight: float,
                       trust: Sequence[float] | None = None) -> np.ndarray:
    """What the answers add to each candidate's score: ``+confirm_weight`` per confirmed term its
    description implies, ``-deny_weight`` per denied one, times the description's ``trust`` (1 for a
    stored caption, less for a captioner's guess). ``None`` terms (no description) get 0."""
    confirmed, denied = list(confirmed), list(denied)
    adjustments = np.zeros(len(candidate_terms))
    for i, terms in enumerate(candidate_terms):
        if terms is None:
            continue
        settled = settled_by(terms.keys)
        gain = confirm_weight * sum(k in settled for k in confirmed) - deny_weight * sum(k in settled for k in denied)
        adjustments[i] = gain * (1.0 if trust is None else trust[i])
    return adjustments


def term_phrase(key: str) -> str:
    """A term as a short phrase to embed: "a dog", "some grass", "someone jumping", "black dog"."""
    if " " not in key and is_action(key):
        return f"someone {key}"
    return _with_article(key) if " " not in key else key


def vector_evidence(term_vectors: np.ndarray, image_vectors: np.ndarray) -> np.ndarray:
    """``(terms, images)``: each term's text-image similarity to each image, standardised over the
    images (how much more than the others an image looks like the term). Evidence that needs no
    description: the images' own vectors in the embedder's text-image space."""
    similarities = np.asarray(term_vectors, dtype=np.float64) @ np.asarray(image_vectors, dtype=np.float64).T
    spread = np.maximum(similarities.std(axis=1, keepdims=True), 1e-6)
    return (similarities - similarities.mean(axis=1, keepdims=True)) / spread


# --- reading answers -------------------------------------------------------------------------------
# What a person answers is read clause by clause (split at punctuation and "but"): a leading yes, no or
# "none of these"; then what each clause says, as caption terms. A clause after "no"/"not"/"without"
# denies what it names; a clause that mentions something only in passing ("only a jar of pasta behind
# the toaster" to "Is there food?") says nothing; every other clause's things, colours and actions are
# facts ("none of these, indoors on a carpet next to brick steps": indoors, carpet, brick steps).
_CLAUSE = re.compile(r"[,;.!?]+|\s+(?:but|although|though|whereas)\s+", re.I)
_NEGATION = re.compile(r"\b(?:no|not|without|nothing|never|neither|nor|isn'?t|aren'?t|wasn'?t|weren'?t|"
                       r"doesn'?t|don'?t)\b", re.I)


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
            unsaid.merge(caption_terms(clause[negation.end():]))
            clause = clause[:negation.start()].strip(" .,!;:-")
        terms = caption_terms(clause) if clause else CaptionTerms()
        if terms.keys:
            said.append((clause, terms))
    return _Told(tuple(said), unsaid, passing)


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
                own.append(_with_article(f"{colours[0]} {question.key}"))
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
        return _with_article(option)
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


def confirmed_phrase(question: Question, answer: str) -> str | None:
    """What an answer adds to the query for the question itself: the asked term on "yes", the option
    picked (or a value of the same kind outside the options), else ``None``."""
    outcome = read_answer(question, answer)
    if question.kind == "yes_no":
        return question.phrase if outcome == 1 else None
    if outcome is not None and outcome < len(question.options):
        return _option_phrase(question, question.options[outcome])
    option = other_value(question, answer)
    return _option_phrase(question, option) if option else None


def query_parts(description: str, turns: Sequence[Mapping[str, Any]]) -> list[str]:
    """The description, then each phrase the answers added, in order and without repeats.

    ``turns`` are dialogue turns; those with a ``spec`` (an offline question) are read against it,
    others as free answers (:func:`answer_facts`). A phrase whose thing a later answer denied is left
    out; denied things never enter the text (a sentence encoder reads "no snow" as snow).
    """
    _, denied = answered_facts(turns)
    parts = [description.strip().rstrip(".").strip()]
    for turn in turns:
        spec = Question.from_json(turn["spec"]) if turn.get("spec") else None
        for phrase in answer_facts(spec, str(turn.get("answer", ""))).phrases:
            if phrase and phrase not in parts and not caption_terms(phrase).things & denied:
                parts.append(phrase)
    return [p for p in parts if p]


def reformulate_with_answers(description: str, turns: Sequence[Mapping[str, Any]]) -> str:
    """The description, then what each answer added (``"..., a ball, the beach, on a carpet"``):
    :func:`query_parts` joined."""
    return ", ".join(query_parts(description, turns))


_LEAD = re.compile(r"^\s*(?:(?:yes|yeah|yep|yup|sure|no|nope|nah|not really|correct|right|none of (?:these|them|those)|"
                   r"none|neither)\b[\s,.;:!-]*)?"
                   r"(?:(?:it'?s|it is|there'?s|there is|there are|they'?re|they are|i think)\b\s*)?", re.I)
