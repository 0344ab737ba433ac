"""The store core: the few things a storage backend does, and what indexing writes through.

- :class:`StoreCore`: what a backend implements: write, delete, get (by ids, with a ``where``), vector search with a
  ``where``, count, its JSON records and its changes. Chroma's :class:`~pictrieve.vectorstore.gallery.Gallery` and
  the in-memory :class:`~pictrieve.vectorstore.memory_store.MemoryStore` are such cores, and nothing more: text,
  image and hybrid search, relevance, duplicate folding, filters and indexing are written once above any core
  (:class:`~pictrieve.vectorstore.service.StoreService`), so a third store is a core alone;
- :class:`ImageWriter`: the narrow view indexing, watching and syncing write through;
- :data:`Where`: a search's filter; :class:`TileSearch`: a view's tile index; :class:`Candidate`: one row of a
  vector search.

This module imports nothing of indexing or of the service, so everything else in ``vectorstore/`` can lean on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterator, NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np

from pictrieve.vectorstore.photo_filter import PhotoFilter

if TYPE_CHECKING:
    from pictrieve.tools.models.embedders.base import Embedder
    from pictrieve.vectorstore.reading import GalleryItem

Where = dict[str, Any] | PhotoFilter | None
"""A search's filter: a :class:`PhotoFilter` on the photos' own metadata, or a Chroma-style ``where`` dict
(``{"key": value}``, ``{"key": {"$gte": 3}}``, ``$and``/``$or``, ``$in``/``$nin``, ``$ne``,
``$gt``/``$lt``/``$lte``)."""


class TileSearch(Protocol):
    """The tiles of one view: whether any were made, and each query's best images by their best tile."""

    def exists(self) -> bool: ...

    def rank_ids(self, vectors: np.ndarray, k: int, tiles_per_image: int = 4) -> list[list[tuple[str, float]]]: ...


@runtime_checkable
class ImageWriter(Protocol):
    """What indexing, watching and syncing write through: one embedder's view of a gallery.

    ``writing()`` holds the gallery's write turn for a block (other writer processes wait); every write
    method takes it itself too. Image ids are :func:`~pictrieve.vectorstore.chroma_store.path_id` of the file.
    """

    location: str
    embedder_name: str

    @property
    def embedder(self) -> "Embedder": ...

    @property
    def embedder_loaded(self) -> bool: ...

    def exists(self) -> bool: ...

    def writing(self) -> ContextManager[Any]: ...

    def count(self) -> int: ...

    def items(self) -> Iterator["GalleryItem"]: ...

    def metadata_of(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray: ...

    def find_content(self, sha256: str, *, other_than: str | None = None) -> tuple[str, dict[str, Any]] | None: ...

    def upsert(self, ids: Sequence[str], vectors: Any, metadatas: Sequence[dict[str, Any]]) -> int: ...

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...

    def set_default_embedder(self, name: str | None = None, *, keep_existing: bool = False) -> None: ...

    def get_json(self, key: str) -> dict[str, Any] | None: ...

    def put_json(self, key: str, value: dict[str, Any]) -> None: ...


def upsert_rows(ids: Sequence[str], vectors: Any, metadatas: Sequence[dict[str, Any]]) -> np.ndarray:
    """``vectors`` as ``(n, dim)`` float32 after the checks every core's ``upsert`` makes (one vector row and one
    metadata dict per id, else ``ValueError``)."""
    rows = np.asarray(vectors, dtype=np.float32)
    if rows.ndim != 2 or len(rows) != len(ids) or len(metadatas) != len(ids):
        raise ValueError(f"upsert needs one vector row and one metadata dict per id: {len(ids)} ids, "
                         f"vectors of shape {rows.shape}, {len(metadatas)} metadata dicts")
    return rows


def check_updates(ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> bool:
    """Whether an ``update_metadata`` has anything to do, after its check (one metadata dict per id, else
    ``ValueError``)."""
    if len(ids) != len(metadatas):
        raise ValueError("update_metadata needs one metadata dict per id")
    return bool(len(ids))


class Candidate(NamedTuple):
    """One record a core's :meth:`StoreCore.nearest` found: its id, stored metadata, cosine distance to the query
    (``1 - cosine``) and, when asked for, its stored vector."""

    id: str
    metadata: dict[str, Any]
    distance: float
    vector: Any = None


@runtime_checkable
class StoreCore(Protocol):
    """What a storage backend implements: one embedder's view of a gallery, whose views share image ids.

    Every failure is a :class:`~pictrieve.vectorstore.errors.GalleryError` kind, never the backend's own exception.
    A ``where`` here is a Chroma-style dict on stored metadata (``{"key": value}``, ``$and``/``$or``,
    ``$eq``/``$ne``/``$gt``/``$gte``/``$lt``/``$lte``/``$in``/``$nin``, as Chroma decides them) or ``None``;
    photo filters are the service's (it narrows by ``where`` and checks the rest itself).

    A backend class subclasses :class:`~pictrieve.vectorstore.service.StoreService`, sets the view's embedder with
    its ``_start_view`` and implements the members below.
    """

    location: str
    """The gallery's name in messages: a folder, a URL, ``memory:N``."""
    embedder_name: str
    collection_name: str
    """This embedder's part of the gallery (stable: a cache key)."""
    writes_from_another_thread: bool
    """Whether indexing may hand this store's writes to a writer thread while the caller holds the write turn (the
    turn's locks are shared with that thread); false: written from the indexing thread itself."""

    # ------------------------------------------------------------------ the gallery and its views

    @property
    def embedder_names(self) -> list[str]:
        """Every embedder with images in this gallery, sorted by name."""
        ...

    def with_embedder(self, embedder: "Embedder | str") -> "StoreCore":
        """The same gallery through another embedder."""
        ...

    def check_embedder(self, embedder: "Embedder") -> None:
        """Refuse (:class:`~pictrieve.vectorstore.errors.DimensionMismatchError`,
        :class:`~pictrieve.vectorstore.errors.EmbedderChangedError`) an embedder whose vectors differ in kind from
        those stored for this view."""
        ...

    def exists(self) -> bool:
        """Whether the gallery exists yet (its first write makes it; reading never does)."""
        ...

    def writing(self) -> ContextManager[Any]:
        """Hold the gallery's write turn for the block (other writers wait; re-entered by its holder)."""
        ...

    def read_record(self, key: str) -> dict[str, Any] | None:
        """The gallery's JSON record ``key`` (``None`` if absent)."""
        ...

    def write_record(self, key: str, value: dict[str, Any]) -> None:
        """Replace the gallery's JSON record ``key`` (a dict), atomically."""
        ...

    # ------------------------------------------------------------------ reading

    def count(self) -> int: ...

    def ids(self) -> list[str]:
        """Every id, in a stable order (the order of :meth:`embeddings` with ``ids=None``)."""
        ...

    def items(self) -> Iterator["GalleryItem"]:
        """Every record, in :meth:`ids` order."""
        ...

    def get_where(self, where: dict[str, Any] | None = None, *, ids: Sequence[str] | None = None,
                  limit: int | None = None) -> dict[str, dict[str, Any]]:
        """Stored metadata by id of the records passing ``where``: among ``ids`` when given (unknown ids left out),
        at most ``limit``."""
        ...

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray:
        """Stored vectors ``(n, dim)`` float32: for ``ids`` in order (an unknown id raises
        :class:`~pictrieve.vectorstore.errors.ImageNotFoundError`), or all in :meth:`ids` order."""
        ...

    # ------------------------------------------------------------------ vector search

    def nearest(self, vector: np.ndarray, n: int, where: dict[str, Any] | None = None, *,
                among: Sequence[str] | None = None, with_vectors: bool = False) -> list[Candidate]:
        """The ``n`` records closest to ``vector`` by cosine, best first (ties in a stable order), among those
        passing ``where``, or among the ids ``among``; fewer when fewer pass. Raises
        :class:`~pictrieve.vectorstore.errors.EmptyGalleryError` when the view holds no image, and
        :class:`~pictrieve.vectorstore.errors.DimensionMismatchError` for a vector of another dimension."""
        ...

    def rank_ids(self, vectors: Any, k: int = 10) -> list[list[tuple[str, float]]]:
        """For each row of ``vectors`` its ``k`` nearest images as ``(id, cosine)``, best first (one batch)."""
        ...

    def tiles(self) -> TileSearch:
        """This view's tile index (NEEDLE's smart tiles); ``exists()`` is false where none were made."""
        ...

    # ------------------------------------------------------------------ writing

    def upsert(self, ids: Sequence[str], vectors: Any, metadatas: Sequence[dict[str, Any]]) -> int:
        """Store vectors and metadata under ``ids``: a record's vector and the metadata keys given replace those
        stored, other keys stay. Writing the same records twice changes nothing. Returns how many were written."""
        ...

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        """Merge keys into stored metadata (values: str, int, float, bool or non-empty lists of one of them)."""
        ...

    def delete(self, ids: Sequence[str]) -> None:
        """Remove the records ``ids`` (unknown ids are ignored)."""
        ...

    # ------------------------------------------------------------------ changes

    def change_feed(self) -> str | None:
        """The embedded Chroma folder whose database file indexes derived from this gallery follow
        (:mod:`~pictrieve.vectorstore.changes`); ``None``: no feed, they are built from the records each time."""
        ...

    def write_stamp(self) -> Any:
        """A value every write changes (``None``: none is kept, so nothing derived from the gallery is cached)."""
        ...
