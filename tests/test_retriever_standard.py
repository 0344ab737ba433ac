"""LangChain's own standard suite for retrievers, run against GalleryRetriever (as partner packages do)."""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from helpers import make_photo
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.retriever import GalleryRetriever



@pytest.fixture(scope="module")
def standard_gallery(tmp_path_factory, tiny_clip_embedder):
    root = tmp_path_factory.mktemp("standard")
    for i in range(8):
        make_photo(root / "photos" / f"{i}.png", seed=100 + i)
    gallery = Gallery.open(root / "g", tiny_clip_embedder)
    gallery.add(root / "photos", progress=False)
    return gallery


# The suite's async test runs through pytest-asyncio (asyncio_mode = "auto" in pyproject.toml).
class TestGalleryRetrieverStandard(RetrieversIntegrationTests):
    """All five standard tests, unchanged (the suite forbids overriding them)."""

    @pytest.fixture(autouse=True)
    def _use_gallery(self, standard_gallery):
        self._gallery = standard_gallery

    @property
    def retriever_constructor(self) -> type[GalleryRetriever]:
        return GalleryRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"gallery": self._gallery}

    @property
    def retriever_query_example(self) -> str:
        return "a photo of a dog on a beach"
