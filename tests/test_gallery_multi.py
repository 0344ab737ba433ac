"""Gallery paths beside test_multi_embedder_gallery.py: open never writes, no Pillow globals, paging,
where filters, wrong-dimension vectors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pictrieve.vectorstore.chroma_store import collection_name_for
from pictrieve.vectorstore.gallery import Gallery, GalleryError


def test_opening_never_writes(tmp_path, photo_folder, tiny_clip_embedder):
    Gallery.open(tmp_path / "new", tiny_clip_embedder).count()
    assert not (tmp_path / "new").exists()
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    name = collection_name_for(tiny_clip_embedder.name)
    before = gallery.client.get_collection(name).configuration_json
    Gallery.open(tmp_path / "g", tiny_clip_embedder, hnsw={"ef_search": 17}).search_text("x", k=1)
    assert gallery.client.get_collection(name).configuration_json == before
    gallery.set_ef_search(17)  # the explicit way
    assert gallery.client.get_collection(name).configuration_json["hnsw"]["ef_search"] == 17


def test_importing_images_leaves_pillow_settings_alone():
    code = (
        "from PIL import Image; before = Image.MAX_IMAGE_PIXELS; "
        "import pictrieve.tools.images, pictrieve.vectorstore.gallery; "
        "assert Image.MAX_IMAGE_PIXELS == before, Image.MAX_IMAGE_PIXELS"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_scans_read_every_page(tmp_path):
    class Vectors:
        name, dim = "offline", 4

    gallery = Gallery.open(tmp_path / "g", Vectors())
    rng = np.random.default_rng(0)
    ids = [f"id{i:05d}" for i in range(2100)]  # more than two pages of 1,000
    vectors = rng.normal(size=(len(ids), 4)).astype(np.float32)
    for start in range(0, len(ids), 500):
        gallery.collection.add(ids=ids[start:start + 500], embeddings=vectors[start:start + 500],
                               metadatas=[{"path": f"/x/{i}.jpg"} for i in ids[start:start + 500]])
    assert sorted(gallery.ids()) == ids
    assert len(list(gallery.items())) == 2100
    assert gallery.embeddings().shape == (2100, 4)


def test_where_filters_and_a_wrong_dimension_vector(tmp_path, photo_folder, tiny_clip_embedder):
    from pictrieve.vectorstore.gallery import DimensionMismatchError
    from pictrieve.vectorstore.retriever import GalleryRetriever

    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    hits = gallery.search_text("anything", k=10, where={"name": "img4.jpg"})
    assert [h.path for h in hits] == [str(photo_folder / "b" / "img4.jpg")]
    assert gallery.search_text("anything", k=10, where={"name": "nothing.jpg"}) == []
    docs = GalleryRetriever(gallery=gallery, k=5, where={"name": {"$in": ["img0.png", "img5.jpg"]}}).invoke("x")
    assert sorted(d.metadata["path"].rsplit("/", 1)[-1] for d in docs) == ["img0.png", "img5.jpg"]
    one = GalleryRetriever(gallery=gallery, k=5).invoke("x", where={"name": "img1.png"})
    assert [d.metadata["metadata"]["name"] for d in one] == ["img1.png"]
    with pytest.raises(DimensionMismatchError, match="3 dimensions.*32-d"):
        gallery.search_vector([0.1, 0.2, 0.3], k=1)
    with pytest.raises(GalleryError, match="k must be at least 1"):
        gallery.search_text("x", k=0)
