"""What a gallery is to the rest of pictrieve: the :class:`ImageStore` protocol.

Nodes, graph builders, front ends and the LangChain retriever take an :class:`ImageStore`; they call only what it
names. It is two layers (issue 39):

- the store core (:class:`~pictrieve.vectorstore.core.StoreCore`: write, delete, get with a ``where``, vector search
  with a ``where``, count, records, changes), which a backend implements:
  :class:`~pictrieve.vectorstore.gallery.Gallery` (Chroma: an embedded folder or a ``chroma run`` server,
  approximate HNSW search, shared between processes) and
  :class:`~pictrieve.vectorstore.memory_store.MemoryStore` (exact brute force over numpy arrays in this process, the
  reference for tests and tiny ephemeral galleries);
- the service (:class:`~pictrieve.vectorstore.service.StoreService`: text, image and hybrid search, photo filters,
  relevance, near-duplicate folding, records, indexing, sync), written once over any core.

A store is one gallery seen through one embedder (embedders differ in dimension and meaning): ``with_embedder``
and ``views`` give the other views of the same gallery, whose image ids are shared. Every search takes ``where``: a
:class:`~pictrieve.vectorstore.photo_filter.PhotoFilter` (when, where, camera, folder), or a Chroma-style ``where``
dict on stored metadata, applied in the store so that "k photos from June" returns k. Every failure a store raises
is a :class:`~pictrieve.vectorstore.errors.GalleryError` (its kinds say which), never a backend's own exception, so
callers catch that.

Indexing (:mod:`~pictrieve.vectorstore.indexing`, ``watching``, ``syncing``) needs less: an
:class:`~pictrieve.vectorstore.core.ImageWriter`. The protocols are checked structurally (``isinstance`` looks at
names only).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import numpy as np

from pictrieve.vectorstore.core import ImageWriter, StoreCore, Where

if TYPE_CHECKING:
    from PIL import Image

    from pictrieve.tools.models.embedders.base import Embedder
    from pictrieve.vectorstore.hits import ImageHit
    from pictrieve.vectorstore.indexing import IndexPlan, IndexReport, Sources
    from pictrieve.vectorstore.reading import GalleryItem
    from pictrieve.vectorstore.relevance import RelevanceCutoff
    from pictrieve.vectorstore.search_request import SearchAnswer


@runtime_checkable
class ImageStore(StoreCore, ImageWriter, Protocol):
    """A searchable gallery seen through one embedder: a store core and the service above it (what
    :class:`~pictrieve.vectorstore.service.StoreService` gives every core), what methods, front ends and the
    retriever call.

    Reading never writes. ``location`` names the gallery (a folder, a URL, or ``memory:NAME``);
    ``collection_name`` names this embedder's part of it (stable, used as a cache key).
    """

    # ------------------------------------------------------------------ embedders and views

    @property
    def default_embedder(self) -> str | None: ...

    def with_embedder(self, embedder: "Embedder | str") -> "ImageStore":
        """The same gallery through another embedder (ids are shared)."""
        ...

    def views(self, embedders: "Sequence[Embedder | str] | None" = None) -> list["ImageStore"]:
        """This view, then one per other embedder named."""
        ...

    # ------------------------------------------------------------------ reading

    def get(self, ids: Sequence[str]) -> list["GalleryItem"]:
        """Items for ``ids``, in order; an unknown id raises ``KeyError``."""
        ...

    def captions(self, id_: str) -> list[str]: ...

    def metadata_where(self, ids: Sequence[str], where: Where = None) -> dict[str, dict[str, Any]]: ...

    # ------------------------------------------------------------------ searching

    def search(self, query: str | None = None, **request: Any) -> "SearchAnswer":
        """The plain search every front end makes (:func:`~pictrieve.vectorstore.search_request.run_search`)."""
        ...

    def search_text(self, query: str, k: int = 10, where: Where = None, *, only_relevant: bool = False,
                    hybrid: bool = False, collapse_duplicates: bool = False) -> list["ImageHit"]: ...

    def search_image(self, image: "Image.Image | str | os.PathLike", k: int = 10, where: Where = None, *,
                     only_relevant: bool = False, collapse_duplicates: bool = False) -> list["ImageHit"]: ...

    def search_vector(self, vector: "np.ndarray | Sequence[float]", k: int = 10, where: Where = None, *,
                      only_relevant: bool = False, collapse_duplicates: bool = False) -> list["ImageHit"]: ...

    def relevance_cutoff(self) -> "RelevanceCutoff": ...

    # ------------------------------------------------------------------ writing

    def add(self, sources: "Sources", **options: Any) -> "IndexReport":
        """Index image files (see :func:`~pictrieve.vectorstore.indexing.index_sources`)."""
        ...

    def plan_index(self, sources: "Sources", *, embedders: "Sequence[Embedder | str] | None" = None) -> "IndexPlan": ...

    def sync(self, *, dry_run: bool = False, allow_missing_folders: bool = False,
             allow_large: bool = False) -> list[str]: ...
