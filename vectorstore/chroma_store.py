"""The Chroma side of a gallery: connecting, naming collections, listing them, and small JSON records.

A gallery is one Chroma database (an embedded ``PersistentClient`` folder, or a ``chroma run`` server
at ``http://host:port``). It holds one collection of image vectors per embedder, named from the
embedder's name (:func:`collection_name_for`), and one small collection of JSON records
(:data:`RECORDS_COLLECTION`) for what the gallery must remember besides vectors: its default
embedder, NEEDLE's trust weights, fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pictrieve.errors import PictrieveError

COLLECTION_PREFIX = "images__"
RECORDS_COLLECTION = "pictrieve__records"


class GalleryError(PictrieveError, RuntimeError):
    """Base class for gallery errors; messages say what to do."""


def collection_name_for(embedder_name: str) -> str:
    """A valid Chroma collection name for an embedder name (readable prefix + hash)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", embedder_name.split("/")[0])[:40].strip("-_") or "embedder"
    digest = hashlib.sha1(embedder_name.encode("utf-8")).hexdigest()[:10]
    return f"{COLLECTION_PREFIX}{slug}__{digest}"


def is_server(location: str) -> bool:
    return str(location).startswith(("http://", "https://"))


def connect(location: str, *, create: bool) -> Any:
    """A Chroma client for a gallery folder or server URL (a missing folder is created only if ``create``)."""
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
    if not create and not path.exists():
        raise GalleryError(f"no gallery at {path}: index photos into it first (Gallery.add / `pictrieve index`)")
    if path.exists() and not path.is_dir():
        raise GalleryError(f"{path} is a file, not a gallery folder")
    return chromadb.PersistentClient(path=str(path), settings=settings)


def embedder_collections(client: Any) -> list[dict[str, Any]]:
    """``[{"embedder", "dim", "images", "collection"}]`` for each embedder collection, oldest first."""
    rows = []
    for listed in client.list_collections():
        if listed.name.startswith(COLLECTION_PREFIX):
            collection = client.get_collection(listed.name, embedding_function=None)
            meta = collection.metadata or {}
            rows.append({"embedder": meta.get("embedder"), "dim": meta.get("dim"),
                         "images": collection.count(), "collection": listed.name})
    return rows


def read_record(client: Any, key: str) -> dict[str, Any] | None:
    """The JSON record stored under ``key``, or ``None`` (never creates anything)."""
    if RECORDS_COLLECTION not in {c.name for c in client.list_collections()}:
        return None
    found = client.get_collection(RECORDS_COLLECTION, embedding_function=None).get(ids=[key], include=["documents"])
    if not found["ids"]:
        return None
    return json.loads(found["documents"][0])


def write_record(client: Any, key: str, value: dict[str, Any]) -> None:
    """Store ``value`` (JSON-serialisable) under ``key``; one upsert, so a reader sees old or new, never half."""
    document = json.dumps(value, sort_keys=True)
    collection = client.get_or_create_collection(RECORDS_COLLECTION, embedding_function=None,
                                                 metadata={"pictrieve": "records"})
    # Chroma stores a vector with every record; these records are looked up by key only.
    collection.upsert(ids=[key], documents=[document], embeddings=[[0.0]])
