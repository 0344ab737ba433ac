"""A third store, written as a store core alone (issue 39: "a third store would be the core alone").

:class:`DictStore` keeps one gallery in plain Python dicts (records per embedder, JSON records as text) and
implements only :class:`~pictrieve.vectorstore.core.StoreCore`; searching, photo filters, relevance, near-duplicate
folding, records, indexing and sync are :class:`~pictrieve.vectorstore.service.StoreService`'s. The contract tests
(``helpers.stores.STORES``) run on it as on Chroma's and the in-memory store, so the service is checked to need
nothing more from a backend. It is deliberately unlike :class:`~pictrieve.vectorstore.memory_store.MemoryStore`
inside (no numpy spaces, vectors as lists, records as dicts, scores one by one); a ``where`` dict is decided by
:func:`~pictrieve.vectorstore.memory_store.matches`, as a real backend would translate it to its own filter.
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
from typing import Any, Iterator, Sequence

import numpy as np

from pictrieve.tools.models.embedders.base import Embedder
from pictrieve.vectorstore.core import Candidate, check_updates, upsert_rows
from pictrieve.vectorstore.errors import DimensionMismatchError, EmptyGalleryError, ImageNotFoundError
from pictrieve.vectorstore.memory_store import NoTiles, _check_metadata, matches
from pictrieve.vectorstore.reading import GalleryItem
from pictrieve.vectorstore.service import StoreService, check_k


class _Gallery:
    """One gallery: ``{embedder: {id: (vector, metadata)}}`` in insertion order, the dimension per embedder, the
    records (dicts, copied in and out), and one lock for its write turn."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, tuple[list[float], dict[str, Any]]]] = {}
        self.dims: dict[str, int] = {}
        self.kept: dict[str, dict[str, Any]] = {}
        self.lock = threading.RLock()
        self.writes = 0


class DictStore(StoreService):
    """A gallery in plain dicts, seen through one embedder: the store core, nothing else."""

    def __init__(self, embedder: Embedder | str, *, location: str = "dict:1", gallery: _Gallery | None = None) -> None:
        self._gallery = gallery or _Gallery()
        self.location = location
        self._start_view(embedder)

    def _mine(self) -> dict[str, tuple[list[float], dict[str, Any]]]:
        return self._gallery.records.get(self.embedder_name, {})

    def _empty(self) -> EmptyGalleryError:
        return EmptyGalleryError(f"gallery {self.location} has no images for embedder {self.embedder_name!r}",
                                 location=self.location)

    # the gallery and its views
    @property
    def embedder_names(self) -> list[str]:
        return sorted(name for name, records in self._gallery.records.items() if records)

    def with_embedder(self, embedder: Embedder | str) -> "DictStore":
        return DictStore(embedder, location=self.location, gallery=self._gallery)

    def check_embedder(self, embedder: Embedder) -> None:
        dim = self._gallery.dims.get(self.embedder_name)
        if dim is not None and dim != int(embedder.dim):
            raise DimensionMismatchError(f"gallery {self.location} stores {dim}-d vectors, not {embedder.dim}-d")

    def exists(self) -> bool:
        return self._gallery.writes > 0

    @contextlib.contextmanager
    def writing(self) -> Iterator["DictStore"]:
        with self._gallery.lock:
            yield self

    def read_record(self, key: str) -> dict[str, Any] | None:
        return copy.deepcopy(self._gallery.kept.get(key))

    def write_record(self, key: str, value: dict[str, Any]) -> None:
        with self._gallery.lock:
            self._gallery.kept[key], self._gallery.writes = copy.deepcopy(value), self._gallery.writes + 1

    def tiles(self) -> NoTiles:
        return NoTiles(self)  # type: ignore[arg-type]

    def change_feed(self) -> None:
        return None

    def write_stamp(self) -> int:
        return self._gallery.writes

    # reading
    def count(self) -> int:
        return len(self._mine())

    def ids(self) -> list[str]:
        return list(self._mine())

    def items(self) -> Iterator[GalleryItem]:
        return iter([GalleryItem(id=id_, path=str(meta.get("path", "")), metadata=dict(meta))
                     for id_, (_, meta) in list(self._mine().items())])

    def get_where(self, where: dict[str, Any] | None = None, *, ids: Sequence[str] | None = None,
                  limit: int | None = None) -> dict[str, dict[str, Any]]:
        mine = self._mine()
        found: dict[str, dict[str, Any]] = {}
        for id_ in (list(mine) if ids is None else [i for i in dict.fromkeys(ids) if i in mine]):
            if limit is not None and len(found) >= limit:
                break
            if matches(where or {}, mine[id_][1]):
                found[id_] = dict(mine[id_][1])
        return found

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray:
        mine = self._mine()
        missing = [id_ for id_ in ids or () if id_ not in mine]
        if missing:
            raise ImageNotFoundError(f"not in gallery {self.location}: {missing[:5]}", location=self.location)
        rows = [mine[id_][0] for id_ in (list(mine) if ids is None else ids)]
        return np.asarray(rows, np.float32).reshape(len(rows), self._gallery.dims.get(self.embedder_name, 0))

    # vector search
    def _cosine(self, query: Sequence[float], stored: Sequence[float]) -> float:
        if len(query) != len(stored):
            raise DimensionMismatchError(f"query vector has {len(query)} dimensions, gallery {self.location} "
                                         f"stores {len(stored)}-d vectors")
        norm = math.sqrt(sum(q * q for q in query)) * math.sqrt(sum(s * s for s in stored))
        return sum(q * s for q, s in zip(query, stored)) / (norm or 1.0)

    def nearest(self, vector: np.ndarray, n: int, where: dict[str, Any] | None = None, *,
                among: Sequence[str] | None = None, with_vectors: bool = False) -> list[Candidate]:
        mine = self._mine()
        if not mine:
            raise self._empty()
        query = [float(x) for x in np.asarray(vector, np.float32).reshape(-1)]
        allowed = None if among is None else set(among)
        scored = [(self._cosine(query, stored), id_) for id_, (stored, meta) in mine.items()
                  if (allowed is None or id_ in allowed) and matches(where or {}, meta)]
        scored.sort(key=lambda pair: -pair[0])  # stable: ties in insertion order
        return [Candidate(id_, dict(mine[id_][1]), 1.0 - cosine,
                          np.asarray(mine[id_][0], np.float32) if with_vectors else None)
                for cosine, id_ in scored[: int(n)]]

    def rank_ids(self, vectors: Any, k: int = 10) -> list[list[tuple[str, float]]]:
        check_k(k)
        if not self._mine():
            raise self._empty()
        return [[(hit.id, 1.0 - hit.distance) for hit in self.nearest(np.asarray(row), k)]
                for row in np.asarray(vectors, np.float32)]

    # writing
    def upsert(self, ids: Sequence[str], vectors: Any, metadatas: Sequence[dict[str, Any]]) -> int:
        vectors = upsert_rows(ids, vectors, metadatas)
        if not len(ids):
            return 0
        with self.writing():
            dim = self._gallery.dims.setdefault(self.embedder_name, int(self.embedder.dim))
            if vectors.shape[1] != dim:
                raise DimensionMismatchError(f"{vectors.shape[1]}-d vectors cannot go into {dim}-d gallery")
            for meta in metadatas:
                _check_metadata(meta)
            mine = self._gallery.records.setdefault(self.embedder_name, {})
            for id_, vector, meta in zip(ids, vectors, metadatas):
                kept = mine[id_][1] if id_ in mine else {}
                mine[id_] = ([float(x) for x in vector], {**kept, **meta})
            self._gallery.writes += 1
        return len(ids)

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        if not check_updates(ids, metadatas):
            return
        if not self._mine():
            raise self._empty()
        with self.writing():
            mine = self._mine()
            for id_, meta in zip(ids, metadatas):
                _check_metadata(meta)
                if id_ in mine:
                    mine[id_] = (mine[id_][0], {**mine[id_][1], **meta})
            self._gallery.writes += 1

    def delete(self, ids: Sequence[str]) -> None:
        with self.writing():
            mine = self._mine()
            for id_ in ids:
                mine.pop(id_, None)
            self._gallery.writes += 1
