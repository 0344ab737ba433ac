"""Reading a gallery's stored records: ids, items, vectors, captions (paged, in one stable order)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

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


class GalleryReads:
    """Read methods of :class:`~pictrieve.vectorstore.gallery.Gallery` (mixed in).

    Expects ``_get_collection(create=False)``, ``_max_batch()`` and ``location`` on the class.
    """

    location: str

    def _get_collection(self, *, create: bool) -> Any:  # pragma: no cover - supplied by Gallery
        raise NotImplementedError

    def _max_batch(self) -> int:  # pragma: no cover - supplied by Gallery
        raise NotImplementedError

    def count(self) -> int:
        collection = self._get_collection(create=False)
        return 0 if collection is None else collection.count()

    def ids(self) -> list[str]:
        """All ids, in the stable order that :meth:`embeddings` with ``ids=None`` uses."""
        return [id_ for id_, _ in self._scan(include=[])]

    def get(self, ids: Sequence[str]) -> list[GalleryItem]:
        """Items for ``ids``, in the same order; unknown ids raise ``KeyError``."""
        found = self._get_by_ids(ids, include=["metadatas"])
        return [_item(id_, found[id_]["metadata"]) for id_ in ids]

    def items(self) -> Iterator[GalleryItem]:
        """Every stored item, in :meth:`ids` order."""
        for id_, record in self._scan(include=["metadatas"]):
            yield _item(id_, record["metadata"])

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray:
        """Stored vectors as ``(n, dim)`` float32: for ``ids`` in order, or all in :meth:`ids` order."""
        if ids is None:
            rows = [record["embedding"] for _, record in self._scan(include=["embeddings"])]
        else:
            found = self._get_by_ids(ids, include=["embeddings"])
            rows = [found[id_]["embedding"] for id_ in ids]
        if not rows:
            return np.zeros((0, int(self._stored_dim() or 0)), dtype=np.float32)
        return np.asarray(rows, dtype=np.float32)

    def captions(self, id_: str) -> list[str]:
        return self.get([id_])[0].captions

    def _stored_dim(self) -> int | None:
        collection = self._get_collection(create=False)
        return None if collection is None else (collection.metadata or {}).get("dim")

    def _scan(self, include: list[str], page: int = SCAN_PAGE) -> Iterator[tuple[str, dict[str, Any]]]:
        collection = self._get_collection(create=False)
        if collection is None:
            return
        offset = 0
        while True:
            batch = collection.get(limit=page, offset=offset, include=include)
            if not batch["ids"]:
                return
            yield from _records(batch, include)
            offset += len(batch["ids"])

    def _get_by_ids(self, ids: Sequence[str], include: list[str]) -> dict[str, dict[str, Any]]:
        collection = self._get_collection(create=False)
        found: dict[str, dict[str, Any]] = {}
        if collection is not None:
            step = self._max_batch()
            for start in range(0, len(ids), step):
                batch = collection.get(ids=list(ids[start : start + step]), include=include)
                found.update(_records(batch, include))
        missing = [id_ for id_ in ids if id_ not in found]
        if missing:
            raise KeyError(f"not in gallery {self.location}: {missing[:5]}")
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
