"""LangChain's own standard test suite for retrievers, run against GalleryRetriever, as LangChain's
partner packages do: a user dropping our retriever into a chain gets what the interface promises."""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from conftest import make_photo
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.retriever import GalleryRetriever


@pytest.fixture(scope="module")
def standard_gallery(tmp_path_factory, tiny_clip_embedder):
    root = tmp_path_factory.mktemp("standard")
    for i in range(5):
        make_photo(root / "photos" / f"p{i}.png", seed=i)
    gallery = Gallery.open(root / "g", tiny_clip_embedder)
    gallery.add(root / "photos", progress=False)
    return gallery


class TestGalleryRetrieverStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _gallery(self, standard_gallery):
        type(self)._standard_gallery = standard_gallery

    @property
    def retriever_constructor(self) -> type[GalleryRetriever]:
        return GalleryRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"gallery": self._standard_gallery}

    @property
    def retriever_query_example(self) -> str:
        return "a red square"
