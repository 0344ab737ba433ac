"""What a caption says, as a set of comparable terms: the offline questioner's and the caption user's
shared reading of short photo descriptions.

No tagger model ships in any package we can depend on offline, so nouns are found the way simple
caption English marks them: the word after a determiner, number, colour or possessive ("a dog",
"two dogs", "the black dog", "her red hat"), extended to a compound when a second noun-like word
follows ("a tennis ball"). Words ending in -ing that do not follow a determiner are actions
("running"). Plurals are folded to the singular so "dogs" matches "dog".

A :class:`CaptionTerms` holds the terms of one or more captions under stable keys:

- ``dog``, ``tennis ball``: things; ``running``: actions; ``red``: colours seen anywhere;
- ``black dog``: a colour attached to a thing; ``two dog``: a number attached to a thing.

An -ing word is an action wherever it stands ("a jumping dog": the action ``jumping`` and the thing
``dog``), unless it is one of the listed -ing nouns ("a building").

The word lists (colours, numbers, scene words, mass nouns, -ing nouns, ignored words) are data, in
``prompts/plugir/offline_questions.yaml``; which words are broader than others ("a dog is an
animal") is ``prompts/plugir/hypernyms.yaml`` (:func:`broader_terms`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable

from pictrieve import prompts

_WORD = re.compile(r"[a-z]+")
_DETERMINERS = frozenset({"a", "an", "the", "his", "her", "their", "its", "some", "this", "that", "these",
                          "those", "my", "our", "your", "another", "each", "every"})
# A noun may follow a preposition without a determiner: "runs through snow", "a man with glasses".
_PREPOSITIONS = frozenset({"in", "on", "at", "through", "with", "by", "near", "over", "under", "into", "onto",
                           "across", "along", "down", "up", "behind", "beside", "of", "from", "past", "around"})
_IRREGULAR = {"men": "man", "women": "woman", "children": "child", "people": "person", "feet": "foot",
              "teeth": "tooth", "mice": "mouse", "geese": "goose", "knives": "knife", "leaves": "leaf",
              "wolves": "wolf", "shelves": "shelf", "calves": "calf"}
# Plural-only nouns: never folded ("clothes" is not a "clothe"), never the first word of a compound.
PLURAL_ONLY = frozenset({"clothes", "pants", "shorts", "jeans", "glasses", "goggles", "sunglasses", "trunks",
                          "stairs", "steps", "overalls", "tights", "scissors", "indoors"})
_NOT_PLURAL = ("ss", "us", "is", "ous", "ics")
_BEFORE_TO = frozenset({"next", "close", "up"})  # "next to", "close to", "up to": "to" then opens a noun


@lru_cache(maxsize=1)
def vocabulary() -> dict[str, Any]:
    """The questioner's templates and word lists (``prompts/plugir/offline_questions.yaml``)."""
    data = dict(prompts.data("plugir", "offline_questions"))
    for key in ("colours", "numbers", "places", "people", "mass_nouns", "ignored", "ing_nouns", "not_things",
                "ed_nouns"):
        data[key] = frozenset(data[key])
    return data


# Nouns whose "+y" form is an adjective of a scene ("grassy", "sandy", "furry"), besides the scene
# words and mass nouns of the vocabulary.
_Y_BASES = frozenset({"sun", "fur", "fluff", "rock", "leaf", "hair", "cloud", "rain", "wind", "wood", "shag", "stone",
                      "curl", "bush", "hill", "dust", "dirt", "mud", "ice", "sand", "snow", "grass", "water", "fog"})


@lru_cache(maxsize=16_384)
def is_modifier(word: str) -> bool:
    """Whether a word before a noun only describes it and is no thing to ask about: the ignored words,
    the listed non-things ("piece", "trick", "long", "older"), and words that read as adjectives:
    -ful, -less, -ous, -ish ("colorful", "shirtless"), -ed but for listed nouns ("haired", "fenced";
    not "bed"), a scene word + y ("grassy", "sandy", "muddy"). Colours and numbers are read apart."""
    vocab = vocabulary()
    if word in vocab["colours"] or word in vocab["numbers"]:
        return False
    if word in vocab["ignored"] or word in vocab["not_things"]:
        return True
    if len(word) > 5 and word.endswith(("ful", "less", "ous", "ish")):
        return True
    if len(word) > 4 and word.endswith("ed") and word not in vocab["ed_nouns"]:
        return True
    if len(word) > 3 and word.endswith("y"):
        bases = _Y_BASES | vocab["places"] | vocab["mass_nouns"]
        return word[:-1] in bases or (word[-2] == word[-3] and word[:-2] in bases)
    return False


def is_action(word: str) -> bool:
    """Whether a single word names an action ("jumping") rather than a thing ("building")."""
    return len(word) > 5 and word.endswith("ing") and word not in vocabulary()["ing_nouns"]


@lru_cache(maxsize=1)
def _narrower() -> dict[str, frozenset[str]]:
    """Every word of the hypernym table with all the words it covers, transitively."""
    direct = {singular(k): {singular(w) for w in v} for k, v in prompts.data("plugir", "hypernyms").items()}
    closed: dict[str, frozenset[str]] = {}

    def cover(word: str, seen: frozenset[str] = frozenset()) -> frozenset[str]:
        if word not in closed:
            found = set(direct.get(word, ()))
            for narrower in direct.get(word, ()):
                if narrower not in seen:
                    found |= cover(narrower, seen | {word})
            closed[word] = frozenset(found - {word})
        return closed[word]

    return {word: cover(word) for word in direct}


@lru_cache(maxsize=4096)
def broader_terms(key: str) -> frozenset[str]:
    """The words a term implies: its head noun ("ball" for "tennis ball") and every broader word of
    the hypernym table ("dog" and "animal" for "puppy"). A coloured or counted term implies its
    thing ("black dog" -> "dog", "animal")."""
    head = key.split()[-1]
    implied = {head} if head != key else set()
    implied |= {broad for broad, narrow in _narrower().items() if head in narrow}
    return frozenset(implied - {key})


def settled_by(keys: Iterable[str]) -> set[str]:
    """``keys`` and every term they imply (:func:`broader_terms`): what a description holding
    ``keys`` already answers "yes" to."""
    keys = set(keys)
    return keys | {broad for key in keys for broad in broader_terms(key)}


def narrower_terms(key: str) -> frozenset[str]:
    """The words the hypernym table puts under ``key`` ("dog", "puppy", ... for "animal"): what a
    "no" to ``key`` denies as well."""
    return _narrower().get(key, frozenset())


@lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS) | vocabulary()["ignored"]


def singular(word: str) -> str:
    """``dogs`` -> ``dog``, ``puppies`` -> ``puppy``, ``benches`` -> ``bench``; others unchanged."""
    if word in PLURAL_ONLY:
        return word
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(_NOT_PLURAL):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters only)."""
    return _WORD.findall(text.lower())


@dataclass
class CaptionTerms:
    """Terms of a caption (or of several, merged). ``display`` keeps a readable form per key."""

    things: set[str] = field(default_factory=set)
    actions: set[str] = field(default_factory=set)
    colours: set[str] = field(default_factory=set)
    coloured: set[str] = field(default_factory=set)  # "black dog"
    counted: set[str] = field(default_factory=set)  # "two dog"
    display: dict[str, str] = field(default_factory=dict)  # "two dog" -> "two dogs"

    @property
    def keys(self) -> set[str]:
        """Every term key, of every kind."""
        return self.things | self.actions | self.colours | self.coloured | self.counted

    def has(self, key: str) -> bool:
        return key in self.keys

    def merge(self, other: "CaptionTerms") -> "CaptionTerms":
        for name in ("things", "actions", "colours", "coloured", "counted"):
            getattr(self, name).update(getattr(other, name))
        for key, text in other.display.items():
            self.display.setdefault(key, text)
        return self


def caption_terms(captions: str | Iterable[str]) -> CaptionTerms:
    """The terms of one caption, or of several merged."""
    if isinstance(captions, str):
        return _terms_of(captions)
    merged = CaptionTerms()
    for text in captions:
        merged.merge(_terms_of(text))
    return merged


@lru_cache(maxsize=65_536)
def _terms_cached(text: str) -> CaptionTerms:
    vocab, stop = vocabulary(), _stop_words()
    colours, numbers = vocab["colours"], vocab["numbers"]
    tokens = words(text)
    terms = CaptionTerms()
    after_determiner = set()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in colours:
            terms.colours.add(token)
        opens = (token in _DETERMINERS or token in numbers or token in colours or token in _PREPOSITIONS
                 or (token == "to" and i > 0 and tokens[i - 1] in _BEFORE_TO))  # "next to brick steps"
        if not opens and i > 0:
            i += 1
            continue
        # Walk over modifiers (colours, numbers, "and" between colours, ignored adjectives) to the
        # noun. A caption may open with its noun ("Dog runs ..."): then the walk starts at word 0.
        chain_colours = [token] if token in colours else []
        number = token if token in numbers else None
        j = i + 1 if opens else i
        while j < len(tokens) and (tokens[j] in colours or tokens[j] in numbers or is_action(tokens[j])
                                   or (tokens[j] == "and" and j + 1 < len(tokens) and tokens[j + 1] in colours)
                                   or (is_modifier(tokens[j]) and tokens[j] not in _DETERMINERS)):
            if is_action(tokens[j]):  # "a jumping dog": an action, then the thing
                terms.actions.add(tokens[j])
                terms.display.setdefault(tokens[j], tokens[j])
            elif tokens[j] in colours:
                chain_colours.append(tokens[j])
                terms.colours.add(tokens[j])
            elif tokens[j] in numbers:
                number = tokens[j]
            j += 1
        if (j >= len(tokens) or tokens[j] in stop or tokens[j] in _DETERMINERS or len(tokens[j]) < 3
                or is_modifier(tokens[j])):
            i = max(j, i + 1)
            continue
        noun_words = [tokens[j]]
        following = tokens[j + 1] if j + 1 < len(tokens) else ""
        # "a tennis ball": a second noun-like word after a singular one (not a verb like "runs").
        if (following and following not in stop and len(following) >= 3 and not following.endswith("ing")
                and singular(tokens[j]) == tokens[j] and tokens[j] not in PLURAL_ONLY
                and singular(following) == following
                and following not in colours and not is_modifier(following)):
            noun_words.append(following)
        surface = " ".join(noun_words)
        key = " ".join(noun_words[:-1] + [singular(noun_words[-1])])
        terms.things.add(key)
        terms.display.setdefault(key, key)
        after_determiner.update(range(j, j + len(noun_words)))
        for colour in chain_colours:
            terms.coloured.add(f"{colour} {key}")
            terms.display.setdefault(f"{colour} {key}", f"{colour} {key}")
        if number:
            terms.counted.add(f"{number} {key}")
            terms.display.setdefault(f"{number} {key}", f"{number} {surface}")
        i = j + len(noun_words)
    for position, token in enumerate(tokens):
        if is_action(token) and position not in after_determiner and token not in stop:
            terms.actions.add(token)
            terms.display.setdefault(token, token)
    return terms


def _terms_of(text: str) -> CaptionTerms:
    cached = _terms_cached(text)
    copy = CaptionTerms()
    return copy.merge(cached)
