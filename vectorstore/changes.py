"""What changed in an embedded gallery's collection since a point, read from Chroma's own SQLite file.

Indexes derived from a gallery (the keyword index of hybrid search, the filter columns of
:mod:`~pictrieve.vectorstore.filter_index`) must follow every write of every process, yet re-reading
100,000 records after each small write took minutes. Chroma stamps each record row with the sequence number
of the write that last touched it (``embeddings.seq_id``, renewed by ``add``, ``upsert`` and ``update``) and
keeps the collection's newest one (``max_seq_id``, moved by deletes too), so "which records changed since
sequence S" is one read of its SQLite file, whoever wrote: this process, another one, a raw collection handle,
an older pictrieve. Deleted records are found by comparing counts, then ids.

This reads tables Chroma keeps for itself (checked on chromadb 1.x), read-only. Galleries use SQLite's rollback
journal, where a reader's open transaction keeps every other process from committing, so long reads go in
chunks of :data:`CHUNK_ROWS` rows by row number, each its own short read; a last short transaction then picks up
what was written meanwhile (everything after the sequence seen at the start), so the answer is exact as of that
last look. A writer's commit in progress makes a read wait at most :data:`BUSY_SECONDS`, then try again (with a
log line) up to :data:`BUSY_TRIES` times. Any failure (another layout, a ``chroma run`` server, no file) answers
``None``, and callers fall back to reading every record through Chroma's API, which is always right, only slower.

Indexes derived from a gallery are kept in the user's cache (:func:`index_folder`), never in the gallery's folder:
reading a gallery never writes into it.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from pictrieve.tools.core.pypi_assets import cache_root
from pictrieve.vectorstore.chroma_store import DATABASE_FILE, is_server

logger = logging.getLogger(__name__)

BUSY_SECONDS = 1.0
"""How long one read waits for another process's SQLite commit before it says so and tries again."""

BUSY_TRIES = 10
"""How many times a read that found the database locked is tried before giving up (the caller then reads
through Chroma's API)."""

CHUNK_ROWS = 5000
"""Rows read per short read: a reader holds SQLite's shared lock only this long, so writers in other processes
commit between chunks (a single read of 100k records held it for 15-21 s)."""

PROGRESS_AT = 20000
"""Records from which a full read says so at INFO and shows a progress bar."""

between_chunks: Callable[[], None] | None = None
"""Called between two chunked reads, holding no lock (tests use it to let another process write meanwhile)."""


def _pause() -> None:
    if between_chunks is not None:
        between_chunks()


def embedded_location(store: Any) -> str | None:
    """The folder of ``store`` when it is an embedded Chroma gallery (the only kind with a change feed); ``None``
    for a ``chroma run`` server, an in-memory store or anything else: the store's own
    :meth:`~pictrieve.vectorstore.store.ImageStore.change_feed`."""
    return store.change_feed()


def index_folder(location: str, collection_id: str, kind: str) -> Path:
    """Where the ``kind`` index of the collection ``collection_id`` of the gallery at ``location`` is kept: in the
    user's cache (``$PICTRIEVE_CACHE/gallery-indexes``), keyed by the database file's resolved path and the
    collection's id, never inside the gallery's folder."""
    database = (Path(location).expanduser() / DATABASE_FILE).resolve()
    key = hashlib.sha256(f"{database}\0{collection_id}".encode()).hexdigest()[:24]
    return cache_root() / "gallery-indexes" / key / kind


_unwritable: set[str] = set()


def cannot_save(what: str, location: str, error: OSError) -> None:
    """Say once per process and gallery that an index could not be saved in the cache (it is kept in memory)."""
    if (what, location) not in _unwritable:
        _unwritable.add((what, location))
        logger.info("%s of %s kept in memory only: the cache cannot be written (%s)", what, location, error)


def _busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def _retried(location: str, read: Callable[[], Any]) -> Any:
    """``read()``, tried again while another process's commit holds the database (each wait: :data:`BUSY_SECONDS`)."""
    for attempt in range(1, BUSY_TRIES + 1):
        try:
            return read()
        except sqlite3.Error as exc:
            if not _busy(exc) or attempt == BUSY_TRIES:
                raise
            logger.info("gallery %s is being written by another process; reading again (%d/%d)",
                        location, attempt, BUSY_TRIES - 1)
    raise AssertionError("unreachable")


def _all(connection: sqlite3.Connection, location: str, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
    """Every row of one statement, read as its own short transaction (autocommit), retried while locked."""
    return _retried(location, lambda: connection.execute(sql, tuple(params)).fetchall())


@dataclass(frozen=True)
class Snapshot:
    """One consistent look at a collection's records.

    ``collection_id``: Chroma's id of the collection (a collection deleted and made again has a new one);
    ``seq``: the newest write sequence number it has seen; ``count``: how many records it holds;
    ``changed``: ``(record id, row)`` of the records written after the asked sequence (every record when none was
    asked), where ``row`` is Chroma's row number, the order its ``get`` lists records in (kept by updates)."""

    collection_id: str
    seq: int
    count: int
    changed: list[tuple[str, int]]
    deleted: list[str] | None = None
    """Ids deleted after the asked sequence, when Chroma's write log still holds every write since (it purges
    old entries); ``None``: not known (compare the ids)."""


def _connect(location: str) -> sqlite3.Connection | None:
    """A read-only connection to the embedded gallery's database, or ``None`` (a server, no database yet, or one
    that cannot be opened: callers then fall back to Chroma's API)."""
    if is_server(location):
        return None
    try:
        path = Path(location).expanduser() / DATABASE_FILE
        if not path.is_file():
            return None
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_SECONDS,
                               isolation_level=None, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        logger.debug("gallery %s: database not readable directly (%s)", location, exc)
        return None


_SEGMENT = """SELECT s.id, c.id FROM segments s JOIN collections c ON s.collection = c.id
              JOIN databases d ON c.database_id = d.id
              WHERE c.name = ? AND s.scope = 'METADATA' AND d.name = 'default_database'"""


DELETE_OPERATION = 3
"""``embeddings_queue.operation`` of a delete (Chroma's ``Operation.DELETE``)."""


def _head(connection: sqlite3.Connection, collection_name: str) -> tuple[str, str, int] | None:
    """The collection's metadata segment, its id and its newest write sequence number (``None``: no collection)."""
    found = connection.execute(_SEGMENT, (collection_name,)).fetchall()
    if len(found) != 1:
        return None
    segment, collection_id = found[0]
    row = connection.execute("SELECT seq_id FROM max_seq_id WHERE segment_id = ?", (segment,)).fetchone()
    return str(segment), str(collection_id), int(row[0]) if row and row[0] is not None else 0


def position(location: str, collection_name: str) -> tuple[str, int] | None:
    """``(collection id, newest write sequence number)`` of the collection now: one tiny read, whoever wrote.
    An index whose cursor equals it is fresh. ``None`` when this cannot be read (see :func:`snapshot`)."""
    connection = _connect(location)
    if connection is None:
        return None
    try:
        head = _retried(location, lambda: _head(connection, collection_name))
        return None if head is None else (head[1], head[2])
    except (sqlite3.Error, TypeError, ValueError) as exc:
        logger.debug("gallery %s: no change feed (%s)", location, exc)
        return None
    finally:
        connection.close()


def _in_transaction(connection: sqlite3.Connection, location: str, read: Callable[[], Any]) -> Any:
    """``read()`` inside one short read transaction (a consistent look), retried while locked."""
    def once() -> Any:
        connection.execute("BEGIN")
        try:
            return read()
        finally:
            connection.execute("COMMIT")
    return _retried(location, once)


def _deleted(connection: sqlite3.Connection, collection_id: str, after: int) -> list[str] | None:
    """The ids deleted from the collection after sequence ``after``, read from Chroma's write log
    (``embeddings_queue``), or ``None`` when the log no longer holds every write since (it is purged from the
    oldest end)."""
    oldest = connection.execute("SELECT min(seq_id) FROM embeddings_queue").fetchone()[0]
    if oldest is None or int(oldest) > after + 1:
        return None
    rows = connection.execute(
        "SELECT id FROM embeddings_queue WHERE seq_id > ? AND operation = ? AND topic LIKE ?",
        (after, DELETE_OPERATION, f"%/{collection_id}")).fetchall()
    return [str(id_) for (id_,) in rows]


def snapshot(location: str, collection_name: str, since: tuple[str, int] | None = None) -> Snapshot | None:
    """The records of ``collection_name`` in the embedded gallery at ``location`` written after ``since``
    (``(collection id, seq)`` of an earlier :class:`Snapshot`; every record when ``None`` or when the collection
    is not that one any more), exact as of the returned ``seq``. ``None`` when this cannot be read (a server, no
    database or collection yet, a Chroma whose tables differ, a collection made again while reading).

    Read in chunks by row number, each a short read of its own, then one short transaction for what was written
    meanwhile: no other process waits on this read for longer than one chunk."""
    connection = _connect(location)
    if connection is None:
        return None
    try:
        head = _retried(location, lambda: _head(connection, collection_name))
        if head is None:
            return None
        segment, collection_id, start = head
        after = since[1] if since is not None and since[0] == collection_id else None
        rows: dict[str, int] = {}
        last = -1
        while True:
            chunk = _all(connection, location,
                         "SELECT embedding_id, id FROM embeddings WHERE segment_id = ? AND seq_id > ? AND id > ? "
                         "ORDER BY id LIMIT ?", (segment, -1 if after is None else after, last, CHUNK_ROWS))
            rows.update((str(id_), int(rowid)) for id_, rowid in chunk)
            if len(chunk) < CHUNK_ROWS:
                break
            last = int(chunk[-1][1])
            _pause()

        def meanwhile() -> tuple[tuple[str, str, int] | None, int, list[tuple], list[str] | None, list[str] | None]:
            now = _head(connection, collection_name)
            count = connection.execute("SELECT count(*) FROM embeddings WHERE segment_id = ?", (segment,)).fetchone()[0]
            moved = now is not None and now[2] != start  # (nothing written meanwhile: no second scan)
            written = connection.execute(
                "SELECT embedding_id, id FROM embeddings WHERE segment_id = ? AND seq_id > ? ORDER BY id",
                (segment, start)).fetchall() if moved else []
            gone = _deleted(connection, collection_id, start) if moved else []
            return now, int(count), written, gone, None if after is None else _deleted(connection, collection_id, after)

        now, count, written, gone, deleted = _in_transaction(connection, location, meanwhile)
        if now is None or now[1] != collection_id:
            return None
        for id_ in gone or ():  # read in a chunk, deleted since: gone unless written again (in ``written``)
            rows.pop(id_, None)
        rows.update((str(id_), int(rowid)) for id_, rowid in written)
        changed = sorted(rows.items(), key=lambda item: item[1])
        return Snapshot(collection_id, now[2], count, changed, deleted)
    except (sqlite3.Error, TypeError, ValueError) as exc:
        logger.debug("gallery %s: no change feed (%s)", location, exc)
        return None
    finally:
        connection.close()


def read_fields(location: str, collection_name: str, keys: Sequence[str],
                rows: Sequence[int] | None = None, list_keys: Sequence[str] = (),
                what: str = "records") -> dict[str, tuple[int, dict[str, Any]]] | None:
    """The scalar metadata ``keys`` of the records of ``collection_name`` (those at Chroma rows ``rows``, or all),
    as ``{id: (row, {key: value})}``, read from the same table Chroma answers a ``where`` from (strings, ints and
    floats; a key a record lacks is left out), and the list values of ``list_keys`` (their items in no set order).
    ``None`` when this cannot be read (see :func:`snapshot`).

    Read in chunks of rows, each a short read of its own (see :data:`CHUNK_ROWS`): a record written while this
    reads carries a newer sequence number than the snapshot that asked for it, so the next update reads it again.
    Reading every record of a large collection says so at INFO (``what``: what is being built) with a progress bar."""
    connection = _connect(location)
    if connection is None:
        return None
    found: dict[str, tuple[int, dict[str, Any]]] = {}
    marks = ",".join("?" * len(keys))
    query = (f"SELECT e.id, e.embedding_id, m.key, m.string_value, m.int_value, m.float_value FROM embeddings e "
             f"LEFT JOIN embedding_metadata m ON m.id = e.id AND m.key IN ({marks}) WHERE e.segment_id = ?")
    listed = (f"SELECT e.embedding_id, a.key, a.string_value, a.int_value, a.float_value "
              f"FROM embedding_metadata_array a JOIN embeddings e ON e.id = a.id "
              f"WHERE e.segment_id = ? AND a.key IN ({','.join('?' * len(list_keys))})")
    try:
        segments = _all(connection, location, _SEGMENT, (collection_name,))
        if len(segments) != 1:
            return None
        segment = segments[0][0]
        for n, (where, bounds) in enumerate(_chunks(connection, location, segment, rows, what)):
            if n:
                _pause()
            for row, id_, key, text, integer, real in _all(connection, location, f"{query} AND {where.format('e.id')}",
                                                           (*keys, segment, *bounds)):
                fields = found.setdefault(str(id_), (int(row), {}))[1]
                value = text if text is not None else integer if integer is not None else real
                if key is not None and value is not None:
                    fields[str(key)] = value
            if list_keys:
                for id_, key, text, integer, real in _all(connection, location, f"{listed} AND {where.format('a.id')}",
                                                          (segment, *list_keys, *bounds)):
                    value = text if text is not None else integer if integer is not None else real
                    if str(id_) in found and value is not None:
                        found[str(id_)][1].setdefault(str(key), []).append(value)
        return found
    except (sqlite3.Error, TypeError, ValueError) as exc:
        logger.debug("gallery %s: no metadata table (%s)", location, exc)
        return None
    finally:
        connection.close()


def _chunks(connection: sqlite3.Connection, location: str, segment: str, rows: Sequence[int] | None,
            what: str) -> Iterator[tuple[str, tuple[int, ...]]]:
    """``(condition on the row column "{}", its parameters)`` for each chunk of the rows to read: ``rows`` in lists
    of 500, or every row of the segment in ranges of :data:`CHUNK_ROWS` row numbers (with a progress bar when many)."""
    if rows is not None:
        for i in range(0, len(rows), 500):
            batch = tuple(int(r) for r in rows[i : i + 500])
            yield f"{{0}} IN ({','.join('?' * len(batch))})", batch
        return
    low, high, count = _all(connection, location,
                            "SELECT min(id), max(id), count(*) FROM embeddings WHERE segment_id = ?", (segment,))[0]
    if low is None:
        return
    long = int(count) >= PROGRESS_AT
    if long:
        logger.info("reading the %s of %d photos of gallery %s (once; then kept up to date in the cache)",
                    what, count, location)
    starts = range(int(low), int(high) + 1, CHUNK_ROWS)
    for start in tqdm(starts, desc=f"reading {what}", unit="chunk", disable=not long, leave=False):
        yield "{0} >= ? AND {0} < ?", (start, start + CHUNK_ROWS)


def _value(text: Any, integer: Any, real: Any, flag: Any) -> Any:
    """One stored metadata value, as Chroma's ``get`` gives it."""
    return text if text is not None else integer if integer is not None else real if real is not None else (
        None if flag is None else bool(flag))


DOCUMENT_KEY = "chroma:document"
"""Where Chroma keeps a record's document among its metadata rows (``get`` does not list it as metadata)."""


def read_metadata(location: str, collection_name: str, ids: Sequence[str]) -> dict[str, dict[str, Any] | None] | None:
    """The whole stored metadata of ``ids`` (those the collection holds; ``None`` for a record without any), as
    Chroma's ``get(ids=..., include=["metadatas"])`` gives it, read from its SQLite tables in one short read: Chroma
    loads a collection's vector index on its first ``get`` (about 0.6 s at 100k records), which a search scored from
    the filter columns does not need. ``None`` when this cannot be read (then ask Chroma)."""
    connection = _connect(location)
    if connection is None:
        return None
    try:
        def read() -> dict[str, dict[str, Any] | None] | None:
            segments = connection.execute(_SEGMENT, (collection_name,)).fetchall()
            if len(segments) != 1:
                return None
            found: dict[str, dict[str, Any] | None] = {}
            for start in range(0, len(ids), 500):
                batch = [str(id_) for id_ in ids[start : start + 500]]
                marks = ",".join("?" * len(batch))
                for id_, key, *value in connection.execute(
                        f"SELECT e.embedding_id, m.key, m.string_value, m.int_value, m.float_value, m.bool_value "
                        f"FROM embeddings e LEFT JOIN embedding_metadata m ON m.id = e.id "
                        f"WHERE e.segment_id = ? AND e.embedding_id IN ({marks})", (segments[0][0], *batch)):
                    fields = found.setdefault(str(id_), {})
                    if key is not None and key != DOCUMENT_KEY:
                        fields[str(key)] = _value(*value)
                for id_, key, *value in connection.execute(
                        f"SELECT e.embedding_id, a.key, a.string_value, a.int_value, a.float_value, a.bool_value "
                        f"FROM embedding_metadata_array a JOIN embeddings e ON e.id = a.id "
                        f"WHERE e.segment_id = ? AND e.embedding_id IN ({marks}) ORDER BY a.rowid",
                        (segments[0][0], *batch)):
                    found[str(id_)].setdefault(str(key), []).append(_value(*value))
            return {id_: fields or None for id_, fields in found.items()}

        return _in_transaction(connection, location, read)
    except (sqlite3.Error, TypeError, ValueError) as exc:
        logger.debug("gallery %s: metadata not readable directly (%s)", location, exc)
        return None
    finally:
        connection.close()


def record_count(location: str, collection_name: str) -> int | None:
    """How many records the collection holds, from its SQLite table (Chroma's ``count`` loads the vector index
    first); ``None`` when this cannot be read."""
    connection = _connect(location)
    if connection is None:
        return None
    try:
        segments = _all(connection, location, _SEGMENT, (collection_name,))
        if len(segments) != 1:
            return None
        return int(_all(connection, location, "SELECT count(*) FROM embeddings WHERE segment_id = ?",
                        (segments[0][0],))[0][0])
    except (sqlite3.Error, TypeError, ValueError) as exc:
        logger.debug("gallery %s: no count read directly (%s)", location, exc)
        return None
    finally:
        connection.close()
