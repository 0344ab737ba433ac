"""Gallery paths beside test_multi_embedder_gallery.py: open never writes, no Pillow globals, paging,
where filters, wrong-dimension vectors."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from pictrieve.vectorstore.chroma_store import collection_name_for
from pictrieve.vectorstore.gallery import Gallery, chroma_client, chroma_collection
from pictrieve.vectorstore.errors import GalleryError


def test_opening_never_writes(tmp_path, photo_folder, tiny_clip_embedder):
    Gallery.open(tmp_path / "new", tiny_clip_embedder).count()
    assert not (tmp_path / "new").exists()
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    name = collection_name_for(tiny_clip_embedder.name)
    before = chroma_client(gallery).get_collection(name).configuration_json
    Gallery.open(tmp_path / "g", tiny_clip_embedder, hnsw={"ef_search": 17}).search_text("x", k=1)
    assert chroma_client(gallery).get_collection(name).configuration_json == before
    gallery.set_ef_search(17)  # the explicit way
    assert chroma_client(gallery).get_collection(name).configuration_json["hnsw"]["ef_search"] == 17


def test_importing_images_leaves_pillow_settings_alone():
    code = (
        "from PIL import Image; before = Image.MAX_IMAGE_PIXELS; "
        "import pictrieve.tools.core.images, pictrieve.vectorstore.gallery; "
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
        chroma_collection(gallery).add(ids=ids[start:start + 500], embeddings=vectors[start:start + 500],
                               metadatas=[{"path": f"/x/{i}.jpg"} for i in ids[start:start + 500]])
    assert sorted(gallery.ids()) == ids
    assert len(list(gallery.items())) == 2100
    assert gallery.embeddings().shape == (2100, 4)


def test_where_filters_and_a_wrong_dimension_vector(tmp_path, photo_folder, tiny_clip_embedder):
    from pictrieve.vectorstore.errors import DimensionMismatchError
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


def test_glob_sources_and_hidden_files(tmp_path, tiny_clip_embedder):
    from helpers import make_photo

    photos = tmp_path / "photos"
    for name in ("a/one.png", "a/two.jpg", "b/three.png", "a/.hidden.png", ".secret/four.png", "notes.txt"):
        if name.endswith("txt"):
            (photos / name).write_text("not an image")
        else:
            make_photo(photos / name, seed=len(name))
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add([str(photos / "**" / "*.png")], progress=False)
    assert report.total == 2 and sorted(item.path.rsplit("/", 1)[-1] for item in gallery.items()) == [
        "one.png", "three.png"]  # the glob skips .hidden.png and the .secret folder
    folder = gallery.add(photos, progress=False)
    assert folder.total == 3 and folder.unchanged == 2  # the walk skips hidden files and folders too


def test_malformed_caption_lines_are_skipped_not_fatal(tmp_path, tiny_clip_embedder, caplog):
    from helpers import make_photo

    photos = tmp_path / "photos"
    for i in range(4):
        make_photo(photos / f"{i}.png", seed=i)
    (photos / "captions.jsonl").write_text(
        '{"image": "0.png", "captions": ["a good caption"]}\n'
        "{not json\n"
        '{"image": "1.png"}\n'
        '{"image": "2.png", "captions": 7}\n'
        "\n"
        '{"image": "3.png", "captions": ["", "  ", "last one"]}\n'
    )
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    with caplog.at_level("WARNING"):
        assert gallery.add(photos, progress=False).indexed == 4
    captions = {item.path.rsplit("/", 1)[-1]: item.captions for item in gallery.items()}
    assert captions == {"0.png": ["a good caption"], "1.png": [], "2.png": [], "3.png": ["last one"]}
    assert caplog.text.count("malformed caption line") == 3


def test_touched_files_refresh_their_mtime_and_captions_refresh_without_reembedding(
        tmp_path, photo_folder, tiny_clip_embedder, monkeypatch):
    from pictrieve.vectorstore import indexing
    from pictrieve.vectorstore.chroma_store import path_id

    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    touched = photo_folder / "a" / "img1.png"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    hashed = []
    real_hash = indexing.file_sha256
    monkeypatch.setattr(indexing, "file_sha256", lambda path, *a: hashed.append(path) or real_hash(path, *a))
    report = gallery.add(photo_folder, progress=False)
    assert (report.indexed, report.unchanged, hashed) == (0, 6, [touched])
    assert gallery.get([path_id(touched)])[0].metadata["mtime_ns"] == touched.stat().st_mtime_ns
    gallery.add(photo_folder, progress=False)
    assert hashed == [touched]  # the refreshed mtime spares the next run a re-hash

    (photo_folder / "a" / "img1.txt").write_text("a new caption\n")
    gallery.add(photo_folder, progress=False)
    assert gallery.get([path_id(touched)])[0].captions == ["a new caption"]
    assert hashed == [touched]  # captions refreshed from the sidecar without hashing or embedding
