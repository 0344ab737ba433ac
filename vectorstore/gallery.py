"""Image galleries: image embeddings in Chroma, searchable by text, image or vector.

A gallery is a Chroma database (an embedded ``PersistentClient`` folder, or a ``chroma run`` server
reached at ``http://host:port``) holding one collection per embedder, because embedders differ in
dimension and meaning; the collections share image ids (a hash of the file's absolute path), so
methods that combine embedders (NEEDLE) line them up by id. A :class:`Gallery` object is one view:
the database plus the embedder it searches with; :meth:`Gallery.with_embedder` gives another view of
the same database, and the gallery records a default embedder, so opening it without naming one
always works. Each record's vector is the embedder's L2-normalised image embedding and its metadata
holds the path, size, modification time, content hash and any sidecar captions. Collections use
cosine HNSW, so a hit's ``score`` is the cosine similarity.

Opening reads only: nothing is written until images are added. Modules: :mod:`.chroma_store`
(connecting, collection names, JSON records), :mod:`.indexing` (adding files, for one embedder or
several at once), this module (opening, reading, searching).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from PIL import Image

from pictrieve.tools.embedders.base import Embedder
from pictrieve.tools.embedders.factory import check_embedder_name, create_embedder, default_embedder_name
from pictrieve.tools.images import load_image
from pictrieve.vectorstore.captions import CaptionIndex
from pictrieve.vectorstore.chroma_store import (
    COLLECTION_PREFIX,
    GalleryError,
    collection_name_for,
    connect,
    embedder_collections,
    read_record,
    write_record,
)
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.indexing import FailedImage, IndexReport, Sources, caption_metadata, index_sources

logger = logging.getLogger(__name__)

GALLERY_RECORD = "gallery"  # the JSON record holding the gallery's default embedder

__all__ = [
    "AmbiguousEmbedderError", "COLLECTION_PREFIX", "DimensionMismatchError", "EmptyGalleryError", "FailedImage",
    "Gallery", "GalleryError", "GalleryItem", "ImageHit", "IndexReport", "SearchHit", "collection_name_for",
    "gallery_contents", "path_id",
]
# Chroma's default ef_search (100) gives recall@10 of about 0.91 against exact search at 1M vectors;
# 200 gives about 0.97 at no measurable latency cost (BENCHMARKS.md, search latency).
DEFAULT_HNSW = {"ef_search": 200}


class EmptyGalleryError(GalleryError):
    """The gallery has no images for the embedder in use."""


class DimensionMismatchError(GalleryError):
    """The stored vectors and the embedder have different dimensions."""


class AmbiguousEmbedderError(GalleryError):
    """The gallery holds several embedders' collections and none was chosen."""


@dataclass
class GalleryItem:
    """One stored image."""

    id: str
    path: str
    metadata: dict[str, Any]

    @property
    def captions(self) -> list[str]:
        return list(self.metadata.get("captions") or [])


SearchHit = ImageHit
"""Deprecated alias: search results are :class:`~pictrieve.vectorstore.hits.ImageHit`."""


class Gallery:
    """A searchable image collection for one embedder, stored in Chroma.

    Open with :meth:`Gallery.open`; see the module docstring for the storage layout.
    """

    def __init__(
        self, client: Any, location: str, embedder: Embedder | str, hnsw: dict[str, Any] | None = None
    ) -> None:
        self.client = client
        self.hnsw = dict(hnsw or {})
        self.location = location
        self._embedder = embedder if not isinstance(embedder, str) else None
        self.embedder_name = check_embedder_name(embedder) if isinstance(embedder, str) else embedder.name
        self.collection_name = collection_name_for(self.embedder_name)
        self._collection: Any = None
        if self._embedder is not None:
            self._check_dimension(self._embedder.dim)

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
        """Open (or create) the gallery at a folder path or ``http://host:port`` Chroma server.

        ``embedder`` is an :class:`Embedder` or a factory name; when omitted, the gallery's only
        embedder is reused, or the default embedder is used for a new gallery. The model itself is
        loaded lazily, on the first call that needs it. ``hnsw`` sets Chroma HNSW options for a
        collection this gallery creates (``ef_construction``, ``max_neighbors``, ``ef_search``); to
        change ``ef_search`` of an existing collection call :meth:`set_ef_search` (opening never writes).
        """
        location = str(location)
        client = connect(location, create=create)
        if embedder is None:
            embedder = _default_embedder(client, location) or default_embedder_name()
        gallery = cls(client, location, embedder, hnsw)
        if not create and gallery._get_collection(create=False) is None:
            raise GalleryError(
                f"gallery {location} has no images for embedder {gallery.embedder_name!r}; "
                f"add some with Gallery.open({location!r}, {gallery.embedder_name!r}).add(PHOTOS)"
            )
        return gallery

    def with_embedder(self, embedder: Embedder | str) -> "Gallery":
        """Another view of the same database, searching with ``embedder`` (ids are shared)."""
        return Gallery(self.client, self.location, embedder, self.hnsw)

    @property
    def embedder_names(self) -> list[str]:
        """Every embedder that has a collection in this gallery's database, oldest first."""
        return [row["embedder"] for row in embedder_collections(self.client) if row["embedder"]]

    @property
    def default_embedder(self) -> str | None:
        """The embedder this gallery opens with when none is named (recorded at first indexing)."""
        return (read_record(self.client, GALLERY_RECORD) or {}).get("default_embedder")

    def set_default_embedder(self, name: str) -> None:
        """Record ``name`` as the embedder :meth:`open` uses when none is named."""
        record = read_record(self.client, GALLERY_RECORD) or {}
        write_record(self.client, GALLERY_RECORD, {**record, "default_embedder": name})

    def get_json(self, key: str) -> dict[str, Any] | None:
        """A small JSON record stored in this gallery's database (``None`` if absent)."""
        return read_record(self.client, f"user:{key}")

    def put_json(self, key: str, value: dict[str, Any]) -> None:
        """Store a small JSON record (trust weights, settings) in this gallery's database, atomically."""
        write_record(self.client, f"user:{key}", value)

    def set_ef_search(self, ef_search: int) -> None:
        """Change the query-time HNSW breadth of this embedder's collection (a write)."""
        collection = self._get_collection(create=False)
        if collection is None:
            raise self._empty_error()
        collection.modify(configuration={"hnsw": {"ef_search": int(ef_search)}})

    @property
    def embedder(self) -> Embedder:
        """The embedder, created from its name on first use."""
        if self._embedder is None:
            embedder = create_embedder(self.embedder_name)
            self._check_dimension(embedder.dim)
            self._embedder = embedder
        return self._embedder

    @property
    def collection(self) -> Any:
        if self._collection is None:
            self._collection = self._get_collection(create=True)
        return self._collection

    def _get_collection(self, *, create: bool) -> Any:
        if self._collection is not None:
            return self._collection
        existing = {c.name for c in self.client.list_collections()}
        if self.collection_name in existing:
            self._collection = self.client.get_collection(self.collection_name, embedding_function=None)
        elif create:
            self._collection = self.client.create_collection(
                self.collection_name,
                embedding_function=None,
                configuration={"hnsw": {**DEFAULT_HNSW, **self.hnsw, "space": "cosine"}},
                metadata={"embedder": self.embedder_name, "dim": int(self.embedder.dim)},
            )
        return self._collection

    def _check_dimension(self, dim: int) -> None:
        collection = self._get_collection(create=False)
        stored = (collection.metadata or {}).get("dim") if collection is not None else None
        if stored is not None and int(stored) != int(dim):
            raise DimensionMismatchError(
                f"gallery {self.location} stores {stored}-d vectors for {self.embedder_name!r}, but "
                f"that embedder now produces {dim}-d vectors (different model or checkpoint?). "
                f"Index into a new gallery, or delete collection {self.collection_name!r} and re-index."
            )

    # ------------------------------------------------------------------ reading

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

    def _scan(self, include: list[str], page: int = 1000) -> Iterator[tuple[str, dict[str, Any]]]:
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

    def _max_batch(self) -> int:
        try:
            return max(1, min(int(self.client.get_max_batch_size()), 5000))
        except Exception:  # older servers do not report it
            return 1000

    # ------------------------------------------------------------------ searching

    def search_text(self, query: str, k: int = 10, where: dict[str, Any] | None = None) -> list[ImageHit]:
        """The ``k`` images closest to a text query."""
        if not query or not query.strip():
            raise ValueError("empty text query: describe the image you are looking for")
        return self.search_vector(self.embedder.embed_texts([query])[0], k, where)

    def search_image(
        self, image: Image.Image | str | os.PathLike, k: int = 10, where: dict[str, Any] | None = None
    ) -> list[ImageHit]:
        """The ``k`` images closest to a query image (a PIL image or a file path)."""
        if not isinstance(image, Image.Image):
            image = load_image(image)
        return self.search_vector(self.embedder.embed_images([image])[0], k, where)

    def search_vector(
        self, vector: np.ndarray | Sequence[float], k: int = 10, where: dict[str, Any] | None = None
    ) -> list[ImageHit]:
        """The ``k`` images closest to a vector in this gallery's embedding space."""
        # No count() here: on a 1M-image Chroma collection it costs ~60 ms, the query itself ~2 ms.
        collection = self._get_collection(create=False)
        if collection is None:
            raise self._empty_error()
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        stored = self._stored_dim()
        if stored is not None and vector.shape[0] != int(stored):
            raise DimensionMismatchError(
                f"query vector has {vector.shape[0]} dimensions, gallery stores {stored}"
            )
        result = collection.query(
            query_embeddings=[vector.tolist()],
            n_results=max(1, int(k)),
            where=where,
            include=["metadatas", "distances"],
        )
        if not result["ids"][0] and (where is None or collection.count() == 0):
            raise self._empty_error()
        return [
            ImageHit.from_record(id_, meta, score=1.0 - float(dist), rank=rank)
            for rank, (id_, meta, dist) in enumerate(
                zip(result["ids"][0], result["metadatas"][0], result["distances"][0]), 1
            )
        ]

    def _empty_error(self) -> EmptyGalleryError:
        return EmptyGalleryError(
            f"gallery {self.location} has no images for embedder {self.embedder_name!r}; "
            "add photos first (Gallery.add(PHOTOS))"
        )

    # ------------------------------------------------------------------ writing

    def add(
        self,
        sources: Sources,
        *,
        embedders: Sequence[Embedder | str] | None = None,
        batch_size: int = 32,
        workers: int = 2,
        progress: bool = True,
    ) -> IndexReport:
        """Index images from folders (recursive), globs or files (see :mod:`.indexing`).

        ``embedders`` indexes with several embedders in one pass (each image decoded once), into
        their collections of this database; by default, this view's embedder. The first embedder
        becomes the gallery's default if it has none yet.
        """
        views = [self] if not embedders else [
            self if (e if isinstance(e, str) else e.name) == self.embedder_name else self.with_embedder(e)
            for e in embedders
        ]
        report = index_sources(views, sources, batch_size=batch_size, workers=workers, progress=progress)
        if report.indexed and self.default_embedder is None:
            self.set_default_embedder(views[0].embedder_name)
        return report

    def _write_batch(self, batch: list[tuple[Path, Any, dict[str, Any]]]) -> int:
        vectors = self.embedder.embed_preprocessed([tensor for _, tensor, _ in batch])
        self.collection.upsert(
            ids=[path_id(path) for path, _, _ in batch],
            embeddings=vectors,
            metadatas=[meta for _, _, meta in batch],
        )
        return len(batch)

    def _known_files(self, paths: Sequence[Path]) -> dict[str, dict[str, Any]]:
        collection = self._get_collection(create=False)
        known: dict[str, dict[str, Any]] = {}
        if collection is None or collection.count() == 0:
            return known
        ids = [path_id(p) for p in paths]
        step = self._max_batch()
        for start in range(0, len(ids), step):
            batch = collection.get(ids=ids[start : start + step], include=["metadatas"])
            known.update({id_: meta for id_, meta in zip(batch["ids"], batch["metadatas"])})
        return known

    def _refresh_captions(self, path: Path, record: dict[str, Any], captions: CaptionIndex) -> None:
        wanted = caption_metadata(captions.captions_for(path))
        if wanted and wanted.get("captions") != record.get("captions"):
            self.collection.update(ids=[path_id(path)], metadatas=[wanted])

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        """Merge keys into stored metadata (values: str, int, float, bool or lists of them)."""
        if len(ids) != len(metadatas):
            raise ValueError("update_metadata needs one metadata dict per id")
        step = self._max_batch()
        for start in range(0, len(ids), step):
            self.collection.update(
                ids=list(ids[start : start + step]), metadatas=list(metadatas[start : start + step])
            )

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            self.collection.delete(ids=list(ids))

    def sync(self) -> list[str]:
        """Drop images whose files no longer exist; return the removed paths."""
        gone = [(item.id, item.path) for item in self.items() if not Path(item.path).exists()]
        self.delete([id_ for id_, _ in gone])
        return [path for _, path in gone]

    def __repr__(self) -> str:
        return f"Gallery({self.location!r}, embedder={self.embedder_name!r})"


# ---------------------------------------------------------------------- helpers


def path_id(path: str | os.PathLike) -> str:
    """The record id of an image file: a hash of its absolute path (stable across runs)."""
    return hashlib.sha1(str(Path(path).resolve()).encode("utf-8")).hexdigest()[:24]


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


def gallery_contents(location: str | os.PathLike) -> list[dict[str, Any]]:
    """``[{"embedder", "dim", "images", "collection", "default"}]`` for each embedder in a gallery."""
    client = connect(str(location), create=False)
    default = _default_embedder(client, str(location))
    return [{**row, "default": row["embedder"] == default} for row in embedder_collections(client)]


def _default_embedder(client: Any, location: str) -> str | None:
    """The recorded default embedder; else the only one; ``None`` for an empty gallery.

    Galleries indexed before defaults were recorded may hold several embedders and no record: then
    the caller must choose, rather than get whichever collection happens to be listed first.
    """
    recorded = (read_record(client, GALLERY_RECORD) or {}).get("default_embedder")
    names = [row["embedder"] for row in embedder_collections(client) if row["embedder"]]
    if recorded and recorded in names:
        return recorded
    if len(names) > 1:
        raise AmbiguousEmbedderError(
            f"gallery {location} holds images for several embedders ({', '.join(sorted(names))}) and no default; "
            "name one (Gallery.open(location, embedder=...)) or record one with gallery.set_default_embedder(name)"
        )
    return names[0] if names else None
