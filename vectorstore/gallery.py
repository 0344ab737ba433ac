"""Image galleries: image embeddings in Chroma, searchable by text, image or vector.

A gallery is a Chroma database (an embedded ``PersistentClient`` folder, or a ``chroma run`` server
reached at ``http://host:port``) holding one collection per embedder, because embedders differ in
dimension and meaning. Each record is one image file: its id is derived from the absolute path, its
vector is the embedder's L2-normalised image embedding, and its metadata holds the path, size,
modification time, content hash and any sidecar captions. Collections use cosine HNSW, so a hit's
``score`` is the cosine similarity.

Indexing is built to lose nothing: files are decoded and preprocessed in worker threads while the
model embeds the previous batch, each batch is written as soon as it is embedded (an interrupted
run resumes where it stopped), unchanged files are skipped by size and modification time, then by
content hash, and unreadable files are reported, not fatal.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence
from urllib.parse import urlparse

import numpy as np
from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.embedders.base import Embedder
from pictrieve.tools.embedders.factory import check_embedder_name, create_embedder, default_embedder_name
from pictrieve.tools.images import ImageDecodeError, file_sha256, iter_image_files, load_image
from pictrieve.vectorstore.captions import CaptionIndex
from pictrieve.vectorstore.hits import ImageHit

logger = logging.getLogger(__name__)

COLLECTION_PREFIX = "images__"
# Chroma's default ef_search (100) gives recall@10 of about 0.91 against exact search at 1M vectors;
# 200 gives about 0.97 at no measurable latency cost (BENCHMARKS.md, search latency).
DEFAULT_HNSW = {"ef_search": 200}


class GalleryError(PictrieveError, RuntimeError):
    """Base class for gallery errors; messages say what to do."""


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


@dataclass
class FailedImage:
    path: str
    error: str


@dataclass
class IndexReport:
    """What one ``Gallery.add`` call did."""

    indexed: int = 0
    unchanged: int = 0
    failed: list[FailedImage] = field(default_factory=list)
    total: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        loaded lazily, on the first call that needs it. ``hnsw`` sets Chroma HNSW options for a new
        collection (``ef_construction``, ``max_neighbors``, ``ef_search``); ``ef_search``, the
        speed/recall knob of queries, is also applied to an existing one.
        """
        location = str(location)
        client = _connect(location, create=create)
        if embedder is None:
            embedder = _stored_embedder_name(client, location) or default_embedder_name()
        gallery = cls(client, location, embedder, hnsw)
        if not create and gallery._get_collection(create=False) is None:
            raise GalleryError(
                f"gallery {location} has no images for embedder {gallery.embedder_name!r}; "
                f"index some with `pictrieve index PHOTOS --gallery {location} "
                f"--embedder {gallery.embedder_name}`"
            )
        return gallery

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
            if "ef_search" in self.hnsw:
                self._collection.modify(configuration={"hnsw": {"ef_search": int(self.hnsw["ef_search"])}})
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
            f"run `pictrieve index PHOTOS --gallery {self.location}` first"
        )

    # ------------------------------------------------------------------ writing

    def add(
        self,
        sources: str | os.PathLike | Iterable[str | os.PathLike],
        *,
        batch_size: int = 32,
        workers: int = 2,
        progress: bool = True,
    ) -> IndexReport:
        """Index images from folders (recursive), globs or files; see the module docstring."""
        from tqdm.auto import tqdm

        sources = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
        paths = list(iter_image_files(sources))
        report = IndexReport(total=len(paths))
        captions = CaptionIndex(sources)
        known = self._known_files(paths)
        todo: list[Path] = []
        for path in paths:
            record = known.get(path_id(path))
            try:
                stat = path.stat()
            except OSError as exc:  # vanished or unreadable since the folder was listed
                report.failed.append(FailedImage(str(path), f"{path}: {exc.strerror or exc}"))
                continue
            if record and record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns:
                report.unchanged += 1
                self._refresh_captions(path, record, captions)
            else:
                todo.append(path)
        if not todo:
            return report
        embedder = self.embedder
        batch: list[tuple[Path, Any, dict[str, Any]]] = []
        bar = tqdm(total=len(todo), unit="img", desc="indexing", disable=not progress)
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="pictrieve-decode") as pool:
            for path, prepared in _prefetch(pool, todo, embedder, known, window=4 * batch_size):
                bar.update(1)
                if isinstance(prepared, Exception):
                    report.failed.append(FailedImage(str(path), str(prepared)))
                    logger.warning("skipped %s", prepared)
                    continue
                tensor, meta = prepared
                meta.update(_caption_metadata(captions.captions_for(path)))
                if tensor is None:  # touched but same content: refresh metadata only
                    self.collection.update(ids=[path_id(path)], metadatas=[meta])
                    report.unchanged += 1
                    continue
                batch.append((path, tensor, meta))
                if len(batch) >= batch_size:
                    report.indexed += self._write_batch(batch)
                    batch = []
            if batch:
                report.indexed += self._write_batch(batch)
        bar.close()
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
        wanted = _caption_metadata(captions.captions_for(path))
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


def collection_name_for(embedder_name: str) -> str:
    """A valid Chroma collection name for an embedder name (readable prefix + hash)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", embedder_name.split("/")[0])[:40].strip("-_") or "embedder"
    digest = hashlib.sha1(embedder_name.encode("utf-8")).hexdigest()[:10]
    return f"{COLLECTION_PREFIX}{slug}__{digest}"


def _connect(location: str, *, create: bool) -> Any:
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if location.startswith(("http://", "https://")):
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
                "`chroma run --path DIR --port PORT` or use a folder path"
            ) from exc
        return client
    path = Path(location).expanduser()
    if not create and not path.exists():
        raise GalleryError(f"no gallery at {path}; create one with `pictrieve index PHOTOS --gallery {path}`")
    if path.exists() and not path.is_dir():
        raise GalleryError(f"{path} is a file, not a gallery folder")
    return chromadb.PersistentClient(path=str(path), settings=settings)


def gallery_contents(location: str | os.PathLike) -> list[dict[str, Any]]:
    """``[{"embedder", "dim", "images"}]`` for each embedder collection in a gallery."""
    return _collections(_connect(str(location), create=False))


def _collections(client: Any) -> list[dict[str, Any]]:
    rows = []
    for listed in client.list_collections():
        if listed.name.startswith(COLLECTION_PREFIX):
            collection = client.get_collection(listed.name, embedding_function=None)
            meta = collection.metadata or {}
            rows.append({"embedder": meta.get("embedder"), "dim": meta.get("dim"), "images": collection.count()})
    return rows


def _stored_embedder_name(client: Any, location: str) -> str | None:
    names = [row["embedder"] for row in _collections(client) if row["embedder"]]
    if len(names) > 1:
        raise AmbiguousEmbedderError(
            f"gallery {location} holds images for several embedders ({', '.join(sorted(names))}); "
            "choose one with --embedder"
        )
    return names[0] if names else None


def _prefetch(
    pool: ThreadPoolExecutor,
    paths: Sequence[Path],
    embedder: Embedder,
    known: dict[str, dict[str, Any]],
    window: int,
) -> Iterator[tuple[Path, Any]]:
    """Yield ``(path, (tensor, metadata) | exception)`` in order, keeping ``window`` decodes in flight."""
    pending: deque[tuple[Path, Future]] = deque()
    queue = iter(paths)
    for path in queue:
        pending.append((path, pool.submit(_prepare, path, embedder, known.get(path_id(path)))))
        if len(pending) >= window:
            break
    while pending:
        path, future = pending.popleft()
        next_path = next(queue, None)
        if next_path is not None:
            pending.append((next_path, pool.submit(_prepare, next_path, embedder, known.get(path_id(next_path)))))
        try:
            yield path, future.result()
        except (ImageDecodeError, OSError) as exc:
            yield path, exc


def _prepare(path: Path, embedder: Embedder, record: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
    """Hash, decode and preprocess one file in a worker thread (tensor ``None`` if content unchanged)."""
    stat = path.stat()
    digest = file_sha256(path)
    meta: dict[str, Any] = {
        "path": str(path),
        "name": path.name,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": digest,
    }
    if record and record.get("sha256") == digest:
        return None, meta
    image = load_image(path)
    meta.update(width=image.width, height=image.height)
    return embedder.preprocess(image), meta


def _caption_metadata(captions: list[str]) -> dict[str, Any]:
    return {"captions": captions, "caption": captions[0]} if captions else {}


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
