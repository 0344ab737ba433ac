"""Small real galleries for tests that run graphs: photos with captions, indexed with the tiny random CLIP."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import make_photo
from helpers.stores import STORES
from pictrieve.vectorstore.gallery import Gallery


@pytest.fixture(scope="module")
def tiny_gallery(tmp_path_factory, tiny_clip_embedder):
    """Four captioned photos (two dogs, children, a bike) in a gallery: what every method can run on."""
    root = tmp_path_factory.mktemp("contract")
    for i, caption in enumerate(["a black dog runs", "a brown dog jumps", "two children play", "a man rides a bike"]):
        make_photo(root / "photos" / f"p{i}.png", seed=i)
        (root / "photos" / f"p{i}.txt").write_text(caption + "\n")
    gallery = Gallery.open(root / "g", tiny_clip_embedder)
    gallery.add(root / "photos", progress=False)
    return gallery


@pytest.fixture(scope="module", params=STORES)
def tiny_store(request, tiny_gallery, tiny_clip_embedder):
    """``tiny_gallery``'s photos in each store (Chroma: ``tiny_gallery`` itself; the in-memory store: indexed
    afresh from the same files), so that a test runs every method on both."""
    if request.param == "chroma":
        return tiny_gallery
    from pictrieve.vectorstore.memory_store import MemoryStore

    store = MemoryStore(tiny_clip_embedder, location="memory:contract")
    store.add(Path(next(iter(tiny_gallery.items())).path).parent, progress=False)
    assert sorted(store.ids()) == sorted(tiny_gallery.ids())
    return store
