"""What changed in an embedded gallery's collection since a point, read from Chroma's own SQLite file.

Indexes kept beside a gallery (the keyword index of hybrid search, the filter columns of
:mod:`~pictrieve.vectorstore.filter_index`) must follow every write of every process, yet re-reading
100,000 records after each small write took minutes. Chroma stamps each record row with the sequence number
of the write that last touched it (``embeddings.seq_id``, renewed by ``add``, ``upsert`` and ``update``) and
keeps the collection's newest one (``max_seq_id``, moved by deletes too), so "which records changed since
sequence S" is one read of its SQLite file, whoever wrote: this process, another one, a raw collection handle,
an older pictrieve. Deleted records are found by comparing counts, then ids.

This reads tables Chroma keeps for itself (checked on chromadb 1.x). Every query is read-only, in one
transaction (a consistent snapshot); any failure (another layout, a ``chroma run`` server, no file) answers
``None``, and callers fall back to reading every record through Chroma's API, which is always right, only slower.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pictrieve.vectorstore.chroma_store import DATABASE_FILE, is_server

logger = logging.getLogger(__name__)

BUSY_SECONDS = 10.0
"""How long a read waits for a writer's SQLite transaction to commit."""


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
    if is_server(location):
        return None
    path = Path(location).expanduser() / DATABASE_FILE
    if not path.is_file():
        return None
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_SECONDS,
                           isolation_level=None, check_same_thread=False)


_SEGMENT = """SELECT s.id, c.id FROM segments s JOIN collections c ON s.collection = c.id
              JOIN databases d ON c.database_id = d.id
              WHERE c.name = ? AND s.scope = 'METADATA' AND d.name = 'default_database'"""


DELETE_OPERATION = 3
"""``embeddings_queue.operation`` of a delete (Chroma's ``Operation.DELETE``)."""


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
    is not that one any more). ``None`` when this cannot be read (a server, no database or collection yet,
    a Chroma whose tables differ)."""
    try:
        connection = _connect(location)
    except (OSError, sqlite3.Error) as exc:
        logger.debug("gallery %s: no change feed (%s)", location, exc)
        return None
    if connection is None:
        return None
    try:
        connection.execute("BEGIN")
        found = connection.execute(_SEGMENT, (collection_name,)).fetchall()
        if len(found) != 1:
            return None
        segment, collection_id = found[0]
        row = connection.execute("SELECT seq_id FROM max_seq_id WHERE segment_id = ?", (segment,)).fetchone()
        seq = int(row[0]) if row and row[0] is not None else 0
        count = connection.execute("SELECT count(*) FROM embeddings WHERE segment_id = ?", (segment,)).fetchone()[0]
        after = since[1] if since is not None and since[0] == collection_id else None
        if after is None:
            changed = connection.execute(
                "SELECT embedding_id, id FROM embeddings WHERE segment_id = ? ORDER BY id", (segment,)).fetchall()
        else:
            changed = connection.execute(
                "SELECT embedding_id, id FROM embeddings WHERE segment_id = ? AND seq_id > ? ORDER BY id",
                (segment, after)).fetchall()
        deleted = None if after is None else _deleted(connection, str(collection_id), after)
        connection.execute("COMMIT")
        return Snapshot(str(collection_id), seq, int(count), [(str(id_), int(rowid)) for id_, rowid in changed],
                        deleted)
    except (sqlite3.Error, TypeError, ValueError) as exc:
        logger.debug("gallery %s: no change feed (%s)", location, exc)
        return None
    finally:
        connection.close()


def read_fields(location: str, collection_name: str, keys: Sequence[str],
                rows: Sequence[int] | None = None, list_keys: Sequence[str] = ()) -> dict[str, tuple[int, dict[str, Any]]] | None:
    """The scalar metadata ``keys`` of the records of ``collection_name`` (those at Chroma rows ``rows``, or all),
    as ``{id: (row, {key: value})}``, read from the same table Chroma answers a ``where`` from (strings, ints and
    floats; a key a record lacks is left out), and the list values of ``list_keys`` (their items in no set order).
    ``None`` when this cannot be read (see :func:`snapshot`)."""
    try:
        connection = _connect(location)
    except (OSError, sqlite3.Error) as exc:
        logger.debug("gallery %s: no metadata table (%s)", location, exc)
        return None
    if connection is None:
        return None
    found: dict[str, tuple[int, dict[str, Any]]] = {}
    marks = ",".join("?" * len(keys))
    query = (f"SELECT e.id, e.embedding_id, m.key, m.string_value, m.int_value, m.float_value FROM embeddings e "
             f"LEFT JOIN embedding_metadata m ON m.id = e.id AND m.key IN ({marks}) WHERE e.segment_id = ?")
    try:
        connection.execute("BEGIN")
        segments = connection.execute(_SEGMENT, (collection_name,)).fetchall()
        if len(segments) != 1:
            return None
        segment = segments[0][0]
        batches = [None] if rows is None else [list(rows[i : i + 500]) for i in range(0, len(rows), 500)]
        for batch in batches:
            sql = query if batch is None else f"{query} AND e.id IN ({','.join('?' * len(batch))})"
            for row, id_, key, text, integer, real in connection.execute(sql, (*keys, segment, *(batch or ()))):
                fields = found.setdefault(str(id_), (int(row), {}))[1]
                value = text if text is not None else integer if integer is not None else real
                if key is not None and value is not None:
                    fields[str(key)] = value
            if list_keys:
                listed = (f"SELECT e.embedding_id, a.key, a.string_value, a.int_value, a.float_value "
                          f"FROM embedding_metadata_array a JOIN embeddings e ON e.id = a.id "
                          f"WHERE e.segment_id = ? AND a.key IN ({','.join('?' * len(list_keys))})")
                if batch is not None:
                    listed += f" AND a.id IN ({','.join('?' * len(batch))})"
                for id_, key, text, integer, real in connection.execute(listed, (segment, *list_keys, *(batch or ()))):
                    value = text if text is not None else integer if integer is not None else real
                    if str(id_) in found and value is not None:
                        found[str(id_)][1].setdefault(str(key), []).append(value)
        connection.execute("COMMIT")
        return found
    except (sqlite3.Error, TypeError, ValueError) as exc:
        logger.debug("gallery %s: no metadata table (%s)", location, exc)
        return None
    finally:
        connection.close()
