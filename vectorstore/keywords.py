"""The keyword side of hybrid search: BM25 over the words a photo carries, fused with the vector ranking.

People search their photos by the words they gave them: a folder named ``lisbon/``, a file named
``germany_2019_beach.jpg``, a caption, the place it was taken, the text in the picture. An image
embedder knows none of these, so :func:`hybrid_search` ranks the gallery twice, by vectors and by
BM25 over those words (:data:`KEYWORD_FIELDS`), and fuses the two rankings by reciprocal rank fusion.

BM25 is computed here (:class:`KeywordIndex`, numpy, Lucene's formula as ``bm25s`` computes it: a test checks
the scores against ``bm25s`` where it is installed). ``bm25s`` itself, used before, rebuilds its index from every
record after any change (about 2 minutes at 100,000 photos, each search after a write) and took about a second
to import; ``rank_bm25`` has had no release since 2022 and scores every record in pure Python per query.

Freshness: an embedded gallery's index is kept per process and saved in the user's cache (never in the gallery's
folder), tagged with the collection's write sequence number in Chroma's own file. Each search first reads that
number (one tiny query; every writer moves it: any process, a raw Chroma handle, langchain-chroma); when it moved,
the records written since (found by :mod:`~pictrieve.vectorstore.changes`, whoever wrote them) are applied, so no
result comes from an index older than the gallery was when the search began, and a write of ``k`` photos costs
reading ``k``. A ``chroma run`` server or an in-memory store has no such feed: there the index is built from every
record for each search.

Ranks on the keyword side are tie-aware (photos with the same BM25 score share a rank), so a word every
photo carries (a common parent folder) shifts nothing. Photos without a single query word get no
keyword contribution at all.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
import threading
import unicodedata
import uuid
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Iterator

import numpy as np

from pictrieve.vectorstore.atomic_files import folder_lock, write_atomically
from pictrieve.vectorstore.changes import cannot_save, embedded_location, index_folder, position, read_fields, snapshot
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.photo_filter import PhotoFilter
from pictrieve.vectorstore.relevance import stored_objects

logger = logging.getLogger(__name__)

KEYWORD_FIELDS: tuple[str, ...] = ("folder", "name", "captions", "place", "photo_text")
"""The words a photo carries: its folder (last :data:`FOLDER_PARTS` parts), its file name (without the
extension), its captions, its place name (``place``: city, region, country code) and the text read from
the photo (``photo_text``, stored by OCR when it ran)."""

FOLDER_PARTS = 3
"""How many trailing folder names count (``.../2019/germany_2019/day1``): the ones people name; the rest
(``/home/me/Pictures``) is shared by every photo."""

RRF_K = 2
"""Reciprocal rank fusion constant. Cormack et al. (2009) use 60; chosen here on flickr8k-train (a 4,000-caption
sample, each photo's other captions as its words; best MRR of a grid of 1-100 x weights 0.25-2,
benchmarks/results/hybrid/sweep-flickr8k-train.json): 60 with weight 1 lost recall@10 there (0.899 against 0.929 by
vectors alone); small constants let the vector side's first places count."""

KEYWORD_WEIGHT = 0.75
"""Weight of the keyword ranking against the vector ranking's 1 in the fusion (chosen with :data:`RRF_K`)."""

ALL_WORDS_FIRST = True
"""Photos whose words hold every word of the query that any photo carries (a folder ``lisbon/`` for "photos from
lisbon" or "a tram in lisbon" when no photo's words say "tram") come before the others, in fused order: what
someone who named them expects."""

TELLING_SHARE = 0.5
"""A photo whose words hold every word of the query that some photo carries is relevant when those are at least this
share of the query's words (all of them always are): its own text found it, and what no photo's words say (the
"receipt" of "what is the total on the receipt?", a word OCR rarely reads) is left to the vectors to rank, not to veto.
Less than half (one word of "a brown dog running on the beach" in a folder name) leaves the verdict to the cutoff."""

POOL = 100
"""How many photos each side brings to the fusion (at least ``k``): a photo just outside the vector
top-k that the keywords also name can still rise into it."""

BM25_K1, BM25_B = 1.2, 0.0
"""BM25's term-frequency saturation and length normalisation (see :class:`KeywordIndex`)."""

MAX_CACHED = 4
"""Keyword indexes kept per process (one per gallery and field set)."""

_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^\W\d_]+|\d+")


STOPWORDS_EN = (
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of",
    "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with")
"""English stop words: Lucene's list, as ``bm25s`` ships it (the library this index replaced)."""


@functools.lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    """English stop words (:data:`STOPWORDS_EN`) and the words every photo's name or folder may carry."""
    return frozenset(STOPWORDS_EN) | {
        "from", "with", "near", "taken", "my", "our", "me", "we", "you", "your",  # how people ask for photos
        "photo", "photos", "picture", "pictures", "pic", "pics", "image", "images", "shot", "shots",
        "jpg", "jpeg", "png", "heic", "img", "dsc"}  # what file names carry


def words(text: str) -> list[str]:
    """The searchable words of ``text``, lower case and without accents: camelCase, underscores, dashes and
    digit runs split (``IMG_2019-06-01_LisbonTrip`` -> ``2019 06 01 lisbon trip``); English stop words and
    single letters left out."""
    plain = text if text.isascii() else "".join(
        c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    stop = _stopwords()
    out = []
    for token in _WORD.findall(_CAMEL.sub(" ", plain)):
        token = token.lower()
        if len(token) > 1 and token not in stop:
            out.append(token)
    return out


_SEGMENT = re.compile(r"[^\W_]+")
_HEX = frozenset("0123456789abcdefABCDEF")


def name_words(name: str) -> list[str]:
    """The words of a folder or file name, leaving out hash-like parts: a run of 6 or more hex digits mixing
    letters and digits (``693b08cb0e`` of ``1000268201_693b08cb0e.jpg``) names no thing, and its letter pieces
    (``b``, ``cb``, ``e``, or ``ad`` elsewhere) would match query words by chance."""
    kept = [seg for seg in _SEGMENT.findall(name)
            if not (len(seg) >= 6 and set(seg) <= _HEX and any(c.isdigit() for c in seg)
                    and any(c.isalpha() for c in seg))]
    return words(" ".join(kept))


def record_words(metadata: Mapping[str, Any], fields: Sequence[str] = KEYWORD_FIELDS) -> list[str]:
    """The words of one stored record's ``fields`` (see :data:`KEYWORD_FIELDS`)."""
    path = PurePath(str(metadata.get("path") or ""))
    out: list[str] = []
    for name in fields:
        value = metadata.get(name)
        if name == "folder" and (value or metadata.get("path")):  # older records have only the path
            out += [w for part in PurePath(str(value or path.parent)).parts[-FOLDER_PARTS:] for w in name_words(part)]
        elif name == "name" and (value or metadata.get("path")):
            out += name_words(PurePath(str(value or path.name)).stem)
        elif isinstance(value, (list, tuple)):
            out += [w for v in value for w in words(str(v))]
        elif value:
            out += words(str(value))
    return out


@dataclass(frozen=True)
class KeywordRank:
    """One photo on the keyword side: its BM25 ``score`` and tie-aware 1-based ``rank``."""

    id: str
    score: float
    rank: int
    all_words: bool = False
    """Whether the photo's words hold every word of the query that some photo carries (it ranks first)."""
    every_word: bool = False
    """Whether the photo's words say what the query asks (it is marked relevant): they hold every word of the query,
    or every word of it that some photo carries when those are at least half of its words (:data:`TELLING_SHARE`):
    a receipt whose text reads "TOTAL 42.50" for "what is the total on the receipt?", not a folder ``beach/`` for
    "a brown dog running on the beach"."""


def tie_aware_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks of ``scores`` sorted best first, equal scores sharing the rank of the first of them."""
    if not len(scores):
        return np.zeros(0, np.int64)
    starts = np.r_[True, scores[1:] != scores[:-1]]
    return np.maximum.accumulate(np.where(starts, np.arange(1, len(scores) + 1), 0))


class KeywordRanking:
    """The keyword side's ranking, best first, held as arrays; item ``i`` is a :class:`KeywordRank` built when
    read (``ranking[i]``, a slice, or iteration), so a search that reads the first few hundred of 100k
    matches builds a few hundred objects."""

    def __init__(self, ids: Sequence[str], slots: np.ndarray, scores: np.ndarray, ranks: np.ndarray,
                 all_words: np.ndarray, every_word: np.ndarray) -> None:
        self._ids = ids  # ids[slots[i]] is the i-th photo's id
        self._slots = slots
        self.scores = scores
        self.ranks = ranks
        self.all_words = all_words
        self.every_word = every_word

    @classmethod
    def empty(cls) -> "KeywordRanking":
        nothing = np.zeros(0, np.int64)
        return cls([], nothing, np.zeros(0, np.float32), nothing, nothing.astype(bool), nothing.astype(bool))

    def __len__(self) -> int:
        return len(self._slots)

    def ids(self, start: int = 0, stop: int | None = None) -> list[str]:
        """The ids of positions ``start`` to ``stop``, best first."""
        return [self._ids[slot] for slot in self._slots[start:stop].tolist()]

    def __getitem__(self, position: int | slice) -> Any:
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        i = range(len(self))[position]
        return KeywordRank(self._ids[int(self._slots[i])], float(self.scores[i]), int(self.ranks[i]),
                           bool(self.all_words[i]), bool(self.every_word[i]))

    def __iter__(self) -> Iterator[KeywordRank]:
        return (self[i] for i in range(len(self)))


class KeywordIndex:
    """BM25 over the words of a set of records, changed in place: :meth:`update` and :meth:`remove` cost what
    the changed records hold, not what the index holds.

    Scores are Lucene's BM25 (as ``bm25s`` computes it, in float32: ``idf = log(1 + (N - df + 0.5) / (df + 0.5))``,
    ``tf / (tf + k1 * (1 - b + b * length / mean length))``), computed at query time from the postings of the query's
    words, so the document counts they rest on are always those of now. The records live in two parts: a base
    (numpy arrays: each record's words, and each word's records) and the records written since, kept in dicts;
    :meth:`merge` folds the second into a new base when it has grown (:data:`MERGE_AT`), in numpy.

    Records are ranked by score, equal scores in ``order`` (Chroma's row number: the order its ``get`` lists
    records in, as the index of a full rebuild has them), so an index kept up to date ranks exactly as one
    built from scratch.
    """

    def __init__(self, ids: Sequence[str] = (), documents: Sequence[Sequence[str]] = (),
                 order: Sequence[int] | None = None) -> None:
        self._set_base([], np.zeros(0, np.int64), [], np.zeros(0, np.int64), np.zeros(0, np.int64),
                       np.zeros(0, np.float32))
        self._recent: dict[str, tuple[int, dict[str, int]]] = {}  # id -> (order, word -> count)
        self._recent_postings: dict[str, dict[str, int]] = {}  # word -> {id: count}
        self.base_file: str | None = None
        """The saved base this index's base is (see :meth:`save`); ``None``: not saved yet."""
        self.lock = threading.RLock()
        """Held by every read and change: a search in one thread never sees another's half-applied update."""
        orders = range(len(ids)) if order is None else order
        self.update(zip(ids, documents, orders))
        self.merge()

    # ------------------------------------------------------------------ building

    def _set_base(self, ids: list[str], orders: np.ndarray, terms: list[str], doc_of: np.ndarray,
                  term_of: np.ndarray, counts: np.ndarray) -> None:
        """Make the base from ``(record, word, count)`` triples (``doc_of`` indexes ``ids``, ``term_of`` ``terms``)."""
        n, vocabulary = len(ids), len(terms)
        by_doc = np.lexsort((term_of, doc_of))
        by_term = np.lexsort((doc_of, term_of))
        self._install(ids, orders, terms, {
            "doc_ptr": np.concatenate([[0], np.cumsum(np.bincount(doc_of, minlength=n))]),
            "doc_terms": term_of[by_doc], "doc_counts": counts[by_doc],
            "term_ptr": np.concatenate([[0], np.cumsum(np.bincount(term_of, minlength=vocabulary))]),
            "term_docs": doc_of[by_term], "term_counts": counts[by_term]})

    def _install(self, ids: list[str], orders: np.ndarray, terms: list[str], arrays: Mapping[str, np.ndarray]) -> None:
        """Make the base from its arrays: each record's words (``doc_*``) and each word's records (``term_*``)."""
        n = len(ids)
        self._ids = ids
        self._slot = {id_: slot for slot, id_ in enumerate(ids)}
        self._orders = np.asarray(orders, np.int64)
        self._alive = np.ones(n, bool)
        self._terms = terms
        self._vocab = {term: t for t, term in enumerate(terms)}
        self._doc_ptr = np.asarray(arrays["doc_ptr"], np.int64)
        self._doc_terms = np.asarray(arrays["doc_terms"], np.int32)
        self._doc_counts = np.asarray(arrays["doc_counts"], np.float32)
        self._term_ptr = np.asarray(arrays["term_ptr"], np.int64)
        self._term_docs = np.asarray(arrays["term_docs"], np.int32)
        self._term_counts = np.asarray(arrays["term_counts"], np.float32)
        owner = np.repeat(np.arange(n), np.diff(self._doc_ptr))
        self._lengths = np.bincount(owner, weights=self._doc_counts, minlength=n).astype(np.float64)
        self._df = np.diff(self._term_ptr)
        self._dead = 0
        self._total_length = float(self._lengths.sum())

    @classmethod
    def from_records(cls, records: Iterable[tuple[str, Mapping[str, Any]]],
                     fields: Sequence[str] = KEYWORD_FIELDS) -> "KeywordIndex":
        """From ``(id, metadata)`` pairs as the gallery stores them, in the gallery's order."""
        ids, documents = [], []
        for id_, metadata in records:
            ids.append(str(id_))
            documents.append(record_words(metadata or {}, fields))
        return cls(ids, documents)

    def update(self, records: Iterable[tuple[str, Sequence[str], int]]) -> None:
        """Put ``(id, words, order)`` records in, replacing any with the same id."""
        with self.lock:
            for id_, document, order in records:
                self._put(id_, document, order)

    def _put(self, id_: str, document: Sequence[str], order: int) -> None:
        self._remove(id_)
        counts = dict(Counter(document))
        self._recent[id_] = (int(order), counts)
        self._total_length += sum(counts.values())
        for term, count in counts.items():
            self._recent_postings.setdefault(term, {})[id_] = count

    def remove(self, ids: Iterable[str]) -> None:
        """Take the records ``ids`` out (unknown ids are ignored)."""
        with self.lock:
            for id_ in ids:
                self._remove(id_)

    def _remove(self, id_: str) -> None:
        recent = self._recent.pop(id_, None)
        if recent is not None:
            self._total_length -= sum(recent[1].values())
            for term in recent[1]:
                postings = self._recent_postings[term]
                del postings[id_]
                if not postings:
                    del self._recent_postings[term]
            return
        slot = self._slot.pop(id_, None)
        if slot is not None:
            self._alive[slot] = False
            self._dead += 1
            self._df[self._doc_terms[self._doc_ptr[slot] : self._doc_ptr[slot + 1]]] -= 1
            self._total_length -= float(self._lengths[slot])

    @property
    def pending(self) -> int:
        """Records written or taken out since the base was made (:meth:`merge` folds them in)."""
        return len(self._recent) + self._dead

    def merge(self) -> None:
        """Fold the records written since into a new base (numpy work over the whole index)."""
        with self.lock:
            if self.pending or self.base_file is None:
                self._merge()

    def _merge(self) -> None:
        keep = np.flatnonzero(self._alive)
        lengths = np.diff(self._doc_ptr)
        owner = np.repeat(np.arange(len(self._ids)), lengths)
        kept_rows = self._alive[owner]
        new_slot = np.full(len(self._ids), -1, np.int64)
        new_slot[keep] = np.arange(len(keep))
        ids = [self._ids[slot] for slot in keep]
        orders = [self._orders[keep]]
        terms = list(self._terms)
        vocab = dict(self._vocab)
        doc_of = [new_slot[owner[kept_rows]]]
        term_of = [self._doc_terms[kept_rows].astype(np.int64)]
        counts = [self._doc_counts[kept_rows]]
        recent_docs, recent_terms, recent_counts, recent_orders = [], [], [], []
        for id_, (order, words_) in self._recent.items():
            slot = len(ids)
            ids.append(id_)
            recent_orders.append(order)
            for term, count in words_.items():
                if term not in vocab:
                    vocab[term] = len(terms)
                    terms.append(term)
                recent_docs.append(slot)
                recent_terms.append(vocab[term])
                recent_counts.append(count)
        doc_of.append(np.asarray(recent_docs, np.int64))
        term_of.append(np.asarray(recent_terms, np.int64))
        counts.append(np.asarray(recent_counts, np.float32))
        orders.append(np.asarray(recent_orders, np.int64))
        doc_all, term_all = np.concatenate(doc_of), np.concatenate(term_of)
        used, term_all = np.unique(term_all, return_inverse=True)  # words no record holds any more are dropped
        self._set_base(ids, np.concatenate(orders), [terms[t] for t in used], doc_all, term_all.reshape(-1),
                       np.concatenate(counts))
        self._recent, self._recent_postings = {}, {}
        self.base_file = None

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._slot) + len(self._recent)

    @property
    def ids(self) -> list[str]:
        """The records' ids, in their order."""
        with self.lock:
            found = [(int(self._orders[slot]), id_) for id_, slot in self._slot.items()]
            found += [(order, id_) for id_, (order, _) in self._recent.items()]
        return [id_ for _, id_ in sorted(found)]

    def known_ids(self) -> set[str]:
        """The records' ids, in no order."""
        with self.lock:
            return set(self._slot) | set(self._recent)

    def df(self, term: str) -> int:
        """How many records hold ``term``."""
        t = self._vocab.get(term)
        return (0 if t is None else int(self._df[t])) + len(self._recent_postings.get(term, ()))

    def _weights(self, idf: np.float32, counts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """BM25 weights of one word in records holding it ``counts`` times, as ``bm25s`` computes them: the
        term-frequency part in float64, times the float32 idf, rounded to float32 once."""
        n = len(self)
        mean = self._total_length / n if n else 1.0
        norm = BM25_K1 * ((1 - BM25_B) + BM25_B * np.asarray(lengths, np.float64) / (mean or 1.0))
        tf = np.asarray(counts, np.float64)
        return (np.float64(idf) * (tf / (norm + tf))).astype(np.float32)

    def scores(self, terms: Sequence[str]) -> tuple[np.ndarray, dict[str, np.float32], np.ndarray, dict[str, int]]:
        """BM25 scores of the base's records and of the recent ones for ``terms`` (each counted once), and how
        many of ``terms`` each holds."""
        n = len(self)
        base = np.zeros(len(self._ids), np.float32)
        held = np.zeros(len(self._ids), np.int32)
        recent: dict[str, np.float32] = {}
        recent_held: dict[str, int] = {}
        for term in dict.fromkeys(terms):
            df = self.df(term)
            if not df:
                continue
            idf = np.float32(math.log(1 + (n - df + 0.5) / (df + 0.5)))
            t = self._vocab.get(term)
            if t is not None:
                lo, hi = self._term_ptr[t], self._term_ptr[t + 1]
                docs = self._term_docs[lo:hi]
                base[docs] += self._weights(idf, self._term_counts[lo:hi], self._lengths[docs])
                held[docs] += 1
            postings = self._recent_postings.get(term)
            if postings:
                ids = list(postings)
                counts = np.fromiter(postings.values(), np.float32, len(ids))
                lengths = np.array([sum(self._recent[id_][1].values()) for id_ in ids], np.float64)
                for id_, score in zip(ids, self._weights(idf, counts, lengths)):
                    recent[id_] = np.float32(recent.get(id_, np.float32(0)) + score)
                    recent_held[id_] = recent_held.get(id_, 0) + 1
        base[~self._alive] = 0
        return base, recent, held, recent_held

    def rank(self, query: str) -> list[KeywordRank]:
        """Every record with at least one of the query's words, best first; equal scores share a rank."""
        return list(self.ranking(query))

    def ranking(self, query: str) -> "KeywordRanking":
        """:meth:`rank` as arrays: nothing is built per matching record until it is read, so a word that
        most of a large gallery carries costs a sort, not one Python object per photo (a search reads the
        first few hundred)."""
        every = list(dict.fromkeys(words(query)))
        with self.lock:
            terms = [t for t in every if self.df(t)]
            if not terms:
                return KeywordRanking.empty()
            base, recent, held, recent_held = self.scores(terms)
            found = np.flatnonzero(base > 0)
            ids: Sequence[str] = self._ids
            slots = found
            scores = base[found]
            orders = self._orders[found]
            counts = held[found]
            if recent:
                ids = [*(self._ids[slot] for slot in found), *recent]
                slots = np.arange(len(ids))
                scores = np.concatenate([scores, np.fromiter(recent.values(), np.float32, len(recent))])
                orders = np.concatenate([orders, [self._recent[id_][0] for id_ in recent]])
                counts = np.concatenate([counts, [recent_held[id_] for id_ in recent]])
        complete = len(terms) == len(every)  # words no record holds are for the vectors alone
        telling = complete or len(terms) >= TELLING_SHARE * len(every)
        order = np.lexsort((orders, -scores))
        scores = scores[order]
        all_words = counts[order] == len(terms)
        return KeywordRanking(ids, slots[order], scores, tie_aware_ranks(scores), all_words,
                              all_words & telling)

    # ------------------------------------------------------------------ saving

    def save(self, folder: Path, name: str, cursor: Any) -> None:
        """Write the index to ``folder`` as ``name``: the base once (``name.<token>.npz``, new after each merge)
        and a small state file naming it, with the recent records and ``cursor`` (JSON: what the index is up to
        date with). Each file is written whole beside its place and renamed over it, so a reader, or a crash,
        never finds a half-written one; bases no state names any more are removed."""
        folder.mkdir(parents=True, exist_ok=True)
        with self.lock, folder_lock(folder):
            if self.base_file is None or not (folder / self.base_file).is_file():
                base_file = f"{name}.{uuid.uuid4().hex[:12]}.npz"
                write_atomically(folder / base_file, lambda handle: np.savez(
                    handle, ids=np.asarray(self._ids, dtype=str), orders=self._orders,
                    terms=np.asarray(self._terms, dtype=str), doc_ptr=self._doc_ptr, doc_terms=self._doc_terms,
                    doc_counts=self._doc_counts, term_ptr=self._term_ptr, term_docs=self._term_docs,
                    term_counts=self._term_counts))
                self.base_file = base_file
            state = {"version": STATE_VERSION, "base": self.base_file, "cursor": cursor,
                     "removed": [self._ids[slot] for slot in np.flatnonzero(~self._alive)],
                     "recent": [[id_, order, words_] for id_, (order, words_) in self._recent.items()]}
            write_atomically(folder / f"{name}.json",
                              lambda handle: handle.write(json.dumps(state, separators=(",", ":")).encode()))
            for old in folder.glob(f"{name}.*.npz"):
                if old.name != self.base_file:
                    old.unlink(missing_ok=True)

    @classmethod
    def load(cls, folder: Path, name: str) -> tuple["KeywordIndex", Any] | None:
        """The index :meth:`save` wrote as ``name`` and its cursor; ``None`` when there is none, or it cannot
        be read (it is then rebuilt)."""
        for _ in range(3):  # a writer may replace the base between reading the state and opening it
            try:
                state = json.loads((folder / f"{name}.json").read_bytes())
                if state.get("version") != STATE_VERSION:
                    return None
                with np.load(folder / state["base"], allow_pickle=False) as base:
                    arrays = {key: base[key] for key in base.files}
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
                logger.warning("keyword index %s could not be read (%s); rebuilding it", folder / name, exc)
                return None
            index = cls()
            index._install(arrays["ids"].tolist(), arrays["orders"], arrays["terms"].tolist(), arrays)
            index.base_file = state["base"]
            index.remove(state["removed"])
            index.update((id_, [t for t, c in words_.items() for _ in range(c)], order)
                         for id_, order, words_ in state["recent"])
            return index, state.get("cursor")
        return None


STATE_VERSION = 1
"""Version of the saved keyword index's layout; another one is rebuilt."""

MERGE_AT = 2000
"""Records written or taken out since the base before they are merged into a new one: keeps the state file that
each write rewrites small (the merge itself is numpy work over the whole index, about 0.1 s at 100k records)."""

INDEX_KIND = "keywords"
"""The kind of index (:func:`~pictrieve.vectorstore.changes.index_folder`) a gallery's keyword indexes are saved as,
in the user's cache."""


_cache: "OrderedDict[tuple[str, str, tuple[str, ...]], _Cached]" = OrderedDict()
_cache_lock = threading.Lock()
_sync_locks: dict[tuple[str, str, tuple[str, ...]], threading.Lock] = {}


@dataclass
class _Cached:
    index: KeywordIndex
    cursor: tuple[str, int] | None


def keyword_index(gallery: Any, fields: Sequence[str] = KEYWORD_FIELDS) -> KeywordIndex:
    """The keyword index of ``gallery``'s records (this embedder's collection), as fresh as the gallery.

    An embedded gallery's index is kept per process and saved in the user's cache
    (:func:`~pictrieve.vectorstore.changes.index_folder`); each search first reads where the collection's write
    sequence stands (one tiny read of Chroma's file, moved by every writer: any process, a raw Chroma handle,
    langchain-chroma) and, when it moved, applies the records written since: a write of ``k`` photos costs reading
    those ``k``. A ``chroma run`` server or an in-memory store has no change feed: there the index is built from
    every record, each search."""
    location = embedded_location(gallery)
    if location is None:
        return KeywordIndex.from_records(_all_records(gallery), fields)
    key = (location, gallery.collection_name, tuple(fields))
    now = position(location, gallery.collection_name)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None and now is not None and cached.cursor == now:
            _cache.move_to_end(key)
            return cached.index
        lock = _sync_locks.setdefault(key, threading.Lock())
    with lock:  # one update at a time per index in this process; the others wait for it and use it
        with _cache_lock:
            cached = _cache.get(key)
        if cached is not None and now is not None and cached.cursor is not None and cached.cursor[1] >= now[1] \
                and cached.cursor[0] == now[0]:
            return cached.index  # another thread brought it up to date meanwhile
        fresh = None if now is None else _brought_up_to_date(gallery, key, cached, fields, now[0])
        if fresh is None:  # the change feed cannot be read: every record, through Chroma's API
            return KeywordIndex.from_records(_all_records(gallery), fields)
        logger.debug("keyword index of %s: %d photos (write %s)", location, len(fresh.index), fresh.cursor)
        with _cache_lock:
            _cache[key] = fresh
            _cache.move_to_end(key)
            while len(_cache) > MAX_CACHED:
                _cache.popitem(last=False)
        return fresh.index


def _brought_up_to_date(gallery: Any, key: tuple[str, str, tuple[str, ...]], cached: _Cached | None,
                        fields: Sequence[str], collection_id: str) -> _Cached | None:
    """The index of this process (or the one saved in the cache, or a new one) with the records written since
    applied, saved again when anything changed; ``None`` when the changes cannot be read."""
    location, collection_name, _ = key
    folder = index_folder(location, collection_id, INDEX_KIND)
    name = f"{re.sub(r'[^A-Za-z0-9_-]+', '-', collection_name)}__" + \
        hashlib.sha1(json.dumps([list(fields), FOLDER_PARTS]).encode()).hexdigest()[:10]
    if cached is None or cached.cursor is None or cached.cursor[0] != collection_id:
        loaded = KeywordIndex.load(folder, name)
        cached = _Cached(loaded[0], _cursor(loaded[1])) if loaded else _Cached(KeywordIndex(), None)
    seen = snapshot(location, collection_name, cached.cursor)
    if seen is not None and cached.cursor is not None and seen.seq < cached.cursor[1]:
        # The database is older than the index (a folder restored from a backup): start again from its records.
        cached, seen = _Cached(KeywordIndex(), None), snapshot(location, collection_name)
    if seen is None:
        return None
    index, changed = cached.index, bool(seen.changed or seen.deleted)
    if cached.cursor is None or cached.cursor[0] != seen.collection_id:
        index = KeywordIndex()  # a new collection (or a first build): every record is in ``seen.changed``
    if seen.deleted:
        index.remove(seen.deleted)
    _apply(index, gallery, seen.changed, fields)
    if len(index) != seen.count:  # records were deleted: take out those the collection no longer holds
        everything = snapshot(location, collection_name)
        if everything is None:
            return None
        present = {id_ for id_, _ in everything.changed}
        known = index.known_ids()
        index.remove(known - present)
        _apply(index, gallery, [(id_, row) for id_, row in everything.changed if id_ not in known], fields)
        changed = True
    if index.pending >= MERGE_AT or 2 * index.pending > len(index):  # (a first build merges at once)
        index.merge()
    cursor = (seen.collection_id, seen.seq)
    if changed or index.base_file is None or cached.cursor != cursor:
        try:
            index.save(folder, name, list(cursor))
        except OSError as exc:  # a cache this user may not write: the index is kept in memory only
            cannot_save("the keyword index", location, exc)
    return _Cached(index, cursor)


def _cursor(value: Any) -> tuple[str, int] | None:
    try:
        return str(value[0]), int(value[1])
    except (TypeError, ValueError, IndexError):
        return None


def _apply(index: KeywordIndex, gallery: Any, changed: Sequence[tuple[str, int]], fields: Sequence[str]) -> None:
    """Read the records ``changed`` (``(id, order)``) and put them in ``index`` (those the gallery no longer holds are
    taken out): from the table Chroma keeps them in (:func:`~pictrieve.vectorstore.changes.read_fields`; a first build
    of 100k records read through Chroma's API took over a minute), else through the gallery."""
    if not changed:
        return
    stored = read_fields(str(gallery.location), gallery.collection_name, [*SCALAR_FIELDS, *fields],
                         [row for _, row in changed] if len(changed) < len(index) else None, LIST_FIELDS,
                         what="words for the keyword index")
    if stored is not None:
        wanted = {id_ for id_, _ in changed}
        index.update((id_, record_words(meta, fields), row) for id_, (row, meta) in stored.items() if id_ in wanted)
        index.remove(id_ for id_ in wanted if id_ not in stored)
        return
    for start in range(0, len(changed), READ_BATCH):
        batch = changed[start : start + READ_BATCH]
        metadata = gallery.metadata_of([id_ for id_, _ in batch])
        index.update((id_, record_words(metadata[id_] or {}, fields), order) for id_, order in batch if id_ in metadata)
        index.remove(id_ for id_, _ in batch if id_ not in metadata)


SCALAR_FIELDS = ("path",)
"""Stored fields the words are read from besides :data:`KEYWORD_FIELDS` (older records have only the path)."""
LIST_FIELDS = ("captions",)
"""Stored fields whose values are lists."""


READ_BATCH = 5000
"""Records read from the gallery per request while bringing an index up to date."""


def _all_records(gallery: Any) -> list[tuple[str, Mapping[str, Any]]]:
    return [(item.id, item.metadata) for item in gallery.items()]


def hybrid_search(gallery: Any, query: str, vector: Any, k: int, where: Any = None, *,
                  fields: Sequence[str] = KEYWORD_FIELDS, rrf_k: float = RRF_K, weight: float = KEYWORD_WEIGHT,
                  pool: int = POOL) -> list[ImageHit]:
    """The ``k`` best photos of ``gallery`` for ``query`` by vectors (``vector``: the query's embedding) and
    keywords, fused by reciprocal rank fusion: ``1/(rrf_k + vector rank) + weight/(rrf_k + keyword rank)``,
    each side cut at ``max(k, pool)`` photos that pass ``where`` (a Chroma filter or a
    :class:`PhotoFilter`, applied on both sides).

    Each hit keeps its cosine as ``score`` (so the relevance cutoff still reads it) and its fused position as
    ``rank``; ``keyword_match`` says whether the photo's words matched, ``matched_by`` which side brought it in
    (``both`` when its vector alone ranks it in the first ``k`` too); ``relevant`` is the cutoff's verdict,
    or true when the photo's words say what the query asks (:attr:`KeywordRank.every_word`)."""
    depth = max(int(k), int(pool))
    vector_hits = gallery.search_vector(vector, depth, where)
    index = keyword_index(gallery, fields)
    keyword = _passing(gallery, index.ranking(query), where, depth)
    chosen = fuse([hit.id for hit in vector_hits], keyword, k, rrf_k=rrf_k, weight=weight)
    by_id = {hit.id: hit for hit in vector_hits}
    matched = {found.id for found in keyword}
    extra = _keyword_only_hits(gallery, [id_ for id_ in chosen if id_ not in by_id], vector)
    by_vector = {hit.id for hit in vector_hits[: int(k)]}  # what the vectors alone would have shown
    hits = [(by_id.get(id_) or extra[id_]).model_copy(update={"rank": rank, "keyword_match": id_ in matched,
                                                              "matched_by": _matched_by(id_ in by_vector, id_ in matched)})
            for rank, id_ in enumerate(chosen, start=1)]
    verdicts = gallery.relevance_cutoff().judge([hit.score for hit in hits], vector, query=query,
                                                objects=stored_objects(hits))
    full = {found.id for found in keyword if found.every_word}
    return [hit.model_copy(update={"relevant": bool(v) or hit.id in full}) for hit, v in zip(hits, verdicts)]


def _matched_by(by_vector: bool, by_words: bool) -> str:
    """Why a fused hit is there: ``both`` sides put it in the first ``k``, or only the ``words`` or the ``vector``."""
    return "both" if by_vector and by_words else "words" if by_words else "vector"


def fuse(vector_ids: Sequence[str], keyword: Sequence[KeywordRank], k: int, *, rrf_k: float = RRF_K,
         weight: float = KEYWORD_WEIGHT, all_words_first: bool = ALL_WORDS_FIRST) -> list[str]:
    """The best ``k`` ids by ``1/(rrf_k + vector rank) + weight/(rrf_k + keyword rank)`` (``vector_ids`` best
    first; a side that lacks an id adds nothing); ties keep the vector order, then the keyword order. With
    ``all_words_first`` the photos whose words hold every word of the query that some photo carries come first."""
    fused: dict[str, float] = {}
    for rank, id_ in enumerate(vector_ids, start=1):
        fused.setdefault(id_, 1.0 / (rrf_k + rank))
    full: set[str] = set()
    for found in keyword:
        fused[found.id] = fused.get(found.id, 0.0) + float(weight) / (rrf_k + found.rank)
        if all_words_first and found.all_words:
            full.add(found.id)
    first_seen = {id_: n for n, id_ in enumerate(fused)}
    return sorted(fused, key=lambda id_: (id_ not in full, -fused[id_], first_seen[id_]))[: int(k)]


def _passing(gallery: Any, ranked: KeywordRanking, where: Any, depth: int) -> list[KeywordRank]:
    """The keyword ranking cut to the photos that pass ``where``, ranked again among them (tie-aware),
    down to ``depth`` photos and the end of the last tie. Read in batches of ``4 * depth``: only the photos
    read become objects, however many carry the query's words."""
    filtered = where is not None and not (isinstance(where, PhotoFilter) and where.is_empty)
    allowed = None  # the photos passing a PhotoFilter, from the filter columns (None: asked of the store)
    if filtered and isinstance(where, PhotoFilter):
        from pictrieve.vectorstore.filter_index import passing_ids

        found = passing_ids(gallery, where)
        allowed = None if found is None else set(found)
    kept: list[tuple[str, float, tuple[bool, bool]]] = []
    for start in range(0, len(ranked), 4 * depth):
        if len(kept) >= depth and ranked.scores[start] < kept[-1][1]:
            break
        ids = ranked.ids(start, start + 4 * depth)
        rows: Iterable[int] = range(len(ids))
        if allowed is not None:
            rows = [row for row in rows if ids[row] in allowed]
        elif filtered:
            passing = gallery.metadata_where(ids, where)
            rows = [row for row in rows if ids[row] in passing]
        for row in rows:
            score = float(ranked.scores[start + row])
            if len(kept) >= depth and score < kept[-1][1]:
                break
            kept.append((ids[row], score,
                         (bool(ranked.all_words[start + row]), bool(ranked.every_word[start + row]))))
    out: list[KeywordRank] = []
    for position, (id_, score, flags) in enumerate(kept, start=1):
        out.append(KeywordRank(id_, score, out[-1].rank if out and out[-1].score == score else position, *flags))
    return out


def _keyword_only_hits(gallery: Any, ids: list[str], vector: Any) -> dict[str, ImageHit]:
    """Hits for photos only the keywords found, scored by their cosine to the query as the vector side's are."""
    if not ids:
        return {}
    metadata = gallery.metadata_of(ids)
    cosines = np.asarray(gallery.embeddings(ids), dtype=np.float32) @ np.asarray(vector, dtype=np.float32).reshape(-1)
    return {id_: ImageHit.from_record(id_, metadata.get(id_), score=float(c)) for id_, c in zip(ids, cosines)}
