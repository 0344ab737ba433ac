"""What a gallery is to the rest of pictrieve: the :class:`ImageStore` protocol, and the narrow
:class:`ImageWriter` that indexing writes through.

Nodes, graph builders, front ends and the LangChain retriever take an :class:`ImageStore`; they call only
what it names. Two stores implement it:

- :class:`~pictrieve.vectorstore.gallery.Gallery`: Chroma (an embedded folder or a ``chroma run`` server),
  approximate (HNSW) search, shared between processes;
- :class:`~pictrieve.vectorstore.memory_store.MemoryStore`: exact brute force over numpy arrays in this
  process, the reference for tests and tiny ephemeral galleries.

A store is one gallery seen through one embedder (embedders differ in dimension and meaning):
``with_embedder`` and ``views`` give the other views of the same gallery, whose image ids are shared. Every
search takes ``where``: a :class:`~pictrieve.vectorstore.photo_filter.PhotoFilter` (when, where, camera, folder),
or a Chroma-style ``where`` dict on stored metadata, applied in the store so that "k photos from June" returns k.
Every failure a store raises is a :class:`~pictrieve.vectorstore.errors.GalleryError` (its kinds say which),
never a backend's own exception, so callers catch that.

Indexing (:mod:`~pictrieve.vectorstore.indexing`, ``watching``, ``syncing``) needs less: an
:class:`ImageWriter`. Both protocols are checked structurally (``isinstance`` looks at names only).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import numpy as np

from pictrieve.vectorstore.core import ImageWriter, TileSearch, Where  # noqa: F401 - ImageWriter and Where: re-exported

if TYPE_CHECKING:
    from PIL import Image

    from pictrieve.tools.models.embedders.base import Embedder
    from pictrieve.vectorstore.hits import ImageHit
    from pictrieve.vectorstore.indexing import IndexReport, Sources
    from pictrieve.vectorstore.reading import GalleryItem
    from pictrieve.vectorstore.relevance import RelevanceCutoff


@runtime_checkable
class ImageStore(ImageWriter, Protocol):
    """A searchable gallery seen through one embedder: what methods, front ends and the retriever call.

    Reading never writes. ``location`` names the gallery (a folder, a URL, or ``memory:NAME``);
    ``collection_name`` names this embedder's part of it (stable, used as a cache key).
    """

    collection_name: str

    # ------------------------------------------------------------------ embedders and views

    @property
    def embedder_names(self) -> list[str]:
        """Every embedder with images in this gallery, sorted by name."""
        ...

    @property
    def default_embedder(self) -> str | None: ...

    def with_embedder(self, embedder: "Embedder | str") -> "ImageStore":
        """The same gallery through another embedder (ids are shared)."""
        ...

    def views(self, embedders: "Sequence[Embedder | str] | None" = None) -> list["ImageStore"]:
        """This view, then one per other embedder named."""
        ...

    # ------------------------------------------------------------------ reading

    def ids(self) -> list[str]: ...

    def get(self, ids: Sequence[str]) -> list["GalleryItem"]:
        """Items for ``ids``, in order; an unknown id raises ``KeyError``."""
        ...

    def captions(self, id_: str) -> list[str]: ...

    def metadata_where(self, ids: Sequence[str], where: Where = None) -> dict[str, dict[str, Any]]: ...

    # ------------------------------------------------------------------ searching

    def search_text(self, query: str, k: int = 10, where: Where = None, *, only_relevant: bool = False,
                    hybrid: bool = False, collapse_duplicates: bool = False) -> list["ImageHit"]: ...

    def search_image(self, image: "Image.Image | str | os.PathLike", k: int = 10, where: Where = None, *,
                     only_relevant: bool = False, collapse_duplicates: bool = False) -> list["ImageHit"]: ...

    def search_vector(self, vector: "np.ndarray | Sequence[float]", k: int = 10, where: Where = None, *,
                      only_relevant: bool = False, collapse_duplicates: bool = False) -> list["ImageHit"]: ...

    def rank_ids(self, vectors: Any, k: int = 10) -> list[list[tuple[str, float]]]:
        """For each row of ``vectors`` its ``k`` nearest images as ``(id, cosine)``, best first."""
        ...

    def relevance_cutoff(self) -> "RelevanceCutoff": ...

    def tiles(self) -> "TileSearch":
        """This view's tile index (NEEDLE's smart tiles); ``exists()`` is false where none were made."""
        ...

    # ------------------------------------------------------------------ changes

    def change_feed(self) -> str | None:
        """The embedded Chroma folder whose database file indexes derived from this gallery follow
        (:mod:`~pictrieve.vectorstore.changes`); ``None``: no feed, they are built from the records each time."""
        ...

    def write_stamp(self) -> Any:
        """A value every write changes (``None``: none is kept, so nothing derived from the gallery is cached)."""
        ...

    # ------------------------------------------------------------------ writing

    def add(self, sources: "Sources", **options: Any) -> "IndexReport":
        """Index image files (see :func:`~pictrieve.vectorstore.indexing.index_sources`)."""
        ...

    def sync(self, *, dry_run: bool = False, allow_missing_folders: bool = False,
             allow_large: bool = False) -> list[str]: ...
