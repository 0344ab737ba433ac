"""pictrieve: find images with language.

LangGraph retrieval graphs over Chroma image galleries. The pieces most users need first:

>>> from pictrieve import Gallery, create_embedder
>>> gallery = Gallery.open("./my.gallery")            # offline default embedder
>>> gallery.add("~/Photos")
>>> hits = gallery.search_text("two dogs playing in the snow", k=5)

Subpackages: ``tools`` (models and services), ``vectorstore`` (galleries), ``agents`` (LLM-backed
nodes), ``graphs`` (LangGraph builders), ``prompts`` (prompt texts), ``evaluation`` (metrics).
Heavy modules load lazily, so ``import pictrieve`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Gallery": "pictrieve.vectorstore.gallery",
    "ImageHit": "pictrieve.vectorstore.hits",
    "SearchHit": "pictrieve.vectorstore.gallery",
    "GalleryRetriever": "pictrieve.vectorstore.retriever",
    "create_embedder": "pictrieve.tools.models.embedders.factory",
    "Embedder": "pictrieve.tools.models.embedders.base",
}

if TYPE_CHECKING:  # pragma: no cover
    from pictrieve.tools.models.embedders.base import Embedder
    from pictrieve.tools.models.embedders.factory import create_embedder
    from pictrieve.vectorstore.gallery import Gallery, SearchHit
    from pictrieve.vectorstore.hits import ImageHit
    from pictrieve.vectorstore.retriever import GalleryRetriever

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pictrieve' has no attribute {name!r}")
