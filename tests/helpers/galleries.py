"""Small real galleries for tests that run graphs: photos with captions, indexed with the tiny random CLIP."""

from __future__ import annotations

import pytest

from helpers import make_photo
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
