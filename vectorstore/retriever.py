"""A LangChain retriever over a gallery, so any LangChain or LangGraph app can find images by text.

Each result is a ``Document`` whose ``page_content`` is the image's label (first caption, else file
name) and whose metadata is the :class:`ImageHit` as JSON (``id``, ``path``, ``score``, ``rank``,
``captions``, ``metadata``, and ``relevant``: whether it reaches the embedder's relevance cutoff), so a
downstream VLM or answer node can open the image itself.
``retriever.invoke(query, k=3, where={...}, hybrid=False, collapse_duplicates=True)`` overrides ``k``, ``where``,
``hybrid`` (on by default: the photos' own words count too) and ``collapse_duplicates`` (each group of
near-identical photos shown once; its hit's ``copies`` lists the others) for one call; ``where`` is a Chroma
filter or a :class:`~pictrieve.vectorstore.photo_filter.PhotoFilter` (``PhotoFilter.parse(after="2023-06-01",
near="Lisbon")``: when, where, camera, folder), applied in the store.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.photo_filter import PhotoFilter
from pictrieve.vectorstore.search_request import DEFAULT_K, SearchRequest, run_search


class GalleryRetriever(BaseRetriever):
    """Text-to-image retrieval from a gallery (any :class:`~pictrieve.vectorstore.store.ImageStore`) as a LangChain
    ``BaseRetriever``.

    >>> retriever = GalleryRetriever(gallery=Gallery.open("./my.gallery"), k=4)
    >>> docs = retriever.invoke("a red bicycle leaning on a wall")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    gallery: Any
    """The gallery to search (an :class:`~pictrieve.vectorstore.store.ImageStore`: not checked, so a stand-in works)."""
    k: int = DEFAULT_K
    """How many images to return."""
    where: dict[str, Any] | PhotoFilter | None = None
    """Optional filter: a Chroma ``where`` or a :class:`PhotoFilter` on the photos' own metadata."""
    only_relevant: bool = False
    """Return only the images that reach the embedder's relevance cutoff (maybe none)."""
    hybrid: bool = True
    """Match the photos' own words too (folder and file names, captions, place, photo text), fused with the
    vectors (:mod:`~pictrieve.vectorstore.keywords`); ``False``: by vectors alone."""
    collapse_duplicates: bool = False
    """Return each group of near-identical photos once (still ``k`` hits when there are ``k`` distinct ones)."""

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        where: dict[str, Any] | PhotoFilter | None = None,
        hybrid: bool | None = None,
        collapse_duplicates: bool | None = None,
    ) -> list[Document]:
        """Search; ``k``, ``where``, ``hybrid`` and ``collapse_duplicates`` passed to ``invoke`` override the
        retriever's own for one call. The search is the one every front end makes (:meth:`search_request`)."""
        found = run_search(self.gallery, self.search_request(query, k=k, where=where, hybrid=hybrid,
                                                      collapse_duplicates=collapse_duplicates))
        return [hit_to_document(hit) for hit in found.hits]

    def search_request(self, query: str, *, k: int | None = None, where: dict[str, Any] | PhotoFilter | None = None,
                hybrid: bool | None = None, collapse_duplicates: bool | None = None) -> SearchRequest:
        """The :class:`~pictrieve.vectorstore.search_request.SearchRequest` this retriever makes for ``query``
        (each keyword, when given, overriding the retriever's own field)."""
        where = self.where if where is None else where
        photo_filter = where if isinstance(where, PhotoFilter) else None
        return SearchRequest.of(query=query, k=self.k if k is None else k, filters=photo_filter,
                                where=None if photo_filter is not None else where,
                                hybrid=self.hybrid if hybrid is None else bool(hybrid),
                                collapse_duplicates=self.collapse_duplicates if collapse_duplicates is None
                                else bool(collapse_duplicates), only_relevant=self.only_relevant)


def hit_to_document(hit: ImageHit) -> Document:
    """A LangChain ``Document`` for one hit: the hit's label as text, ``hit.to_json()`` as metadata.

    ``ImageHit.model_validate(doc.metadata)`` gives the hit back.
    """
    return Document(page_content=hit.label, metadata=hit.to_json(), id=hit.id)
