"""The Chroma side of a gallery: connecting, naming collections, the write lock.

A gallery is one Chroma database (an embedded ``PersistentClient`` folder, or a ``chroma run`` server
at ``http://host:port``). Each embedder has its own collection (``images__<slug>__<hash>``), and
one more collection, ``pictrieve__records``, keeps small JSON records (the default embedder,
trust weights) keyed by name (:mod:`~pictrieve.vectorstore.records`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

from pictrieve.vectorstore.errors import (
    GalleryBusyError,
    GalleryError,
    GalleryPermissionError,
    NotAGalleryError,
)
from pictrieve.vectorstore.readonly_copy import cannot_write, private_copy

logger = logging.getLogger(__name__)

COLLECTION_PREFIX = "images__"
LOCK_FILE = ".pictrieve-write.lock"
DATABASE_FILE = "chroma.sqlite3"
"""The file that makes a folder a gallery: Chroma's database, written by the first index."""


MODEL_KEY = "model"
"""Collection metadata key: the embedder's ``fingerprint`` (which weights made the vectors), or ``"-"``."""

RENAMED_EMBEDDERS = {"offline": "offline-labels", "offline:detect": "offline-labels:detect"}
"""Names whose meaning changed. A collection made under the old name before galleries recorded
:data:`MODEL_KEY` holds the vectors of the model now called by the new name, and is read as that."""


def current_embedder_name(meta: dict[str, Any]) -> str | None:
    """The name of the embedder whose vectors a collection holds, from its metadata."""
    name = meta.get("embedder")
    if name in RENAMED_EMBEDDERS and MODEL_KEY not in meta:
        return RENAMED_EMBEDDERS[name]
    return name


def legacy_collection_name(embedder_name: str) -> str | None:
    """Where an older gallery keeps ``embedder_name``'s vectors, when that embedder was renamed."""
    old = {new: old for old, new in RENAMED_EMBEDDERS.items()}.get(embedder_name)
    return collection_name_for(old) if old else None


def find_collection(client: Any, embedder_name: str, *, adopt_renamed: bool = False, location: str = "") -> Any | None:
    """The collection holding ``embedder_name``'s vectors, or ``None``. Reads only, unless ``adopt_renamed``.

    An older gallery may hold the vectors of a model since renamed (:data:`RENAMED_EMBEDDERS`): under
    the old name's collection (found here when asked for by the new name), or under this name while
    it meant the older model. A writer (``adopt_renamed``) moves the latter to the model's new name,
    keeping the vectors and freeing this name for the model it names now; a reader gets ``None``
    (:func:`renamed_holder` says where the vectors are).
    """
    existing = {c.name for c in client.list_collections()}
    name = collection_name_for(embedder_name)
    if name in existing:
        collection = client.get_collection(name, embedding_function=None)
        holder = current_embedder_name(collection.metadata or {})
        if holder == embedder_name:
            return collection
        if not adopt_renamed:
            return None
        meta = {**(collection.metadata or {}), "embedder": holder, MODEL_KEY: "-"}
        collection.modify(name=collection_name_for(holder), metadata=meta)
        logger.warning("gallery %s: the %r vectors of an earlier version are kept as %r; indexing with the new %r",
                       location, embedder_name, holder, embedder_name)
        return find_collection(client, embedder_name, adopt_renamed=True, location=location)
    legacy = legacy_collection_name(embedder_name)
    if legacy in existing:
        collection = client.get_collection(legacy, embedding_function=None)
        if current_embedder_name(collection.metadata or {}) == embedder_name:
            return collection
    return None


def renamed_holder(client: Any, embedder_name: str) -> str | None:
    """The new name of an older model whose vectors sit under ``embedder_name``'s collection, if any."""
    name = collection_name_for(embedder_name)
    if name not in {c.name for c in client.list_collections()}:
        return None
    holder = current_embedder_name(client.get_collection(name, embedding_function=None).metadata or {})
    return holder if holder != embedder_name else None


def is_server(location: str) -> bool:
    return str(location).startswith(("http://", "https://"))


is_remote = is_server


def path_id(path: str | os.PathLike, *, resolve: bool = True) -> str:
    """The record id of an image file: a hash of its absolute path (stable across runs and embedders), links
    resolved; ``resolve=False``: of ``path`` as it is (the id of the record stored under a real path where a
    link now stands)."""
    absolute = Path(path).resolve() if resolve else Path(os.path.abspath(path))
    return hashlib.sha1(str(absolute).encode("utf-8")).hexdigest()[:24]


def collection_name_for(embedder_name: str) -> str:
    """A valid Chroma collection name for an embedder name (readable prefix + hash)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", embedder_name.split("/")[0])[:40].strip("-_") or "embedder"
    digest = hashlib.sha1(embedder_name.encode("utf-8")).hexdigest()[:10]
    return f"{COLLECTION_PREFIX}{slug}__{digest}"


def is_gallery_folder(path: str | os.PathLike) -> bool:
    """Whether a folder holds a gallery's database (a cheap check that opens and writes nothing)."""
    return (Path(path).expanduser() / DATABASE_FILE).is_file()


def not_a_gallery(location: str) -> NotAGalleryError:
    """The error for a location that holds no gallery: a missing folder, or one without a database."""
    path = Path(location).expanduser()
    problem = (f"{path} is not a pictrieve gallery" if path.is_dir()
               else f"no gallery at {path} (no such folder)")
    return NotAGalleryError(problem, fix=f"index photos into it with Gallery.open({location!r}).add(PHOTOS)",
                            location=str(location))


def connect(location: str, *, create: bool) -> Any | None:
    """A Chroma client for ``location``; with ``create=False`` ``None`` for a folder that holds no
    gallery database (missing, or without :data:`DATABASE_FILE`), so reading never writes: Chroma
    would otherwise create its database in any folder it opens."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if is_server(location):
        url = urlparse(location)
        try:
            client = chromadb.HttpClient(
                host=url.hostname or "localhost",
                port=url.port or (443 if url.scheme == "https" else 8000),
                ssl=url.scheme == "https",
                settings=settings,
            )
            client.heartbeat()
        except Exception as exc:
            raise GalleryError(
                f"cannot reach the Chroma server at {location} ({exc}); start one with "
                "`chroma run --path DIR --port PORT`, or open a gallery folder instead"
            ) from exc
        return client
    path = Path(location).expanduser()
    if path.exists() and not path.is_dir():
        raise GalleryError(f"{path} is a file, not a gallery folder; open a folder path")
    if path.is_dir() and not os.access(path, os.R_OK | os.X_OK):
        raise _permission_error(path, PermissionError(errno.EACCES, "Permission denied"))
    if not create and not is_gallery_folder(path):
        return None
    if not path.exists():
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise _permission_error(path, exc) from exc
    if not os.access(path, os.R_OK | os.X_OK) or (create and not os.access(path, os.W_OK)):
        raise _permission_error(path, PermissionError(errno.EACCES, "Permission denied"))
    if not create and cannot_write(path):  # Chroma writes on open: it reads a private copy (readonly_copy.py)
        try:
            return chromadb.PersistentClient(path=str(private_copy(path)), settings=settings)
        except OSError as exc:
            raise GalleryPermissionError(
                f"gallery folder {path} is read-only and no private copy of it could be made in the cache "
                f"({getattr(exc, 'strerror', None) or exc}); set PICTRIEVE_CACHE to a folder you can write to"
            ) from exc
    try:
        return chromadb.PersistentClient(path=str(path), settings=settings)
    except Exception as exc:  # chromadb wraps sqlite's errors in its own types
        if "permission" in str(exc).lower() or "readonly" in str(exc).lower():
            raise _permission_error(path, exc) from exc
        raise


def _permission_error(path: Path, exc: BaseException) -> GalleryPermissionError:
    return GalleryPermissionError(
        f"cannot use gallery folder {path}: {getattr(exc, 'strerror', None) or exc}; "
        "choose a gallery location you can write to"
    )


def embedder_collections(client: Any, *, counts: bool = True) -> list[dict[str, Any]]:
    """``[{"embedder", "dim", "images", "collection"}]`` for each embedder collection, by name.

    ``counts=False`` leaves ``images`` out: one listing call instead of a ``count()`` per collection
    (~60 ms each at 1M images), for callers on a search path that only need the names.
    """
    rows = []
    for listed in client.list_collections():
        if listed.name.startswith(COLLECTION_PREFIX):
            meta = listed.metadata or {}
            row = {"embedder": current_embedder_name(meta), "dim": meta.get("dim"), "collection": listed.name}
            if counts:
                row["images"] = client.get_collection(listed.name, embedding_function=None).count()
            rows.append(row)
    return sorted(rows, key=lambda row: str(row["embedder"]))


_held_locks = threading.local()
"""Per thread: the lock files this thread holds, so a write inside a held lock does not wait for itself."""


def held_write_locks() -> frozenset[str]:
    """The write locks the calling thread holds, for a helper thread that writes on its behalf
    (:func:`sharing_write_locks`)."""
    return frozenset(getattr(_held_locks, "paths", None) or ())


def holds_write_lock(location: str) -> bool:
    """Whether the calling thread holds (or shares) the write lock of the embedded gallery at ``location``: a write
    block that finds it held is nested in another one, whose end is the end of the write turn."""
    if is_server(location):
        return False
    return str((Path(location).expanduser() / LOCK_FILE).resolve()) in held_write_locks()


@contextlib.contextmanager
def sharing_write_locks(held: frozenset[str]) -> Iterator[None]:
    """Write in this thread, for the block, under write locks that another thread holds (``held``, from
    :func:`held_write_locks`), instead of waiting for them. That thread must keep holding them, and wait for this
    block, until the block ends (as :class:`~pictrieve.vectorstore.indexing.BatchWriter`'s writer thread does)."""
    mine: set[str] = getattr(_held_locks, "paths", None) or set()
    _held_locks.paths = mine
    lent = set(held) - mine
    mine |= lent
    try:
        yield
    finally:
        mine -= lent


@contextlib.contextmanager
def write_lock(location: str, *, timeout: float | None = None, poll: float = 0.2) -> Iterator[None]:
    """Hold the gallery's write lock (an ``flock`` on a file in an embedded gallery's folder).

    Chroma's embedded mode keeps an in-memory HNSW index per process, so two writer processes would
    overwrite each other's index files. Writers therefore take turns; a second writer waits (logging
    once), or raises :class:`GalleryBusyError` after ``timeout`` seconds. The kernel releases the lock
    when a process dies, even by ``kill -9``. Servers (``http://``) serialise writes themselves.
    The lock is re-entrant within one thread (a write inside a held lock goes on); other threads and
    processes wait. The gallery folder must exist.
    """
    if is_server(location):
        yield
        return
    path = Path(location).expanduser() / LOCK_FILE
    held: set[str] = getattr(_held_locks, "paths", None) or set()
    _held_locks.paths = held
    key = str(path.resolve())
    if key in held:
        yield
        return
    try:
        handle = open(path, "a+")
    except OSError as exc:
        raise _permission_error(path.parent, exc) from exc
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        announced = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise GalleryBusyError(
                        f"gallery {location} is busy: another process is writing to it; "
                        "try again when it has finished"
                    ) from None
                if not announced:
                    logger.warning("gallery %s is busy (another process is writing); waiting", location)
                    announced = True
                time.sleep(poll)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        handle.close()


# ---------------------------------------------------------------------------------------- freshness

GENERATION_FILE = ".pictrieve-generation"
"""In an embedded gallery's folder: a counter that every write bumps, and the lock that keeps a
reader's index load apart from a writer's index save (see :class:`Database`)."""

FRESH_CHECK_SECONDS = 0.5
"""How often (at most) a process looks whether another process wrote to an embedded gallery."""


def read_generation(location: str) -> int | None:
    """The embedded gallery's write counter (``None``: no writer of this version has written yet)."""
    try:
        with open(Path(location).expanduser() / GENERATION_FILE, "rb") as handle:
            text = handle.read(64)
    except OSError:
        return None
    try:
        return int(text.strip() or b"0")
    except ValueError:  # cannot happen with one pwrite of a fixed width; counted as a change
        return -1


@contextlib.contextmanager
def _flock(location: str, mode: int, *, create: bool) -> Iterator[int | None]:
    """Hold ``flock(mode)`` on the gallery's generation file for the block; yields its descriptor
    (``None`` and no lock when the file does not exist and ``create`` is false: nothing is written)."""
    path = Path(location).expanduser() / GENERATION_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT if create else os.O_RDONLY, 0o644)
    except FileNotFoundError:
        if create:
            raise
        yield None
        return
    except OSError as exc:
        if create:
            raise _permission_error(path.parent, exc) from exc
        yield None
        return
    try:
        fcntl.flock(fd, mode)
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases its lock


class Database:
    """One process's connection to a gallery database, shared by every view of it, and kept fresh.

    What Chroma promises (its "system constraints" page: thread-safe, *not process-safe*; chroma-core
    issues 2399, 3769 and 3792): an embedded ``PersistentClient`` keeps each collection's HNSW index in
    process memory, loaded once; another process's writes reach the shared SQLite file, so ``count`` and
    ``get`` see them at once, but ``query`` keeps searching the loaded index until the process restarts,
    and a new ``PersistentClient`` on the same path reuses the cached system (``SharedSystemClient``).
    The writer saves the index files in place after every write (open with ``O_TRUNC``, no rename), so
    a reader loading them meanwhile could read a torn file. A ``chroma run`` server is one process: its
    clients always see every write, and nothing here is needed for it.

    So, for an embedded gallery: every write (:meth:`changing`) holds an exclusive ``flock`` on
    :data:`GENERATION_FILE` and bumps the counter in it before letting go; a reader (:attr:`client`)
    reads the counter at most every :data:`FRESH_CHECK_SECONDS` and, when another process changed it,
    drops its Chroma system (out of Chroma's cache; the old one is freed when the last handle goes) and
    opens a new one, which loads the indexes from disk; a query (:meth:`querying`) holds a shared
    ``flock``, so an index is never loaded while a writer saves it. Views compare :attr:`epoch` to
    know that their collection handles are stale.
    """

    _shared: "weakref.WeakValueDictionary[str, Database]"

    def __init__(self, location: str, client: Any | None = None) -> None:
        self.location = str(location)
        self.server = is_server(self.location)
        self._seen = None if self.server else read_generation(self.location)  # read before connecting
        self._chroma = client
        self._checked = time.monotonic()
        self._lock = threading.RLock()
        self.epoch = 0

    @classmethod
    def of(cls, location: str, client: Any | None = None) -> "Database":
        """The process's shared :class:`Database` of an embedded gallery folder (a new one for a server)."""
        if is_server(location):
            return cls(location, client)
        key = str(Path(location).expanduser().resolve())
        with _shared_lock:
            database = _databases.get(key)
            if database is None:
                database = cls(location, client)
                _databases[key] = database
            elif database._chroma is None and client is not None:
                database._chroma = client
            return database

    @property
    def client(self) -> Any | None:
        """The Chroma client, reopened first if another process wrote since (``None``: no database yet)."""
        if not self.server:
            self.refresh()
        return self._chroma

    def connect(self, *, create: bool) -> Any | None:
        """The client, connecting (and with ``create`` making the database) when there is none yet. With
        ``create`` (a write is coming), a gallery on read-only storage is refused (:meth:`refuse_read_only`)."""
        if create:
            self.refuse_read_only()
        with self._lock:
            if self._chroma is None:
                if not self.server:
                    self._seen = read_generation(self.location)
                    # Chroma may still cache a system of this path from an earlier Database of this process
                    # (dropped with its last gallery handle), loaded before other processes' later writes: this
                    # Database counts from today's write counter, so it must load today's index too.
                    _drop_cached_system(self.location)
                self._chroma = connect(self.location, create=create)
                if self._chroma is not None:
                    self.epoch += 1
            return self._chroma

    def refresh(self, *, force: bool = False, reopen: bool = False) -> None:
        """Reopen when another process bumped the write counter (looked at, at most every
        :data:`FRESH_CHECK_SECONDS`, unless ``force``); with ``reopen``, even when it did not (a read found records
        the loaded index lacks: written by something that keeps no counter, such as a bare Chroma client)."""
        if self.server:
            return
        now = time.monotonic()
        if not (force or reopen) and now - self._checked < FRESH_CHECK_SECONDS:
            return
        with self._lock:
            self._checked = now
            current = read_generation(self.location)
            if self._chroma is None:
                if is_gallery_folder(self.location):  # made by another process since
                    self.connect(create=False)
                return
            if current == self._seen and not reopen:
                return
            logger.debug("gallery %s changed in another process (write %s); reopening", self.location, current)
            self._seen = current
            self._chroma = _fresh_client(self.location)
            self.epoch += 1

    def refuse_read_only(self) -> None:
        """Raise :class:`GalleryPermissionError` for an embedded gallery this process cannot write: it is read
        from a private copy (:mod:`~pictrieve.vectorstore.readonly_copy`), where a write would be lost."""
        if self.server or not is_gallery_folder(self.location) or not cannot_write(self.location):
            return
        path = Path(self.location).expanduser()
        raise GalleryPermissionError(
            f"cannot use gallery folder {path} to write: it is read-only (it can be searched, not changed); to index "
            f"or sync, copy it to a folder you can write to (cp -r {path} NEW) and pass --gallery NEW"
        )

    @contextlib.contextmanager
    def changing(self) -> Iterator[None]:
        """Hold the block's Chroma writes apart from other processes' index loads, then bump the
        counter (so readers reopen). The write lock (:func:`write_lock`) is held around it already."""
        if self.server:
            yield
            return
        self.refuse_read_only()
        with self._lock, _flock(self.location, fcntl.LOCK_EX, create=True) as fd:
            before = read_generation(self.location) or 0
            try:
                yield
            finally:
                os.pwrite(fd, b"%020d\n" % (before + 1), 0)
                if self._seen in (None, before):  # what this process sees is what it wrote
                    self._seen = before + 1

    @contextlib.contextmanager
    def querying(self) -> Iterator[None]:
        """Hold a shared lock for a query: a collection's index is loaded on its first query, and must
        not be read while a writer saves it. Creates nothing."""
        if self.server:
            yield
            return
        with _flock(self.location, fcntl.LOCK_SH, create=False):
            yield


def _fresh_client(location: str) -> Any:
    """A new Chroma client with its own system for an embedded gallery: Chroma caches one system per
    path and would hand back the stale one. Handles on the old system keep it until they go."""
    _drop_cached_system(location)
    client = connect(location, create=False)
    if client is None:
        raise NotAGalleryError(f"gallery {location} was removed while open", location=str(location))
    return client


def _drop_cached_system(location: str) -> None:
    """Make Chroma's next client of an embedded gallery build its own system (loading the index from disk)
    instead of the one it caches per path; handles on the old system keep it until they go."""
    from chromadb.api.shared_system_client import SharedSystemClient

    identifier = str(Path(location).expanduser())  # what `connect` passes as the path
    with SharedSystemClient._refcount_lock:
        SharedSystemClient._identifier_to_system.pop(identifier, None)
        SharedSystemClient._identifier_to_refcount.pop(identifier, None)


_shared_lock = threading.Lock()
_databases: "weakref.WeakValueDictionary[str, Database]" = weakref.WeakValueDictionary()


def existing_client(database: Database) -> Any:
    """The Chroma client of ``database``, for Chroma's own code inside ``vectorstore/`` (a gallery's tiles). Reading
    it creates nothing: a gallery not made yet raises :class:`NotAGalleryError` (a write makes it)."""
    client = database.client or database.connect(create=False)
    if client is None:
        raise not_a_gallery(database.location)
    return client
