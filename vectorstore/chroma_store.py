"""The Chroma side of a gallery: connecting, naming collections, the write lock.

A gallery is one Chroma database (an embedded ``PersistentClient`` folder, or a ``chroma run`` server
at ``http://host:port``). Each embedder has its own collection (``images__<slug>__<hash>``), and
one more collection, ``pictrieve__records``, keeps small JSON records (the default embedder,
trust weights) keyed by name (:mod:`~pictrieve.vectorstore.records`; its functions are re-exported here).
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
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

from pictrieve.vectorstore.errors import GalleryBusyError, GalleryError, GalleryPermissionError  # noqa: F401
from pictrieve.vectorstore.records import GALLERY_RECORD, RECORDS_COLLECTION, read_record, write_record  # noqa: F401

logger = logging.getLogger(__name__)

COLLECTION_PREFIX = "images__"
LOCK_FILE = ".pictrieve-write.lock"


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


def path_id(path: str | os.PathLike) -> str:
    """The record id of an image file: a hash of its absolute path (stable across runs and embedders)."""
    return hashlib.sha1(str(Path(path).resolve()).encode("utf-8")).hexdigest()[:24]


def collection_name_for(embedder_name: str) -> str:
    """A valid Chroma collection name for an embedder name (readable prefix + hash)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", embedder_name.split("/")[0])[:40].strip("-_") or "embedder"
    digest = hashlib.sha1(embedder_name.encode("utf-8")).hexdigest()[:10]
    return f"{COLLECTION_PREFIX}{slug}__{digest}"


def connect(location: str, *, create: bool) -> Any | None:
    """A Chroma client for ``location``; ``None`` for a folder that does not exist and ``create=False``."""
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
    if not path.exists():
        if not create:
            return None
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise _permission_error(path, exc) from exc
    if not os.access(path, os.R_OK | os.X_OK) or (create and not os.access(path, os.W_OK)):
        raise _permission_error(path, PermissionError(errno.EACCES, "Permission denied"))
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
