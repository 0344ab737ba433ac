"""Image galleries: image embeddings in Chroma, searchable by text, image or vector.

A gallery is one Chroma database (an embedded folder, or a ``chroma run`` server at
``http://host:port``) holding one collection per embedder, because embedders differ in dimension and
meaning. Every collection uses the same record id for an image file (:func:`path_id`), its vector is
that embedder's L2-normalised image embedding, and its metadata holds the path, size, modification
time, content hash and any sidecar captions. Collections use cosine HNSW, so a hit's ``score`` is
the cosine similarity. A :class:`Gallery` object is a view of the database through one embedder;
:meth:`Gallery.with_embedder` gives a view through another, and the gallery records a default one.

Reading never creates anything: opening, counting, searching, listing or planning a gallery that
does not exist yet leaves no folder behind and no collection on a server, and opening a folder that
holds no gallery database (``chroma.sqlite3``) writes nothing into it (with ``create=False`` it is
refused with :class:`NotAGalleryError`). Writes create what they
need: :meth:`Gallery.add` (indexing files), :meth:`Gallery.upsert` (precomputed vectors, from any
process), :meth:`Gallery.put_json`, :meth:`Gallery.set_default_embedder`, :meth:`Gallery.create`
(the database and this embedder's collection, empty), and the :func:`chroma_collection` handle of
a gallery opened with ``create=True``; :meth:`Gallery.update_metadata` and :meth:`Gallery.delete`
change only what is there. Writers to an embedded gallery take turns through its write lock
(:meth:`Gallery.writing`); a server serialises writes itself, so processes on other machines write
to it directly, holding only its ``http://`` location and the embedder's name.

Indexing can be split into steps that other processes or machines share (plan, prepare, embed,
write precomputed vectors): see :mod:`~pictrieve.vectorstore.indexing`.

The parts live in short modules: ``chroma_store`` (connecting, naming, the write lock), ``records``
(the small JSON records), ``reading`` (ids, items, vectors), ``indexing`` (adding files), ``errors``;
this module holds the :class:`Gallery` class itself: opening, and Chroma's store core
(:class:`~pictrieve.vectorstore.core.StoreCore`: reading, vector search with a ``where``, writing). Text, image and
hybrid search, photo filters, relevance, duplicates, records and indexing are
:class:`~pictrieve.vectorstore.service.StoreService`'s, the same code as every store's.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, TypeVar

import numpy as np

from pictrieve.tools.models.embedders.base import Embedder
from pictrieve.tools.models.embedders.factory import default_embedder_name
from pictrieve.vectorstore.changes import position, read_metadata, record_count
from pictrieve.vectorstore.chroma_store import (
    MODEL_KEY,
    Database,
    RENAMED_EMBEDDERS,
    connect,
    embedder_collections,
    existing_client,
    find_collection,
    holds_write_lock,
    is_server,
    not_a_gallery,
    read_generation,
    renamed_holder,
    write_lock,
)
from pictrieve.vectorstore.core import Candidate, check_updates, upsert_rows
from pictrieve.vectorstore.errors import (
    DimensionMismatchError,
    EmbedderChangedError,
    EmptyGalleryError,
    GalleryError,
    GalleryUnreachableError,
    NotAGalleryError,
    StoreBackendError,
)
from pictrieve.vectorstore.filter_index import nearest_among, note_written, refresh_written, scored_here
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.reading import CollectionReader, GalleryItem
from pictrieve.vectorstore.records import RecordStore
from pictrieve.vectorstore.relevance import cutoff_from_records, record_key
from pictrieve.vectorstore.service import StoreService, check_k

logger = logging.getLogger(__name__)
T = TypeVar("T")

if TYPE_CHECKING:
    from pictrieve.vectorstore.tiles import TileIndex


def _index_older_than_records(error: BaseException) -> bool:
    """Whether Chroma refused a read because a record its SQLite holds is missing from the loaded HNSW index."""
    return "Error finding id" in str(error)


# Chroma's default ef_search (100) gives recall@10 of about 0.91 against exact search at 1M vectors;
# 200 gives about 0.97 at no measurable latency cost (BENCHMARKS.md, search latency).
DEFAULT_HNSW = {"ef_search": 200}

SearchHit = ImageHit
"""Deprecated alias: search results are :class:`~pictrieve.vectorstore.hits.ImageHit`."""



def _from_chroma(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by Chroma: one of its error kinds, or raised inside its package (its
    argument checks raise plain ``ValueError``)."""
    if type(exc).__module__.split(".")[0] == "chromadb":
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}chromadb{os.sep}" in tb.tb_frame.f_code.co_filename


def _chroma_errors(method: Callable[..., T]) -> Callable[..., T]:
    """Turn what Chroma raises inside a :class:`Gallery` method into a :class:`GalleryError` kind: a ``chroma run``
    server that does not answer into :class:`GalleryUnreachableError`, anything else Chroma refuses or fails into
    :class:`StoreBackendError` (Chroma's exception is its ``__cause__``). Callers catch :class:`GalleryError`."""

    def translated(self: "Gallery", exc: BaseException) -> BaseException:
        if isinstance(exc, GalleryError):
            return exc
        if is_server(self.location) and _is_connection_failure(exc):
            return GalleryUnreachableError(
                f"the Chroma server at {self.location} is not answering ({type(exc).__name__})",
                fix="start it again (`chroma run`), or check the address", location=str(self.location))
        if _from_chroma(exc):
            return StoreBackendError(f"gallery {self.location}: Chroma refused {method.__name__} "
                                     f"({type(exc).__name__}: {exc})", location=str(self.location))
        return exc

    def guarded(items: Iterator[Any], self: "Gallery") -> Iterator[Any]:
        try:
            yield from items
        except Exception as exc:
            error = translated(self, exc)
            if error is exc:
                raise
            raise error from exc

    @functools.wraps(method)
    def wrapper(self: "Gallery", *args: Any, **kwargs: Any) -> T:
        try:
            result = method(self, *args, **kwargs)
        except Exception as exc:
            error = translated(self, exc)
            if error is exc:
                raise
            raise error from exc
        if inspect.isgenerator(result):
            return guarded(result, self)  # type: ignore[return-value]
        return result

    return wrapper


class Gallery(StoreService):
    """A searchable image collection, seen through one embedder, stored in Chroma: Chroma's store core
    (:class:`~pictrieve.vectorstore.core.StoreCore`), searched through
    :class:`~pictrieve.vectorstore.service.StoreService` like every store.

    Open with :meth:`Gallery.open`; see the module docstring for the storage layout and what creates it.
    """

    writes_from_another_thread = True
    """Indexing may hand this store's writes to a writer thread while the caller holds the write turn: the turn's
    locks are shared with that thread (:func:`~pictrieve.vectorstore.chroma_store.sharing_write_locks`). A store
    without this (the in-memory one, whose turn is a thread's lock) is written from the indexing thread itself."""

    def __init__(
        self, client: Any | None, location: str, embedder: Embedder | str, hnsw: dict[str, Any] | None = None,
        *, create: bool = True,
    ) -> None:
        self._db = client if isinstance(client, Database) else Database.of(str(location), client)
        self._collection_epoch = -1
        self.hnsw = dict(hnsw or {})
        self.location = str(location)
        self._creates_collection = bool(create)  # whether the `collection` handle creates a missing one
        self._collection: Any = None
        self._batch_limit: int | None = None
        self._start_view(embedder)

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        location: str | os.PathLike,
        embedder: Embedder | str | None = None,
        *,
        create: bool = True,
        hnsw: dict[str, Any] | None = None,
    ) -> "Gallery":
        """Open the gallery at a folder path or ``http://host:port`` Chroma server. Never writes.

        ``embedder`` is an :class:`Embedder` or a factory name; when omitted, the gallery's recorded
        default embedder is used (or its only one; for an older gallery holding several and no record,
        the one with the most images), and the global default for a new gallery. The model is loaded
        lazily. With ``create=False`` a missing gallery, or one without images for the embedder, is an
        error, and the :attr:`collection` handle never creates one. Nothing is created on disk until
        something is written (:meth:`add`, :meth:`upsert`, :meth:`create`, ...). ``hnsw`` holds Chroma
        HNSW options (``ef_construction``, ``max_neighbors``, ``ef_search``) for collections this
        object creates; to change ``ef_search`` of an existing collection call :meth:`set_ef_search`.
        """
        location = str(location)
        database = Database.of(location)
        client = database.connect(create=False)
        if client is None and not create:
            raise not_a_gallery(location)
        if embedder is None:
            embedder = (_stored_default(client) if client is not None else None) or default_embedder_name()
        gallery = cls(database, location, embedder, hnsw, create=create)
        if not create and gallery._get_collection(create=False) is None:
            raise EmptyGalleryError(
                f"gallery {location} has no images for embedder {gallery.embedder_name!r} "
                f"(it holds: {', '.join(gallery.embedder_names) or 'nothing'})",
                fix="pass embedder=... to Gallery.open, or index images with this embedder via gallery.add(PHOTOS)",
                location=str(location),
            )
        return gallery

    def with_embedder(self, embedder: Embedder | str) -> "Gallery":
        """A view of the same database through another embedder's collection (ids are shared)."""
        return type(self)(self._db, self.location, embedder, self.hnsw, create=self._creates_collection)

    def _chroma_client(self) -> Any:
        """The Chroma client of the gallery's database. Reading it creates nothing: a gallery folder
        not made yet raises :class:`GalleryError` (a write, or :meth:`create`, makes it)."""
        return existing_client(self._db)

    @property
    def database(self) -> Database:
        """The connection to the gallery's Chroma database that this view shares with its other views (for
        Chroma's own code inside ``vectorstore/``: the tiles)."""
        return self._db

    def change_feed(self) -> str | None:
        """The folder of an embedded gallery, whose database file the derived indexes follow
        (:mod:`~pictrieve.vectorstore.changes`); ``None`` for a ``chroma run`` server, which keeps no feed."""
        return None if is_server(self.location) else self.location

    def write_stamp(self) -> tuple[Any, Any] | None:
        """The gallery's write state, which every write changes: an embedded gallery's write counter
        (:func:`~pictrieve.vectorstore.chroma_store.read_generation`) and its collection's newest write sequence
        number (:func:`~pictrieve.vectorstore.changes.position`: a bare Chroma client's write moves it too);
        ``None`` for a ``chroma run`` server, which keeps neither (then nothing derived from it is cached)."""
        location = self.change_feed()
        if location is None:
            return None
        generation, feed = read_generation(location), position(location, self.collection_name)
        return None if generation is None and feed is None else (generation, feed)

    @property
    def _client(self) -> Any | None:
        """The current client (``None``: no database yet), reopened first when another process wrote
        to an embedded gallery since: every read goes through here (see :class:`Database`)."""
        return self._db.client

    def exists(self) -> bool:
        """Whether the database exists yet (a new gallery is created by its first write)."""
        return self._client is not None or is_server(self.location)

    def tiles(self) -> "TileIndex":
        """This view's tile collection (:class:`~pictrieve.vectorstore.tiles.TileIndex`; made by ``pictrieve tile``)."""
        from pictrieve.vectorstore.tiles import TileIndex

        return TileIndex(self)

    def _connect_for_write(self) -> Any:
        return self._db.connect(create=True)

    @contextlib.contextmanager
    def writing(self) -> Iterator["Gallery"]:
        """Hold the gallery's write lock for the block (creating the database first if it is missing),
        so several writes go in one turn: other writer processes to an embedded gallery wait (see
        :func:`~pictrieve.vectorstore.chroma_store.write_lock`; a server needs no lock). Every write
        method takes the lock itself; inside the block it goes on without waiting for itself."""
        self._connect_for_write()
        turn = not holds_write_lock(self.location)
        with write_lock(self.location):
            self._db.refresh(force=True)  # write over what other processes wrote, never over a stale index
            yield self
        if turn:  # the end of this process's write turn: the filter columns of what it wrote, saved for the next
            refresh_written(self)

    @_chroma_errors
    def create(self) -> "Gallery":
        """Create the database and this embedder's collection if missing (its dimension and the
        model's fingerprint are recorded, so the model is loaded when only a name was given); return
        ``self``. Writers in other processes, which open the gallery with ``create=False``, expect it."""
        with self.writing():
            self._get_collection(create=True)
        return self

    @property
    @_chroma_errors
    def embedder_names(self) -> list[str]:
        """Every embedder with a collection in this gallery, sorted by name."""
        if self._client is None:
            return []
        return [row["embedder"] for row in embedder_collections(self._client, counts=False) if row["embedder"]]

    # ------------------------------------------------------------------ records

    def _records(self) -> RecordStore:
        return RecordStore(self._client)

    @_chroma_errors
    def read_record(self, key: str) -> dict[str, Any] | None:
        """The JSON record ``key`` stored in this gallery's database (``None`` if absent)."""
        return self._records().get(key)

    @_chroma_errors
    def write_record(self, key: str, value: dict[str, Any]) -> None:
        """Replace the JSON record ``key`` in this gallery's database (one upsert, in the write turn)."""
        with self.writing(), self._db.changing():
            self._records().put(key, value)

    # ------------------------------------------------------------------ collections

    def _write_collection(self) -> Any:
        """This embedder's Chroma collection, to use directly. It is a write handle: on a gallery opened
        with ``create=True`` (the default) a missing one is created, with the database; with
        ``create=False`` it raises :class:`EmptyGalleryError` instead. :meth:`upsert` and the other
        write methods also take the write lock."""
        if self._creates_collection:
            self._connect_for_write()
            return self._get_collection(create=True)
        collection = self._get_collection(create=False)
        if collection is None:
            raise self._empty_error()
        return collection

    def _get_collection(self, *, create: bool) -> Any:
        """This embedder's collection (``None``: none yet); with ``create`` a missing one is made."""
        client = self._client
        if self._collection_epoch != self._db.epoch:  # reopened: handles of the old client are stale
            self._collection, self._collection_epoch = None, self._db.epoch
        if self._collection is None and client is not None:
            self._collection = find_collection(client, self.embedder_name, location=self.location)
            if self._collection is None and create:
                embedder = self.embedder  # loaded before the lock: other processes' queries go on meanwhile
                with self._db.changing():
                    self._collection = self._find_or_create(client, embedder)
        return self._collection

    def _fresh_read(self, read: Callable[[Any], T]) -> T:
        """``read(collection)``; once more on a reopened database when it failed because another process wrote
        records after this process loaded the collection's index.

        Chroma's SQLite sees another process's records at once, its in-memory HNSW index only once reopened, and
        the write counter is looked at every :data:`FRESH_CHECK_SECONDS`: in between, a query with a ``where``
        filter, or a read of a new record's vector, names a record the loaded index lacks ("Error finding id").
        Reopening then answers with the new records instead of failing."""
        collection = self._get_collection(create=False)
        try:
            return read(collection)
        except Exception as error:  # chromadb.errors.InternalError; matched by its words, as Chroma gives no kind
            if self._db.server or not _index_older_than_records(error):
                raise
            logger.debug("gallery %s: index older than its records (%s); reopening", self.location, error)
            self._db.refresh(reopen=True)  # (a bare Chroma client's write moves no counter)
            return read(self._get_collection(create=False))

    def _find_or_create(self, client: Any, embedder: Embedder) -> Any:
        """This embedder's collection, adopting an older gallery's or making it (a write)."""
        collection = find_collection(client, self.embedder_name, adopt_renamed=True, location=self.location)
        if collection is None:
            collection = client.create_collection(
                self.collection_name,
                embedding_function=None,
                configuration={"hnsw": {**DEFAULT_HNSW, **self.hnsw, "space": "cosine"}},
                metadata={"embedder": self.embedder_name, "dim": int(embedder.dim),
                          MODEL_KEY: str(getattr(embedder, "fingerprint", None) or "-")},
            )
        return collection

    def _renamed_error(self, holder: str | None) -> EmbedderChangedError:
        return EmbedderChangedError(
            f"gallery {self.location} holds {self.embedder_name!r} vectors from an earlier version, made by the "
            f"model now called {holder!r}; {self.embedder_name!r} now names a different model, and mixing the two "
            f"would rank nonsense. Search these images with embedder {holder!r} (nothing to re-index), or index "
            f"the photos again with {self.embedder_name!r} (the older vectors stay, as {holder!r})"
        )

    def check_embedder(self, embedder: Embedder) -> None:
        """Refuse an embedder whose vectors differ in dimension, or whose weights differ, from those stored."""
        stored = self._reads().dim
        if stored is not None and int(stored) != int(embedder.dim):
            raise DimensionMismatchError(
                f"gallery {self.location} stores {stored}-d vectors for {self.embedder_name!r}, but "
                f"that embedder now produces {embedder.dim}-d vectors (different model or checkpoint?). "
                f"Index into a new gallery, or delete collection {self.collection_name!r} and re-index."
            )
        collection = self._get_collection(create=False)
        stored = None if collection is None else (collection.metadata or {}).get(MODEL_KEY)
        current = getattr(embedder, "fingerprint", None)
        if stored and stored != "-" and current and stored != current:
            raise EmbedderChangedError(
                f"gallery {self.location} holds {self.embedder_name!r} vectors made by other weights ({stored}) "
                f"than that embedder has now ({current}: a retrained head or a new version?). Mixing them would "
                "rank nonsense: index the photos into a new gallery, or use the weights that made them"
            )

    @_chroma_errors
    def set_ef_search(self, ef_search: int) -> None:
        """Change the stored HNSW ``ef_search`` (speed/recall of queries) of this collection: a write."""
        collection = self._get_collection(create=False)
        if collection is None:
            raise self._empty_error()
        with self.writing(), self._db.changing():
            collection = self._get_collection(create=False)  # the handle of a reopened client, if it was
            collection.modify(configuration={"hnsw": {"ef_search": int(ef_search)}})

    def _max_batch(self) -> int:
        """Records per Chroma call (asked once; only called once a collection, so a client, exists)."""
        if self._batch_limit is None:
            try:
                self._batch_limit = max(1, min(int(self._chroma_client().get_max_batch_size()), 5000))
            except Exception:  # older servers do not report it
                self._batch_limit = 1000
        return self._batch_limit

    # ------------------------------------------------------------------ reading

    def _reads(self) -> CollectionReader:
        return CollectionReader(self._get_collection(create=False), self.location, self._max_batch)

    def _fresh_reads(self, read: Callable[[CollectionReader], T]) -> T:
        return self._fresh_read(lambda collection: read(CollectionReader(collection, self.location, self._max_batch)))

    @_chroma_errors
    def count(self) -> int:
        """How many images this embedder's collection holds (0 when it has none): from the database file of an
        embedded gallery (Chroma's ``count`` first loads the collection's vector index: 0.6 s at 100k)."""
        location = self._database_file(self._get_collection(create=False))
        counted = None if location is None else record_count(location, self.collection_name)
        return counted if counted is not None else self._reads().count()

    def _database_file(self, collection: Any) -> str | None:
        """The folder of an embedded gallery whose ``collection`` is the one this view names, whose records are then
        read from its database file (:mod:`~pictrieve.vectorstore.changes`) where Chroma would first load the vector
        index; ``None`` otherwise (a server, no collection, one adopted under an older name)."""
        location = self.change_feed()
        return None if location is None or collection is None or collection.name != self.collection_name else location

    def _stored_metadata(self, collection: Any) -> Callable[[list[str]], dict[str, Any] | None] | None:
        """Reads the stored metadata of ids from the database file (:func:`_database_file`), or ``None``."""
        location = self._database_file(collection)
        return None if location is None else (lambda ids: read_metadata(location, self.collection_name, ids))

    @_chroma_errors
    def ids(self) -> list[str]:
        """All ids, in the stable order that :meth:`embeddings` with ``ids=None`` uses."""
        return self._reads().ids()

    @_chroma_errors
    def items(self) -> Iterator[GalleryItem]:
        """Every stored item, in :meth:`ids` order."""
        return self._reads().items()

    @_chroma_errors
    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray:
        """Stored vectors as ``(n, dim)`` float32: for ``ids`` in order, or all in :meth:`ids` order."""
        return self._fresh_reads(lambda reader: reader.embeddings(ids))

    @_chroma_errors
    def get_where(self, where: dict[str, Any] | None = None, *, ids: Sequence[str] | None = None,
                  limit: int | None = None) -> dict[str, dict[str, Any]]:
        """Stored metadata by id of the records passing the Chroma filter ``where``: among ``ids`` when given (read in
        batches Chroma takes; unknown ids left out), at most ``limit``."""
        collection = self._get_collection(create=False)
        if collection is None or (ids is not None and not len(ids)):
            return {}

        def read(collection: Any) -> dict[str, dict[str, Any]]:
            if ids is None:
                got = collection.get(where=where or None, limit=limit, include=["metadatas"])
                return {id_: dict(meta or {}) for id_, meta in zip(got["ids"], got["metadatas"])}
            found: dict[str, dict[str, Any]] = {}
            step = self._max_batch()
            for start in range(0, len(ids), step):
                got = collection.get(ids=list(ids[start : start + step]), where=where or None, include=["metadatas"])
                found.update((id_, dict(meta or {})) for id_, meta in zip(got["ids"], got["metadatas"]))
                if limit is not None and len(found) >= limit:
                    break
            return found if limit is None else dict(list(found.items())[:limit])

        return self._fresh_read(read)

    # ------------------------------------------------------------------ searching

    @_chroma_errors
    def nearest(self, vector: np.ndarray, n: int, where: dict[str, Any] | None = None, *,
                among: Sequence[str] | None = None, with_vectors: bool = False) -> list[Candidate]:
        """The ``n`` records closest to ``vector`` by cosine, best first, among those passing the Chroma filter
        ``where``, or among the ids ``among`` (scored exactly here when
        :func:`~pictrieve.vectorstore.filter_index.scored_here`: a short list, or the filter columns' photos whose
        vectors they keep; a longer one handed to Chroma's HNSW search).
        No ``count()`` before the query: on a 1M-image Chroma collection it costs ~60 ms, the query itself ~2 ms."""
        collection = self._get_collection(create=False)
        if collection is None:
            raise self._empty_error()
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        stored = self._reads().dim
        if stored is not None and vector.shape[0] != int(stored):
            raise DimensionMismatchError(
                f"query vector has {vector.shape[0]} dimensions, gallery {self.location} stores "
                f"{stored}-d vectors for {self.embedder_name!r}; embed the query with that embedder"
            )
        include = ["metadatas", "distances"] + (["embeddings"] if with_vectors else [])

        def query(collection: Any) -> dict[str, Any]:
            with self._db.querying():
                if among is not None and scored_here(among):  # few photos pass, or their vectors are at hand
                    return nearest_among(collection, vector, among, n, include, self._stored_metadata(collection))
                return collection.query(query_embeddings=[vector.tolist()], n_results=int(n), where=where,
                                        include=include, **({} if among is None else {"ids": list(among)}))

        result = self._fresh_read(query)
        found = result["ids"][0]
        if not found and ((where is None and among is None)
                          or self._get_collection(create=False).count() == 0):  # the reopened handle, if it was
            raise self._empty_error()
        return [Candidate(id_, result["metadatas"][0][i], float(result["distances"][0][i]),
                          result["embeddings"][0][i] if with_vectors else None) for i, id_ in enumerate(found)]

    @_chroma_errors
    def rank_ids(self, vectors: np.ndarray | Sequence[Sequence[float]], k: int = 10) -> list[list[tuple[str, float]]]:
        """For each row of ``vectors``, its ``k`` nearest images as ``(id, cosine)``, best first: one
        batched query, no metadata (what rank fusion needs; :meth:`search_vector` gives full hits)."""
        check_k(k)
        collection = self._get_collection(create=False)
        if collection is None:
            raise self._empty_error()
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) == 0:
            return []
        def query(collection: Any) -> dict[str, Any]:
            with self._db.querying():
                return collection.query(query_embeddings=vectors.tolist(), n_results=int(k), include=["distances"])

        result = self._fresh_read(query)
        return [[(id_, 1.0 - float(d)) for id_, d in zip(ids, dists)]
                for ids, dists in zip(result["ids"], result["distances"])]

    def _empty_error(self) -> EmptyGalleryError | EmbedderChangedError:
        holder = None if self._client is None else renamed_holder(self._client, self.embedder_name)
        if holder:
            return self._renamed_error(holder)
        return EmptyGalleryError(
            f"gallery {self.location} has no images for embedder {self.embedder_name!r}",
            fix="add some with gallery.add(PHOTOS) first",
            location=str(self.location),
        )

    # ------------------------------------------------------------------ writing

    @_chroma_errors
    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray | Sequence[Sequence[float]],
        metadatas: Sequence[dict[str, Any]],
    ) -> int:
        """Store precomputed vectors of this view's embedder under ``ids``, replacing any stored
        there: writing the same records twice changes nothing, so an interrupted writer can simply go
        again. ``vectors`` are ``(n, dim)`` L2-normalised embeddings made by this embedder (as
        :class:`~pictrieve.vectorstore.indexing.BatchWriter` makes them); ``metadatas`` hold at least
        ``path`` (indexing adds name, size, mtime_ns, sha256, width, height, captions). Image ids are
        :func:`path_id` of the file. Creates the database and the collection when missing, takes the
        write lock of an embedded gallery, and is safe from many processes against a server.
        Returns the number of records written."""
        vectors = upsert_rows(ids, vectors, metadatas)
        if not len(ids):
            return 0
        with self.writing():
            collection = self._get_collection(create=True)
            stored = self._reads().dim
            if stored is not None and int(stored) != vectors.shape[1]:
                raise DimensionMismatchError(
                    f"{vectors.shape[1]}-d vectors cannot go into gallery {self.location}: it stores {stored}-d "
                    f"vectors for {self.embedder_name!r}; embed the images with that embedder"
                )
            step = self._max_batch()
            with self._db.changing(), self._server_answers():
                for start in range(0, len(ids), step):
                    collection.upsert(ids=list(ids[start : start + step]), embeddings=vectors[start : start + step],
                                      metadatas=[dict(m) for m in metadatas[start : start + step]])
            note_written(self)
        return len(ids)

    @contextlib.contextmanager
    def _server_answers(self) -> Iterator[None]:
        """Turn a ``chroma run`` server that went away mid-write into one :class:`GalleryUnreachableError`
        naming it (instead of an HTTP client's traceback); everything written before it is kept."""
        try:
            yield
        except GalleryError:
            raise
        except Exception as exc:
            if not is_server(self.location) or not _is_connection_failure(exc):
                raise
            raise GalleryUnreachableError(
                f"the Chroma server at {self.location} stopped answering while photos were written "
                f"({type(exc).__name__}); every batch written before is kept",
                fix="start the server again and re-run the same indexing: it resumes where it stopped",
                location=str(self.location),
            ) from exc

    @_chroma_errors
    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        """Merge keys into stored metadata (values: str, int, float, bool or lists of them)."""
        if not check_updates(ids, metadatas):
            return
        collection = self._get_collection(create=False)
        if collection is None:
            raise self._empty_error()
        with self.writing(), self._db.changing():
            collection = self._get_collection(create=False)  # the handle of a reopened client, if it was
            step = self._max_batch()
            for start in range(0, len(ids), step):
                collection.update(ids=list(ids[start : start + step]), metadatas=list(metadatas[start : start + step]))
            note_written(self)

    @_chroma_errors
    def delete(self, ids: Sequence[str]) -> None:
        """Remove the images ``ids`` from this embedder's collection (unknown ids are ignored)."""
        collection = self._get_collection(create=False)
        if not ids or collection is None:
            return
        with self.writing(), self._db.changing():
            self._get_collection(create=False).delete(ids=list(ids))  # the handle of a reopened client
            note_written(self)

    def __repr__(self) -> str:
        return f"Gallery({self.location!r}, embedder={self.embedder_name!r})"


def _is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is a lost or refused connection, not an answer from the server."""
    import httpx

    while exc is not None:
        if isinstance(exc, (httpx.TransportError, ConnectionError)) or "could not connect" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def chroma_client(gallery: Gallery) -> Any:
    """The Chroma client of ``gallery``'s database, for Chroma's own code inside ``vectorstore/`` (tiles) and tests
    of Chroma itself; every other caller uses the :class:`~pictrieve.vectorstore.store.ImageStore` methods. Reading
    it creates nothing (:class:`NotAGalleryError` when there is no database yet)."""
    return gallery._chroma_client()


def chroma_collection(gallery: Gallery) -> Any:
    """``gallery``'s Chroma collection for its embedder, a write handle: on a gallery opened with ``create=True`` a
    missing one is created, with the database; with ``create=False`` it raises :class:`EmptyGalleryError`. For
    Chroma's own code and tests, as :func:`chroma_client`."""
    return gallery._write_collection()


def gallery_contents(location: str | os.PathLike) -> list[dict[str, Any]]:
    """``[{"embedder", "dim", "images", "collection", "default", "relevance"}]`` for each embedder in a gallery;
    ``relevance``: the rule that marks its hits relevant and where it came from (see
    :meth:`~pictrieve.vectorstore.relevance.RelevanceCutoff.to_json`)."""
    client = connect(str(location), create=False)
    if client is None:
        raise not_a_gallery(str(location))
    default = _stored_default(client)
    records = RecordStore(client)
    return [
        {**row, "default": row["embedder"] == default,
         "relevance": cutoff_from_records(row["embedder"], records.get_user(record_key(row["embedder"]))).to_json()}
        for row in embedder_collections(client)
    ]


def _stored_default(client: Any) -> str | None:
    """The recorded default embedder; else the only one; else (older galleries) the largest one."""
    recorded = RecordStore(client).default_embedder
    rows = [row for row in embedder_collections(client) if row["embedder"]]
    names = {row["embedder"] for row in rows}
    if recorded in RENAMED_EMBEDDERS and recorded not in names and RENAMED_EMBEDDERS[recorded] in names:
        recorded = RENAMED_EMBEDDERS[recorded]  # recorded before the model was renamed
    if recorded and (not rows or recorded in {row["embedder"] for row in rows}):
        return recorded
    if not rows:
        return None
    chosen = max(rows, key=lambda row: (row["images"], [-ord(c) for c in row["embedder"]]))["embedder"]
    if len(rows) > 1:  # a gallery from before defaults were recorded: say which one, never guess silently
        logger.warning(
            "gallery holds several embedders (%s) and records no default; using %s, the one with the most "
            "images (record one with gallery.set_default_embedder(name))",
            ", ".join(row["embedder"] for row in rows), chosen,
        )
    return chosen
