"""An exact in-memory store core: numpy brute force, in this process.

The reference for tests (its search is exact, so an approximate store is checked against it) and a gallery for
tiny ephemeral uses (a few thousand photos, nothing kept after the process). It is only a
:class:`~pictrieve.vectorstore.core.StoreCore`, like :class:`~pictrieve.vectorstore.gallery.Gallery`; everything
else (text, image and hybrid search, photo filters, relevance marks, near-duplicate folding, records, indexing,
sync) is :class:`~pictrieve.vectorstore.service.StoreService`, the same code as Chroma's. The core:

- one space per embedder (views share image ids), cosine similarity, ties in insertion order;
- ``where``: a Chroma-style dict (:func:`matches` decides the operators as Chroma does), applied before ``n`` is cut;
- ``upsert`` replaces a record's vector and the metadata keys given, keeping the others (as Chroma does);
- the gallery's JSON records, kept as text.

Every view of one :class:`MemoryDatabase` sees every write at once; a lock makes each write and each
``writing()`` block one turn among threads. Nothing is written to disk.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from pictrieve.tools.models.embedders.base import Embedder
from pictrieve.tools.models.embedders.factory import default_embedder_name
from pictrieve.vectorstore.core import Candidate, check_updates, upsert_rows
from pictrieve.vectorstore.errors import DimensionMismatchError, EmptyGalleryError, GalleryError, ImageNotFoundError
from pictrieve.vectorstore.reading import GalleryItem
from pictrieve.vectorstore.service import StoreService, check_k

_names = itertools.count(1)


@dataclass
class _Space:
    """One embedder's records: ids in insertion order, their vectors (rows) and metadata."""

    dim: int
    ids: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    metadatas: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.vectors = np.zeros((0, self.dim), np.float32)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, metadatas: Sequence[Mapping[str, Any]]) -> None:
        new = []
        for id_, vector, meta in zip(ids, vectors, metadatas):
            row = self.rows.get(id_)
            if row is None:
                self.rows[id_] = len(self.ids) + len(new)
                new.append((id_, vector, dict(meta)))
            else:
                self.vectors[row] = vector
                self.metadatas[row] = {**self.metadatas[row], **meta}
        if new:
            self.ids += [id_ for id_, _, _ in new]
            self.vectors = np.concatenate([self.vectors, np.stack([v for _, v, _ in new])])
            self.metadatas += [meta for _, _, meta in new]

    def delete(self, ids: Sequence[str]) -> None:
        gone = {self.rows[id_] for id_ in ids if id_ in self.rows}
        if not gone:
            return
        keep = [row for row in range(len(self.ids)) if row not in gone]
        self.ids = [self.ids[row] for row in keep]
        self.vectors = self.vectors[keep]
        self.metadatas = [self.metadatas[row] for row in keep]
        self.rows = {id_: row for row, id_ in enumerate(self.ids)}


class MemoryDatabase:
    """The records of one in-memory gallery: a space per embedder and the JSON records, shared by its views."""

    def __init__(self) -> None:
        self.spaces: dict[str, _Space] = {}
        self.records: dict[str, str] = {}
        self.lock = threading.RLock()
        self.written = False
        self.generation = 0

    def changed(self) -> None:
        self.written = True
        self.generation += 1


class MemoryStore(StoreService):
    """A gallery held in this process's memory, seen through one embedder; exact search (see the module). Only the
    store core (:class:`~pictrieve.vectorstore.core.StoreCore`) is here: searching, filters, relevance, duplicates,
    records and indexing come from :class:`~pictrieve.vectorstore.service.StoreService`, as for Chroma's store.

    ``MemoryStore("offline")`` or ``MemoryStore(embedder)`` makes a new empty gallery; ``location`` names it in
    messages (default ``memory:N``). Views of the same gallery come from :meth:`with_embedder` and :meth:`views`.
    """

    writes_from_another_thread = False
    """Its write turn is a thread's lock, which indexing's writer thread cannot share: written from the indexing
    thread itself (a writer thread here waited on the indexing thread's own lock: a deadlock)."""

    def __init__(self, embedder: Embedder | str | None = None, *, location: str | None = None,
                 database: MemoryDatabase | None = None) -> None:
        self._db = database or MemoryDatabase()
        self.location = location or f"memory:{next(_names)}"
        self._start_view(default_embedder_name() if embedder is None else embedder)

    # ------------------------------------------------------------------ the gallery and its views

    @property
    def embedder_names(self) -> list[str]:
        """Every embedder with images here, sorted by name."""
        return sorted(name for name, space in self._db.spaces.items() if space.ids)

    def with_embedder(self, embedder: Embedder | str) -> "MemoryStore":
        """A view of the same gallery through another embedder (ids are shared)."""
        return type(self)(embedder, location=self.location, database=self._db)

    def check_embedder(self, embedder: Embedder) -> None:
        space = self._space()
        if space is not None and space.dim != int(embedder.dim):
            raise DimensionMismatchError(
                f"gallery {self.location} stores {space.dim}-d vectors for {self.embedder_name!r}, but that embedder "
                f"now produces {embedder.dim}-d vectors (different model or checkpoint?)")

    def _space(self) -> _Space | None:
        return self._db.spaces.get(self.embedder_name)

    def _empty_error(self) -> EmptyGalleryError:
        return EmptyGalleryError(f"gallery {self.location} has no images for embedder {self.embedder_name!r}",
                                 fix="add some with gallery.add(PHOTOS) first", location=self.location)

    def exists(self) -> bool:
        """Whether anything was written yet."""
        return self._db.written

    @contextlib.contextmanager
    def writing(self) -> Iterator["MemoryStore"]:
        """Hold the gallery's write turn for the block (other threads' writes wait)."""
        with self._db.lock:
            yield self

    def read_record(self, key: str) -> dict[str, Any] | None:
        text = self._db.records.get(key)
        return None if text is None else json.loads(text)

    def write_record(self, key: str, value: dict[str, Any]) -> None:
        with self.writing():
            self._db.records[key] = json.dumps(value, sort_keys=True)
            self._db.changed()

    def tiles(self) -> "NoTiles":
        """No tiles: an in-memory gallery keeps whole images only (NEEDLE ranks by them)."""
        return NoTiles(self)

    def change_feed(self) -> None:
        """No change feed: indexes derived from this gallery are built from its records each time."""
        return None

    def write_stamp(self) -> int:
        """The gallery's write counter (every write of any view bumps it): what a cached answer is tagged with."""
        return self._db.generation

    # ------------------------------------------------------------------ reading

    def count(self) -> int:
        space = self._space()
        return 0 if space is None else len(space.ids)

    def ids(self) -> list[str]:
        """All ids, in insertion order (the order :meth:`embeddings` with ``ids=None`` uses)."""
        space = self._space()
        return [] if space is None else list(space.ids)

    def items(self) -> Iterator[GalleryItem]:
        space = self._space()
        if space is None:
            return iter(())
        return iter([_item(id_, meta) for id_, meta in zip(list(space.ids), list(space.metadatas))])

    def get_where(self, where: dict[str, Any] | None = None, *, ids: Sequence[str] | None = None,
                  limit: int | None = None) -> dict[str, dict[str, Any]]:
        """Stored metadata by id of the records passing ``where`` (:func:`matches`), among ``ids`` in their order
        (unknown ones left out) or all in insertion order, at most ``limit``."""
        space = self._space()
        if space is None:
            return {}
        rows = range(len(space.ids)) if ids is None else [space.rows[id_] for id_ in ids if id_ in space.rows]
        found: dict[str, dict[str, Any]] = {}
        for row in rows:
            if limit is not None and len(found) >= limit:
                break
            if matches(where or {}, space.metadatas[row]):
                found[space.ids[row]] = dict(space.metadatas[row])
        return found

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray:
        """Stored vectors as ``(n, dim)`` float32: for ``ids`` in order, or all in :meth:`ids` order."""
        space = self._space()
        if space is None:
            if ids:
                raise ImageNotFoundError(f"not in gallery {self.location}: {list(ids)[:5]}", location=self.location)
            return np.zeros((0, 0), np.float32)
        if ids is None:
            return space.vectors.copy()
        missing = [id_ for id_ in ids if id_ not in space.rows]
        if missing:
            raise ImageNotFoundError(f"not in gallery {self.location}: {missing[:5]}", location=self.location)
        return space.vectors[[space.rows[id_] for id_ in ids]].reshape(len(ids), space.dim)

    # ------------------------------------------------------------------ vector search

    def _cosines(self, vectors: np.ndarray) -> np.ndarray:
        """Cosine of each query row to each stored vector, ``(queries, images)``."""
        space = self._space()
        assert space is not None
        if vectors.shape[1] != space.dim:
            raise DimensionMismatchError(
                f"query vector has {vectors.shape[1]} dimensions, gallery {self.location} stores {space.dim}-d "
                f"vectors for {self.embedder_name!r}; embed the query with that embedder")
        stored = space.vectors / np.maximum(np.linalg.norm(space.vectors, axis=1, keepdims=True), 1e-12)
        queries = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return queries @ stored.T

    def nearest(self, vector: np.ndarray, n: int, where: dict[str, Any] | None = None, *,
                among: Sequence[str] | None = None, with_vectors: bool = False) -> list[Candidate]:
        """The ``n`` records closest to ``vector``, exactly, among those passing ``where`` (or the ids ``among``);
        ties in insertion order."""
        if not self.count():
            raise self._empty_error()
        space = self._space()
        assert space is not None
        scores = self._cosines(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
        rows = (range(len(space.ids)) if among is None
                else sorted({space.rows[id_] for id_ in among if id_ in space.rows}))
        passing = [row for row in rows if matches(where or {}, space.metadatas[row])]
        order = sorted(passing, key=lambda row: -scores[row])[: int(n)]  # stable: ties keep insertion order
        return [Candidate(space.ids[row], dict(space.metadatas[row]), 1.0 - float(scores[row]),
                          space.vectors[row] if with_vectors else None) for row in order]

    def rank_ids(self, vectors: np.ndarray | Sequence[Sequence[float]], k: int = 10) -> list[list[tuple[str, float]]]:
        """For each row of ``vectors``, its ``k`` nearest images as ``(id, cosine)``, best first."""
        check_k(k)
        if not self.count():
            raise self._empty_error()
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) == 0:
            return []
        space = self._space()
        assert space is not None
        scores = self._cosines(vectors)
        ranked = []
        for row in scores:
            best = np.argsort(-row, kind="stable")[: int(k)]
            ranked.append([(space.ids[i], float(row[i])) for i in best])
        return ranked

    # ------------------------------------------------------------------ writing

    def upsert(self, ids: Sequence[str], vectors: np.ndarray | Sequence[Sequence[float]],
               metadatas: Sequence[dict[str, Any]]) -> int:
        """Store vectors of this view's embedder under ``ids``: the vector and the metadata keys given replace those
        stored, other keys stay. Returns the number of records written."""
        vectors = upsert_rows(ids, vectors, metadatas)
        if not len(ids):
            return 0
        with self.writing():
            space = self._space()
            dim = space.dim if space is not None else int(self.embedder.dim)
            if vectors.shape[1] != dim:
                raise DimensionMismatchError(
                    f"{vectors.shape[1]}-d vectors cannot go into gallery {self.location}: it stores {dim}-d "
                    f"vectors for {self.embedder_name!r}; embed the images with that embedder")
            for meta in metadatas:
                _check_metadata(meta)
            space = self._db.spaces.setdefault(self.embedder_name, _Space(dim))
            space.upsert(list(ids), vectors.copy(), metadatas)
            self._db.changed()
        return len(ids)

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        """Merge keys into stored metadata (unknown ids are ignored)."""
        if not check_updates(ids, metadatas):
            return
        if self._space() is None:
            raise self._empty_error()
        with self.writing():
            space = self._space()
            assert space is not None
            for id_, meta in zip(ids, metadatas):
                _check_metadata(meta)
                if id_ in space.rows:
                    row = space.rows[id_]
                    space.metadatas[row] = {**space.metadatas[row], **meta}
            self._db.changed()

    def delete(self, ids: Sequence[str]) -> None:
        """Remove the images ``ids`` from this embedder's space (unknown ids are ignored)."""
        space = self._space()
        if not ids or space is None:
            return
        with self.writing():
            space.delete(list(ids))
            self._db.changed()

    def __repr__(self) -> str:
        return f"MemoryStore({self.location!r}, embedder={self.embedder_name!r})"


class NoTiles:
    """The tile index of a store that keeps none: it never exists, and searching it says so."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def exists(self) -> bool:
        return False

    def rank_ids(self, vectors: np.ndarray, k: int, tiles_per_image: int = 4) -> list[list[tuple[str, float]]]:
        raise GalleryError(f"gallery {self.store.location} keeps no tiles (an in-memory gallery): rank whole images",
                           location=self.store.location)


def _item(id_: str, metadata: Mapping[str, Any]) -> GalleryItem:
    return GalleryItem(id=id_, path=str(metadata.get("path", "")), metadata=dict(metadata))


_SCALARS = (str, int, float, bool)


def _check_metadata(meta: Mapping[str, Any]) -> None:
    """Refuse what Chroma refuses: values other than str, int, float, bool or non-empty lists of one of them."""
    for key, value in meta.items():
        if isinstance(value, _SCALARS) or (isinstance(value, list) and value
                                           and all(isinstance(v, _SCALARS) for v in value)):
            continue
        raise GalleryError(f"metadata {key!r} holds {type(value).__name__}: store str, int, float, bool or a "
                           "non-empty list of them")


_MISSING = object()
"""What :func:`_compare` sees for a key the record lacks."""

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")


def matches(where: Mapping[str, Any], metadata: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` passes a Chroma-style ``where``: ``$and``/``$or`` of conditions, each
    ``{key: value}`` or ``{key: {op: value}}`` with ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``,
    ``$in``, ``$nin``, as Chroma (1.5) decides them: a key the record lacks passes ``$ne`` and ``$nin`` and
    fails the rest (chroma-core/chroma#4316); a bool never equals a number (``True`` is not ``1``); ints and
    floats compare by value; ``$gt``/``$gte``/``$lt``/``$lte`` compare numbers only."""
    if not where:
        return True
    results = []
    for key, condition in where.items():
        if key == "$and":
            results.append(all(matches(part, metadata) for part in condition))
        elif key == "$or":
            results.append(any(matches(part, metadata) for part in condition))
        else:
            stored = metadata.get(key, _MISSING)
            if isinstance(condition, Mapping):
                results.append(all(_compare(stored, op, value) for op, value in condition.items()))
            else:
                results.append(_compare(stored, "$eq", condition))
    return all(results)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _equal(stored: Any, value: Any) -> bool:
    """Chroma's equality: a bool only equals a bool, a number a number (``1 == 1.0``), a string a string."""
    if stored is _MISSING or isinstance(stored, bool) != isinstance(value, bool):
        return False
    if _is_number(stored) or _is_number(value):
        return _is_number(stored) and _is_number(value) and stored == value
    return type(stored) is type(value) and stored == value


def _compare(stored: Any, op: str, value: Any) -> bool:
    if op not in _OPERATORS:
        raise GalleryError(f"unknown where operator {op!r}: use $eq, $ne, $gt, $gte, $lt, $lte, $in or $nin")
    if op in ("$in", "$nin"):
        if not isinstance(value, (list, tuple)):
            raise GalleryError(f"where operator {op} takes a list of values, not {value!r}")
        found = any(_equal(stored, one) for one in value)
        return found if op == "$in" else not found
    if op == "$eq":
        return _equal(stored, value)
    if op == "$ne":
        return not _equal(stored, value)
    if not _is_number(value):  # Chroma refuses an ordering against anything but a number
        raise GalleryError(f"where operator {op} compares numbers only, not {value!r}")
    if not _is_number(stored):  # a missing key, a string or a bool: no match, as in Chroma
        return False
    if op == "$gt":
        return stored > value
    if op == "$gte":
        return stored >= value
    if op == "$lt":
        return stored < value
    return stored <= value
