"""The parts of a gallery that indexing and the store's own code lean on, apart from what a search adds.

- :data:`Where`: a search's filter;
- :class:`TileSearch`: a view's tile index;
- :class:`ImageWriter`: what indexing, watching and syncing write through.

The searchable :class:`~pictrieve.vectorstore.store.ImageStore` builds on these; they import nothing of indexing, so
:mod:`~pictrieve.vectorstore.indexing` and :mod:`~pictrieve.vectorstore.store` do not depend on each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from pictrieve.vectorstore.photo_filter import PhotoFilter

if TYPE_CHECKING:
    from pictrieve.tools.models.embedders.base import Embedder
    from pictrieve.vectorstore.reading import GalleryItem

Where = dict[str, Any] | PhotoFilter | None
"""A search's filter: a :class:`PhotoFilter` on the photos' own metadata, or a Chroma-style ``where`` dict
(``{"key": value}``, ``{"key": {"$gte": 3}}``, ``$and``/``$or``, ``$in``/``$nin``, ``$ne``, ``$gt``/``$lt``/``$lte``)."""


class TileSearch(Protocol):
    """The tiles of one view: whether any were made, and each query's best images by their best tile."""

    def exists(self) -> bool: ...

    def rank_ids(self, vectors: np.ndarray, k: int, tiles_per_image: int = 4) -> list[list[tuple[str, float]]]: ...


@runtime_checkable
class ImageWriter(Protocol):
    """What indexing, watching and syncing write through: one embedder's view of a gallery.

    ``writing()`` holds the gallery's write turn for a block (other writer processes wait); every write
    method takes it itself too. Image ids are :func:`~pictrieve.vectorstore.chroma_store.path_id` of the file.
    """

    location: str
    embedder_name: str

    @property
    def embedder(self) -> "Embedder": ...

    @property
    def embedder_loaded(self) -> bool: ...

    def exists(self) -> bool: ...

    def writing(self) -> ContextManager[Any]: ...

    def count(self) -> int: ...

    def items(self) -> Iterator["GalleryItem"]: ...

    def metadata_of(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray: ...

    def find_content(self, sha256: str, *, other_than: str | None = None) -> tuple[str, dict[str, Any]] | None: ...

    def upsert(self, ids: Sequence[str], vectors: Any, metadatas: Sequence[dict[str, Any]]) -> int: ...

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...

    def set_default_embedder(self, name: str | None = None, *, keep_existing: bool = False) -> None: ...

    def get_json(self, key: str) -> dict[str, Any] | None: ...

    def put_json(self, key: str, value: dict[str, Any]) -> None: ...
