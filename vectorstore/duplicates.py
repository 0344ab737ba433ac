"""Near-duplicate photos: groups of near-identical pictures (copies resized, recompressed, cropped a little, turned).

Two stored photos are near-duplicates when their perceptual hashes (``phash``, stored on each record at index
time, :mod:`~pictrieve.tools.core.perceptual_hash`) differ in at most ``max_distance`` of 64 bits **and** their
embeddings' cosine similarity is at least ``min_cosine`` (or, for hashes at most ``close_distance`` bits apart,
``close_min_cosine``): the hash finds candidates cheaply, the embedding
confirms them (a hash alone pairs some unrelated photos of similar layout; an embedding alone pairs photos of
one scene taken seconds apart). Groups are the connected pairs.

Candidates are found without comparing every pair (:func:`candidate_pairs`, multi-index hashing): the 64 bits
are cut in four 16-bit bands; two hashes within ``d`` bits agree within ``d // 4`` bits on some band, so each
band's values are tabled once and every hash looks up its band's neighbours within that many bits (137
look-ups for ``d`` up to 11), all in numpy. Only candidate pairs' vectors are read. The defaults were chosen
on flickr8k-train with synthetic copies (``benchmarks/near_duplicates.py``; BENCHMARKS.md).

Servers (the page's ``/api/duplicates``, MCP's ``find_duplicates``) call :func:`duplicate_report`: a report is
kept per gallery, embedder and settings, tagged with the gallery's write counter, so asking again before any
write reads nothing; and at most :data:`MAX_COMPUTING` reports are computed at once in a process, a request past
that refused at once with :class:`DuplicatesBusy` (one line) rather than queued behind a full read of the gallery.
"""

from __future__ import annotations

import copy
import itertools
import logging
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.perceptual_hash import hash_to_int
from pictrieve.vectorstore.chroma_store import is_server
from pictrieve.vectorstore.indexing import PHASH_KEY

if TYPE_CHECKING:
    from pictrieve.vectorstore.store import ImageStore

logger = logging.getLogger(__name__)

DEFAULT_MAX_DISTANCE = 10
"""Hash bits two near-duplicates may differ in (a 5% crop moves up to 10 of 64; unrelated photos about 32)."""
DEFAULT_MIN_COSINE = 0.9
"""Embedding cosine two near-duplicates reach at least (chosen for the offline embedder on flickr8k-train: at
least the 99th percentile of a photo's cosine to its nearest *other* photo, so a hash collision between two
different photos is rejected)."""
CLOSE_DISTANCE = 4
"""Pairs whose hashes are at most this many bits apart need only :data:`CLOSE_MIN_COSINE`: a resized copy moves
the hash by at most 4 bits but the offline embedder's cosine by much more (it embeds a half-size photo
differently), and two different photos' hashes fall this close far more rarely than within 10 bits."""
CLOSE_MIN_COSINE = 0.65
"""The cosine that confirms a pair within :data:`CLOSE_DISTANCE` bits (about a photo's median cosine to its
nearest other photo on flickr8k-train)."""
BANDS = 4
BAND_BITS = 64 // BANDS


@dataclass
class DuplicateGroup:
    """Near-identical photos: ``ids``/``paths`` (the one to keep first: the most pixels, then the largest file),
    and the weakest link that joined them (``min_cosine``, ``max_distance`` in hash bits)."""

    ids: list[str]
    paths: list[str]
    min_cosine: float
    max_distance: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DuplicatesReport:
    """What :func:`find_duplicates` found: the ``groups`` (largest first), how many records were compared, and
    how many had no perceptual hash yet (indexed before it existed: the next ``index`` adds it)."""

    groups: list[DuplicateGroup] = field(default_factory=list)
    compared: int = 0
    unhashed: int = 0
    max_distance: int = DEFAULT_MAX_DISTANCE
    min_cosine: float = DEFAULT_MIN_COSINE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def popcount(values: np.ndarray) -> np.ndarray:
    """Set bits of each unsigned 64-bit value."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(values).astype(np.int64)
    as_bytes = values.astype(np.uint64).view(np.uint8).reshape(-1, 8)  # numpy < 2
    return _BYTE_BITS[as_bytes].sum(axis=1).astype(np.int64)


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def _band_masks(radius: int) -> np.ndarray:
    """Every 16-bit value with at most ``radius`` bits set (the flips a band look-up tries)."""
    masks = [0]
    for bits in range(1, radius + 1):
        masks += [sum(1 << b for b in chosen) for chosen in itertools.combinations(range(BAND_BITS), bits)]
    return np.array(masks, dtype=np.int64)


def candidate_pairs(hashes: np.ndarray, max_distance: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair ``i < j`` of ``hashes`` (unsigned 64-bit) within ``max_distance`` bits, as arrays ``(i, j,
    distance)``, without comparing all pairs (see the module docstring)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    n = len(hashes)
    empty = np.zeros(0, dtype=np.int64)
    if n < 2:
        return empty, empty, empty
    masks = _band_masks(max(0, int(max_distance)) // BANDS)
    found: list[np.ndarray] = []
    for band in range(BANDS):
        values = ((hashes >> np.uint64(band * BAND_BITS)) & np.uint64(0xFFFF)).astype(np.int64)
        order = np.argsort(values, kind="stable")
        per_value = np.bincount(values, minlength=1 << BAND_BITS)  # a direct table: value -> its run in `order`
        first = np.cumsum(per_value) - per_value
        for mask in masks:
            probe = values ^ mask
            counts = per_value[probe]
            rows = np.flatnonzero(counts)
            if not len(rows):
                continue
            sizes = counts[rows]
            starts = np.repeat(first[probe[rows]] - np.cumsum(sizes) + sizes, sizes)
            cols = order[starts + np.arange(int(sizes.sum()))]
            rows = np.repeat(rows, sizes)
            keep = rows < cols
            rows, cols = rows[keep], cols[keep]
            close = popcount(hashes[rows] ^ hashes[cols]) <= max_distance
            found.append(rows[close] * n + cols[close])
    if not found:
        return empty, empty, empty
    keys = np.unique(np.concatenate(found))
    i, j = keys // n, keys % n
    return i, j, popcount(hashes[i] ^ hashes[j])


def _components(n: int, pairs: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Connected groups (of two or more) of ``n`` items joined by ``pairs`` (union-find)."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for x in range(n):
        groups.setdefault(root(x), []).append(x)
    return [members for members in groups.values() if len(members) > 1]


def confirmed_groups(hashes: Sequence[str | None], vectors: np.ndarray | None = None, *,
                     max_distance: int = DEFAULT_MAX_DISTANCE, min_cosine: float = DEFAULT_MIN_COSINE,
                     close_distance: int = CLOSE_DISTANCE, close_min_cosine: float = CLOSE_MIN_COSINE,
                     vector_of: Any = None) -> list[tuple[list[int], float, int]]:
    """Groups of indices into ``hashes`` whose pairs are within ``max_distance`` bits and ``min_cosine``, or within
    ``close_distance`` bits and ``close_min_cosine`` (``vectors``: unit rows aligned with ``hashes``, or
    ``vector_of(indices)`` giving those rows on demand).
    Entries without a hash join nothing. Each group comes with its weakest cosine and largest distance."""
    known = [k for k, value in enumerate(hashes) if value]
    if len(known) < 2:
        return []
    as_ints = np.array([hash_to_int(hashes[k]) for k in known], dtype=np.uint64)
    i, j, dist = candidate_pairs(as_ints, max_distance)
    if not len(i):
        return []
    i, j = np.asarray(known)[i], np.asarray(known)[j]
    involved = np.unique(np.concatenate([i, j]))
    rows = vectors[involved] if vectors is not None else np.asarray(vector_of(involved.tolist()), dtype=np.float32)
    position = {int(k): p for p, k in enumerate(involved)}
    a = rows[[position[int(k)] for k in i]]
    b = rows[[position[int(k)] for k in j]]
    cosine = np.einsum("ij,ij->i", a, b) / np.maximum(
        np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    ok = cosine >= np.where(dist <= close_distance, min(close_min_cosine, min_cosine), min_cosine)
    links = {(int(x), int(y)): (float(c), int(d)) for x, y, c, d, good in zip(i, j, cosine, dist, ok) if good}
    out = []
    for members in _components(len(hashes), list(links)):
        inside = [link for pair, link in links.items() if pair[0] in set(members)]
        out.append((members, min(c for c, _ in inside), max(d for _, d in inside)))
    return out


def find_duplicates(gallery: "ImageStore", *, max_distance: int = DEFAULT_MAX_DISTANCE,
                    min_cosine: float = DEFAULT_MIN_COSINE, close_distance: int = CLOSE_DISTANCE,
                    close_min_cosine: float = CLOSE_MIN_COSINE) -> DuplicatesReport:
    """The groups of near-identical photos in ``gallery`` (its embedder's collection confirms them)."""
    ids: list[str] = []
    hashes: list[str | None] = []
    metas: list[dict[str, Any]] = []
    for item in gallery.items():
        ids.append(item.id)
        hashes.append(item.metadata.get(PHASH_KEY) or None)
        metas.append(item.metadata)
    report = DuplicatesReport(compared=sum(1 for value in hashes if value),
                              unhashed=sum(1 for value in hashes if not value),
                              max_distance=int(max_distance), min_cosine=float(min_cosine))
    found = confirmed_groups(hashes, max_distance=max_distance, min_cosine=min_cosine,
                             close_distance=close_distance, close_min_cosine=close_min_cosine,
                             vector_of=lambda rows: gallery.embeddings([ids[r] for r in rows]))
    for members, weakest, farthest in found:
        members.sort(key=lambda k: keep_first(metas[k]))
        report.groups.append(DuplicateGroup(ids=[ids[k] for k in members],
                                            paths=[str(metas[k].get("path", "")) for k in members],
                                            min_cosine=round(weakest, 4), max_distance=farthest))
    report.groups.sort(key=lambda group: (-len(group.ids), group.paths[0]))
    return report


def keep_first(meta: dict[str, Any] | None) -> tuple[int, int, str]:
    """The one rule for which copy of a group represents it (the duplicates report's "keep" and the copy a
    collapsed search shows): sorted by this key, the first has the most pixels, then the largest file."""
    meta = meta or {}
    return (-_pixels(meta), -int(meta.get("size") or 0), str(meta.get("path", "")))


def _pixels(meta: dict[str, Any]) -> int:
    return int(meta.get("width") or 0) * int(meta.get("height") or 0)


# --- for servers: one report per gallery state, a bounded number computed at once ------------------------------

MAX_COMPUTING = 1
"""Duplicate reports computed at once in a process (each reads every record's hash); past that, refused."""
MAX_CACHED = 8
"""Reports kept (per gallery location, embedder and settings), the least recently asked dropped first."""


class DuplicatesBusy(PictrieveError):
    """Another request is computing a duplicate report; this one is refused at once (the page answers ``429``)."""


_computing = threading.BoundedSemaphore(MAX_COMPUTING)
_cache: "OrderedDict[tuple[Any, ...], tuple[Any, DuplicatesReport]]" = OrderedDict()
_cache_lock = threading.Lock()


def duplicate_report(gallery: Any, *, max_distance: int = DEFAULT_MAX_DISTANCE, min_cosine: float = DEFAULT_MIN_COSINE,
                     close_distance: int = CLOSE_DISTANCE, close_min_cosine: float = CLOSE_MIN_COSINE) -> DuplicatesReport:
    """:func:`find_duplicates` for a server: the report kept for the gallery's current write state when there is
    one (no record is read), else computed now, unless :data:`MAX_COMPUTING` reports are being computed already
    (:class:`DuplicatesBusy`, at once). The caller gets its own copy."""
    location = str(gallery.location)
    place = location if is_server(location) or location.startswith("memory:") else str(Path(location).expanduser().resolve())
    settings = (int(max_distance), float(min_cosine), int(close_distance), float(close_min_cosine))
    key = (place, getattr(gallery, "collection_name", None), settings)
    stamp = gallery.write_stamp()  # read before the records are: a write meanwhile makes the next call recompute
    if stamp is not None:
        with _cache_lock:
            kept = _cache.get(key)
            if kept is not None and kept[0] == stamp:
                _cache.move_to_end(key)
                return copy.deepcopy(kept[1])
    if not _computing.acquire(blocking=False):
        raise DuplicatesBusy("the server is already looking for near-duplicates for another request (it reads "
                             "every photo's hash); try again in a moment")
    try:
        report = find_duplicates(gallery, max_distance=max_distance, min_cosine=min_cosine,
                                 close_distance=close_distance, close_min_cosine=close_min_cosine)
    finally:
        _computing.release()
    if stamp is not None:
        with _cache_lock:
            _cache[key] = (stamp, copy.deepcopy(report))
            _cache.move_to_end(key)
            while len(_cache) > MAX_CACHED:
                _cache.popitem(last=False)
    return report
