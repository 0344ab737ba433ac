"""The gallery's seams (issue 21): reading creates nothing, indexing in parts (plan, prepare, write
precomputed vectors from another Gallery object) stores what Gallery.add stores, and the write lock
lets a write inside a held lock go on. Server and cross-process versions are in test_chroma_server.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import make_photo

from pictrieve.vectorstore.chroma_store import path_id, write_lock
from pictrieve.vectorstore.errors import EmptyGalleryError, GalleryError
from pictrieve.vectorstore.gallery import Gallery, chroma_client, chroma_collection
from pictrieve.vectorstore.indexing import BatchWriter, list_images, prepare_file, start_index
from pictrieve.vectorstore.records import GALLERY_RECORD, RecordStore
from pictrieve.vectorstore.tiles import TileIndex


def test_reading_a_missing_gallery_creates_nothing(tmp_path, photo_folder, tiny_clip_embedder):
    location = tmp_path / "missing"
    gallery = Gallery.open(location, tiny_clip_embedder)
    assert gallery.count() == 0 and gallery.ids() == [] and list(gallery.items()) == []
    assert gallery.embeddings().shape[0] == 0 and gallery.metadata_of([path_id(location / "x.jpg")]) == {}
    assert gallery.embedder_names == [] and gallery.default_embedder is None and gallery.get_json("x") is None
    assert gallery.missing_files() == [] and gallery.sync(dry_run=True) == [] and not gallery.exists()
    with pytest.raises(EmptyGalleryError):
        gallery.search_text("a red square")
    with pytest.raises(GalleryError, match="no gallery at"):
        chroma_client(gallery)  # noqa: B018 - the property is the read under test
    tiles = TileIndex(gallery)
    assert not tiles.exists() and tiles.tiled_ids() == set() and tiles.settings_key() is None
    assert len(gallery.plan_index(photo_folder).todo) == 6
    gallery.delete([path_id(photo_folder / "a" / "img0.png")])  # nothing there to delete: no database made
    with pytest.raises(GalleryError, match="no gallery at"):
        Gallery.open(location, create=False)
    assert not location.exists()


def test_a_handle_opened_without_create_never_creates_a_collection(tmp_path, photo_folder, tiny_clip_embedder):
    Gallery.open(tmp_path / "g", tiny_clip_embedder).add(photo_folder, progress=False)
    before = chroma_client(Gallery.open(tmp_path / "g")).list_collections()
    other = Gallery.open(tmp_path / "g", create=False).with_embedder("open_clip:never-indexed/random")
    with pytest.raises(EmptyGalleryError, match="no images for embedder 'open_clip:never-indexed/random'"):
        chroma_collection(other)  # noqa: B018 - the property is the read under test
    assert other.count() == 0 and other.ids() == []
    assert {c.name for c in chroma_client(Gallery.open(tmp_path / "g")).list_collections()} == {c.name for c in before}


def test_plan_then_write_precomputed_vectors_stores_what_add_stores(tmp_path, photo_folder, tiny_clip_embedder):
    name = tiny_clip_embedder.name
    location = tmp_path / "g"
    plan = Gallery.open(location, tiny_clip_embedder).plan_index(photo_folder)
    assert not location.exists()  # planning reads only
    files = sorted(p for p in photo_folder.rglob("img*") if p.suffix != ".txt")
    assert plan.total == 6 and plan.unchanged == 0 and not plan.failed and plan.embedders == [name]
    assert sorted(f.id for f in plan.todo) == sorted(path_id(p) for p in files)
    assert all(f.embedders == [name] and not f.stored for f in plan.todo)
    by_path = {f.path: f for f in plan.todo}
    assert by_path[str(photo_folder / "a" / "img0.png")].captions == ["a red square", "something else"]
    assert by_path[str(photo_folder / "b" / "img4.jpg")].captions == ["noise photo", "second"]

    # a worker: prepares and embeds in its own way, then writes through another Gallery object
    prepared = [prepare_file(f, {name: tiny_clip_embedder}) for f in plan.todo]
    vectors = tiny_clip_embedder.embed_preprocessed([p.inputs[name] for p in prepared])
    writer = Gallery.open(location, tiny_clip_embedder)
    ids, metadatas = [p.id for p in prepared], [p.metadata for p in prepared]
    assert writer.upsert(ids, vectors, metadatas) == 6
    assert writer.upsert(ids, vectors, metadatas) == 6 and writer.count() == 6  # idempotent

    replanned = Gallery.open(location, tiny_clip_embedder, create=False).plan_index(photo_folder)
    assert replanned.todo == [] and replanned.unchanged == 6

    reference = Gallery.open(tmp_path / "reference", tiny_clip_embedder)
    assert reference.add(photo_folder, progress=False).indexed == 6
    ids = sorted(reference.ids())
    stored = Gallery.open(location, tiny_clip_embedder, create=False)
    np.testing.assert_allclose(stored.embeddings(ids), reference.embeddings(ids), atol=1e-5)
    assert [item.metadata for item in stored.get(ids)] == [item.metadata for item in reference.get(ids)]


def test_a_touched_file_keeps_its_vector_and_a_changed_one_is_embedded_again(tmp_path, photo_folder,
                                                                              tiny_clip_embedder):
    name = tiny_clip_embedder.name
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    touched, changed = photo_folder / "a" / "img1.png", photo_folder / "a" / "img2.png"
    os.utime(touched, ns=(1_000_000_000, 1_000_000_000))
    make_photo(changed, seed=99)
    (photo_folder / "a" / "img3.txt").write_text("a new caption\n")

    with gallery.writing():
        plan = start_index([gallery], list_images(photo_folder))
    assert gallery.get([path_id(photo_folder / "a" / "img3.png")])[0].captions == ["a new caption"]
    assert sorted(f.path for f in plan.todo) == [str(touched), str(changed)] and plan.unchanged == 4
    assert all(f.stored[name]["path"] == f.path for f in plan.todo)
    old_vector = gallery.embeddings([path_id(changed)])[0]
    with BatchWriter([Gallery.open(tmp_path / "g", tiny_clip_embedder, create=False)], batch_size=1) as writer:
        embedded = {f.path: writer.add(prepare_file(f, {name: tiny_clip_embedder})) for f in plan.todo}
    assert embedded == {str(touched): False, str(changed): True}
    assert gallery.get([path_id(touched)])[0].metadata["mtime_ns"] == 1_000_000_000
    assert not np.allclose(gallery.embeddings([path_id(changed)])[0], old_vector)
    assert gallery.plan_index(photo_folder).todo == []


def test_upsert_refuses_vectors_of_another_dimension(tmp_path, photo_folder, tiny_clip_embedder):
    from pictrieve.vectorstore.errors import DimensionMismatchError

    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    with pytest.raises(DimensionMismatchError, match=f"stores {tiny_clip_embedder.dim}-d vectors"):
        gallery.upsert(["x"], np.ones((1, tiny_clip_embedder.dim + 1)), [{"path": "/x.jpg"}])
    with pytest.raises(ValueError, match="one vector row and one metadata dict per id"):
        gallery.upsert(["x", "y"], np.ones((1, tiny_clip_embedder.dim)), [{"path": "/x.jpg"}])
    assert gallery.count() == 6


def test_create_makes_the_collection_a_writer_elsewhere_opens(tmp_path, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder).create()
    reopened = Gallery.open(tmp_path / "g", tiny_clip_embedder.name, create=False)  # a name only: no model
    assert reopened.count() == 0 and reopened.embedder_names == [tiny_clip_embedder.name]
    assert gallery.default_embedder is None  # creating records nothing; the first index does
    gallery.set_default_embedder(keep_existing=True)
    gallery.set_default_embedder("open_clip:another/random", keep_existing=True)
    assert gallery.default_embedder == tiny_clip_embedder.name


def test_the_record_store_reads_without_a_database_and_merges(tmp_path):
    from pictrieve.vectorstore.chroma_store import connect

    assert RecordStore(None).get(GALLERY_RECORD) is None and RecordStore(None).default_embedder is None
    records = RecordStore(connect(str(tmp_path / "g"), create=True))
    assert records.get("k") is None
    records.put("k", {"a": 1})
    assert records.merge("k", {"a": 2, "b": ""}, keep_existing=True) == {"a": 1, "b": ""}
    assert records.merge("k", {"a": 3}) == {"a": 3, "b": ""} == records.get("k")
    records.put_user("trust", {"w": [1]})
    assert records.get_user("trust") == {"w": [1]} and records.get("trust") is None
    with pytest.raises(TypeError):
        records.put("k", ["not", "a", "dict"])


def test_a_write_inside_a_held_lock_goes_on(tmp_path, tiny_clip_embedder):
    """The write methods take the lock themselves; inside ``writing()`` (or indexing) they must not
    wait for the lock their own thread holds (were it not re-entrant, the inner lock below would give
    up after 2 s with GalleryBusyError, and indexing would wait forever)."""
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder).create()
    vector = np.ones((1, tiny_clip_embedder.dim)) / np.sqrt(tiny_clip_embedder.dim)
    with gallery.writing(), write_lock(str(tmp_path / "g"), timeout=2):
        gallery.put_json("k", {"v": 1})
        gallery.upsert(["x"], vector, [{"path": "/x.jpg"}])
        gallery.update_metadata(["x"], [{"rating": 5}])
    assert gallery.get_json("k") == {"v": 1} and gallery.get(["x"])[0].metadata == {"path": "/x.jpg", "rating": 5}
