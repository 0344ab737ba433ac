"""A gallery's small JSON records: gallery-wide settings (the default embedder) and named records
that other parts keep beside the images (NEEDLE's trust weights, settings).

They live in one more collection of the gallery's Chroma database, ``pictrieve__records``, one
record per key, the JSON text as the document. :class:`RecordStore` reads and writes them; reading
never creates anything. A write is one upsert (one SQLite transaction), so a reader sees the old or
the new value, never a mix; writers to an embedded gallery hold its write lock
(:meth:`Gallery.writing <pictrieve.vectorstore.gallery.Gallery.writing>` does).
"""

from __future__ import annotations

import json
from typing import Any

RECORDS_COLLECTION = "pictrieve__records"
GALLERY_RECORD = "gallery"
"""The record holding gallery-wide settings such as ``default_embedder``."""
USER_PREFIX = "user:"
"""Records stored by :meth:`Gallery.put_json` are kept under this prefix, apart from the gallery's own."""


def read_record(client: Any, key: str) -> dict[str, Any] | None:
    """The JSON record stored under ``key``, or ``None`` (never creates anything)."""
    if RECORDS_COLLECTION not in {c.name for c in client.list_collections()}:
        return None
    found = client.get_collection(RECORDS_COLLECTION, embedding_function=None).get(ids=[key], include=["documents"])
    if not found["ids"]:
        return None
    return json.loads(found["documents"][0])


def write_record(client: Any, key: str, value: dict[str, Any]) -> None:
    """Store the dict ``value`` under ``key`` in one upsert. Callers writing to an embedded gallery
    hold its write lock."""
    if not isinstance(value, dict):
        raise TypeError(f"JSON records are dicts, got {type(value).__name__}")
    document = json.dumps(value, sort_keys=True)
    collection = client.get_or_create_collection(RECORDS_COLLECTION, embedding_function=None,
                                                 metadata={"pictrieve": "records"})
    # Chroma stores a vector with every record; these records are looked up by key only.
    collection.upsert(ids=[key], documents=[document], embeddings=[[0.0]])


class RecordStore:
    """The JSON records of one gallery database; ``client`` ``None`` is a database not made yet
    (every read answers ``None``; writing needs a client)."""

    def __init__(self, client: Any | None) -> None:
        self.client = client

    def get(self, key: str) -> dict[str, Any] | None:
        """The record under ``key`` (``None`` if absent)."""
        return None if self.client is None else read_record(self.client, key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Replace the record under ``key``."""
        if self.client is None:
            raise ValueError("no gallery database to write the record into; create the gallery first")
        write_record(self.client, key, value)

    def merge(self, key: str, changes: dict[str, Any], *, keep_existing: bool = False) -> dict[str, Any]:
        """Update the record under ``key`` with ``changes`` and return it; with ``keep_existing`` a key
        already holding a truthy value keeps it (nothing is written when nothing changes)."""
        record = self.get(key) or {}
        wanted = {k: v for k, v in changes.items() if not (keep_existing and record.get(k))}
        if wanted:
            record = {**record, **wanted}
            self.put(key, record)
        return record

    @property
    def default_embedder(self) -> str | None:
        """The embedder recorded as the gallery's default (``None`` if none was recorded)."""
        return (self.get(GALLERY_RECORD) or {}).get("default_embedder")

    def get_user(self, key: str) -> dict[str, Any] | None:
        return self.get(USER_PREFIX + key)

    def put_user(self, key: str, value: dict[str, Any]) -> None:
        self.put(USER_PREFIX + key, value)
