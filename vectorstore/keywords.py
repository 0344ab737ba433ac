"""The keyword side of hybrid search: BM25 over the words a photo carries, fused with the vector ranking.

People search their photos by the words they gave them: a folder named ``lisbon/``, a file named
``germany_2019_beach.jpg``, a caption, the place it was taken, the text in the picture. An image
embedder knows none of these, so :func:`hybrid_search` ranks the gallery twice, by vectors and by
BM25 over those words (:data:`KEYWORD_FIELDS`), and fuses the two rankings by reciprocal rank fusion.

BM25 comes from ``bm25s`` (maintained, releases through 2025-2026, needs only numpy, scores with sparse
matrices). ``rank_bm25``, the other common choice, has had no release since 2022 and scores every
document in pure Python per query.

Freshness: the index is built from the gallery's records and kept per process, tagged with the gallery's
write counter (:func:`~pictrieve.vectorstore.chroma_store.read_generation`, bumped by every write of
every process); a search whose gallery changed since rebuilds it first, so no result ever comes from a
stale index. A ``chroma run`` server has no such counter: there the index is rebuilt for each search
(one read of every record's metadata).

Ranks on the keyword side are tie-aware (photos with the same BM25 score share a rank), so a word every
photo carries (a common parent folder) shifts nothing. Photos without a single query word get no
keyword contribution at all.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import numpy as np

from pictrieve.vectorstore.chroma_store import is_server, read_generation
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.photo_filter import PhotoFilter

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

POOL = 100
"""How many photos each side brings to the fusion (at least ``k``): a photo just outside the vector
top-k that the keywords also name can still rise into it."""

BM25_K1, BM25_B = 1.2, 0.0
"""BM25's term-frequency saturation and length normalisation (see :class:`KeywordIndex`)."""

MAX_CACHED = 4
"""Keyword indexes kept per process (one per gallery and field set)."""

_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^\W\d_]+|\d+")


@functools.lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    """English stop words (bm25s's list) and the words every photo's name or folder may carry."""
    from bm25s.stopwords import STOPWORDS_EN

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
    """Whether the photo's words hold every word of the query (it is marked relevant)."""


def _bm25s() -> Any:
    """The ``bm25s`` module, its logger kept at WARNING: it sets itself to DEBUG when imported, so each index
    build printed "Building index from tokens" on the command line and into MCP's log."""
    import bm25s

    if logging.getLogger("bm25s").level == logging.DEBUG:
        logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


class KeywordIndex:
    """BM25 over the words of a fixed set of records (build a new one when the records change)."""

    def __init__(self, ids: Sequence[str], documents: Sequence[list[str]]) -> None:
        bm25s = _bm25s()
        self.ids = list(ids)
        self.words = [frozenset(doc) for doc in documents]
        self._bm25: Any = None
        if any(documents):
            # b=0: no length normalisation, so photos that share a word score the same for it (a
            # word of a common folder then ties every photo, and ties shift no ranks; see ``rank``).
            # numpy backend: numba's JIT compile (when numba is installed) took 1.5 s on a first search
            self._bm25 = bm25s.BM25(k1=BM25_K1, b=BM25_B, backend="numpy")
            self._bm25.index([list(doc) for doc in documents], show_progress=False)

    @classmethod
    def from_records(cls, records: Iterable[tuple[str, Mapping[str, Any]]],
                     fields: Sequence[str] = KEYWORD_FIELDS) -> "KeywordIndex":
        """From ``(id, metadata)`` pairs as the gallery stores them."""
        ids, documents = [], []
        for id_, metadata in records:
            ids.append(str(id_))
            documents.append(record_words(metadata or {}, fields))
        return cls(ids, documents)

    def __len__(self) -> int:
        return len(self.ids)

    def rank(self, query: str) -> list[KeywordRank]:
        """Every photo with at least one of the query's words, best first; equal scores share a rank."""
        terms = [t for t in dict.fromkeys(words(query)) if self._bm25 is not None and t in self._bm25.vocab_dict]
        if not terms:
            return []
        asked, every = set(terms), set(words(query))  # words no photo carries are for the vectors alone
        scores = np.asarray(self._bm25.get_scores(terms), dtype=np.float64)
        found = np.flatnonzero(scores > 0)
        order = found[np.argsort(-scores[found], kind="stable")]
        ranked: list[KeywordRank] = []
        for position, row in enumerate(order, start=1):
            score = float(scores[row])
            rank = ranked[-1].rank if ranked and ranked[-1].score == score else position
            ranked.append(KeywordRank(self.ids[row], score, rank, asked <= self.words[row], every <= self.words[row]))
        return ranked



_cache: "OrderedDict[tuple[str, str, tuple[str, ...]], tuple[Any, KeywordIndex]]" = OrderedDict()
_cache_lock = threading.Lock()


def keyword_index(gallery: Any, fields: Sequence[str] = KEYWORD_FIELDS) -> KeywordIndex:
    """The keyword index of ``gallery``'s records (this embedder's collection), as fresh as the gallery:
    rebuilt when any process wrote to it since it was built (always, for a ``chroma run`` server)."""
    location = str(gallery.location)
    key = (location, gallery.collection_name, tuple(fields))
    server = is_server(location)
    stamp = None if server else read_generation(location)  # read before the records are (None: never written
    with _cache_lock:                                       # by this version; its first write makes it 1)
        cached = _cache.get(key)
        if cached is not None and not server and cached[0] == stamp:
            _cache.move_to_end(key)
            return cached[1]
    records = _all_records(gallery)
    index = KeywordIndex.from_records(records, fields)
    logger.debug("keyword index of %s: %d photos (write %s)", location, len(index), stamp)
    with _cache_lock:
        _cache[key] = (stamp, index)
        _cache.move_to_end(key)
        while len(_cache) > MAX_CACHED:
            _cache.popitem(last=False)
    return index


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
    ``rank``; ``keyword_match`` says whether the photo's words matched; ``relevant`` is the cutoff's verdict,
    or true when the photo's words hold every word of the query."""
    depth = max(int(k), int(pool))
    vector_hits = gallery.search_vector(vector, depth, where)
    index = keyword_index(gallery, fields)
    keyword = _passing(gallery, index.rank(query), where, depth)
    chosen = fuse([hit.id for hit in vector_hits], keyword, k, rrf_k=rrf_k, weight=weight)
    by_id = {hit.id: hit for hit in vector_hits}
    matched = {found.id for found in keyword}
    extra = _keyword_only_hits(gallery, [id_ for id_ in chosen if id_ not in by_id], vector)
    hits = [(by_id.get(id_) or extra[id_]).model_copy(update={"rank": rank, "keyword_match": id_ in matched})
            for rank, id_ in enumerate(chosen, start=1)]
    verdicts = gallery.relevance_cutoff().judge([hit.score for hit in hits])
    full = {found.id for found in keyword if found.every_word}
    return [hit.model_copy(update={"relevant": bool(v) or hit.id in full}) for hit, v in zip(hits, verdicts)]


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


def _passing(gallery: Any, ranked: list[KeywordRank], where: Any, depth: int) -> list[KeywordRank]:
    """The keyword ranking cut to the photos that pass ``where``, ranked again among them (tie-aware),
    down to ``depth`` photos and the end of the last tie."""
    filtered = where is not None and not (isinstance(where, PhotoFilter) and where.is_empty)
    kept: list[tuple[str, float, tuple[bool, bool]]] = []
    for start in range(0, len(ranked), 4 * depth):
        batch = ranked[start : start + 4 * depth]
        if len(kept) >= depth and batch[0].score < kept[-1][1]:
            break
        if filtered:
            passing = gallery.metadata_where([r.id for r in batch], where)
            batch = [r for r in batch if r.id in passing]
        for found in batch:
            if len(kept) >= depth and found.score < kept[-1][1]:
                break
            kept.append((found.id, found.score, (found.all_words, found.every_word)))
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
