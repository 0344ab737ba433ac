"""A LangChain retriever over a gallery, so any LangChain or LangGraph app can find images by text.

Each result is a ``Document`` whose ``page_content`` is the image's first caption (or its file name
when it has none) and whose metadata carries ``id``, ``path``, ``score``, ``rank`` and the stored
metadata, so a downstream VLM or answer node can open the image itself.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.hits import ImageHit


class GalleryRetriever(BaseRetriever):
    """Text-to-image retrieval from a :class:`Gallery` as a LangChain ``BaseRetriever``.

    >>> retriever = GalleryRetriever(gallery=Gallery.open("./my.gallery"), k=4)
    >>> docs = retriever.invoke("a red bicycle leaning on a wall")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    gallery: Any
    """The :class:`Gallery` to search."""
    k: int = 10
    """How many images to return."""
    where: dict[str, Any] | None = None
    """Optional Chroma metadata filter."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        gallery: Gallery = self.gallery
        return [hit_to_document(hit) for hit in gallery.search_text(query, k=self.k, where=self.where)]


def hit_to_document(hit: ImageHit) -> Document:
    """A LangChain ``Document`` describing one search hit."""
    text = hit.captions[0] if hit.captions else hit.metadata.get("name", hit.path)
    metadata = {**hit.metadata, "id": hit.id, "path": hit.path, "score": hit.score, "rank": hit.rank}
    return Document(page_content=text, metadata=metadata, id=hit.id)
