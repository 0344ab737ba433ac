"""Reading a gallery's stored records: ids, items, vectors, captions (paged, in one stable order).

:class:`~pictrieve.vectorstore.gallery.Gallery` answers its reads through a :class:`CollectionReader`
of its embedder's collection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from pictrieve.vectorstore.errors import ImageNotFoundError

SCAN_PAGE = 1000
"""Records fetched per Chroma ``get`` while scanning a whole collection."""


@dataclass
class GalleryItem:
    """One stored image."""

    id: str
    path: str
    metadata: dict[str, Any]

    @property
    def captions(self) -> list[str]:
        return list(self.metadata.get("captions") or [])


class CollectionReader:
    """Paged reads of one embedder's Chroma collection; ``collection`` ``None`` is an embedder without
    images (every read answers empty). Reading never creates or changes anything."""

    def __init__(self, collection: Any | None, location: str, max_batch: Callable[[], int]) -> None:
        self.collection = collection
        self.location = location
        self.max_batch = max_batch

    def count(self) -> int:
        return 0 if self.collection is None else self.collection.count()

    def ids(self) -> list[str]:
        return [id_ for id_, _ in self.scan(include=[])]

    def get(self, ids: Sequence[str]) -> list[GalleryItem]:
        found = self.get_by_ids(ids, include=["metadatas"])
        return [_item(id_, found[id_]["metadata"]) for id_ in ids]

    def items(self) -> Iterator[GalleryItem]:
        for id_, record in self.scan(include=["metadatas"]):
            yield _item(id_, record["metadata"])

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray:
        if ids is None:
            rows = [record["embedding"] for _, record in self.scan(include=["embeddings"])]
        else:
            found = self.get_by_ids(ids, include=["embeddings"])
            rows = [found[id_]["embedding"] for id_ in ids]
        if not rows:
            return np.zeros((0, int(self.dim or 0)), dtype=np.float32)
        return np.asarray(rows, dtype=np.float32)

    def metadata_of(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Stored metadata of those ``ids`` that are stored, by id (unknown ids are left out)."""
        if self.collection is None or self.collection.count() == 0:
            return {}
        found: dict[str, dict[str, Any]] = {}
        step = self.max_batch()
        for start in range(0, len(ids), step):
            batch = self.collection.get(ids=list(ids[start : start + step]), include=["metadatas"])
            found.update({id_: meta for id_, meta in zip(batch["ids"], batch["metadatas"])})
        return found

    @property
    def dim(self) -> int | None:
        """The stored vectors' dimension (``None``: no collection, or an older one that did not record it)."""
        return None if self.collection is None else (self.collection.metadata or {}).get("dim")

    def scan(self, include: list[str], page: int = SCAN_PAGE) -> Iterator[tuple[str, dict[str, Any]]]:
        if self.collection is None:
            return
        offset = 0
        while True:
            batch = self.collection.get(limit=page, offset=offset, include=include)
            if not batch["ids"]:
                return
            yield from _records(batch, include)
            offset += len(batch["ids"])

    def get_by_ids(self, ids: Sequence[str], include: list[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        if self.collection is not None:
            step = self.max_batch()
            for start in range(0, len(ids), step):
                batch = self.collection.get(ids=list(ids[start : start + step]), include=include)
                found.update(_records(batch, include))
        missing = [id_ for id_ in ids if id_ not in found]
        if missing:
            raise ImageNotFoundError(f"not in gallery {self.location}: {missing[:5]}", location=str(self.location))
        return found


def _records(batch: dict[str, Any], include: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    metadatas = batch.get("metadatas") if "metadatas" in include else None
    embeddings = batch.get("embeddings") if "embeddings" in include else None
    for i, id_ in enumerate(batch["ids"]):
        record: dict[str, Any] = {}
        if metadatas is not None:
            record["metadata"] = dict(metadatas[i] or {})
        if embeddings is not None:
            record["embedding"] = embeddings[i]
        yield id_, record


def _item(id_: str, metadata: dict[str, Any]) -> GalleryItem:
    return GalleryItem(id=id_, path=str(metadata.get("path", "")), metadata=metadata)
