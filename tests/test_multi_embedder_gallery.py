"""One gallery, several embedders: shared ids, one decode per image, a recorded default, JSON records,
and opening that never writes."""

from __future__ import annotations

import numpy as np
import pytest

from pictrieve.vectorstore import indexing
from pictrieve.vectorstore.gallery import Gallery, chroma_client, gallery_contents

SECOND = "pictrieve-second-tiny"


@pytest.fixture
def second_embedder(tiny_clip_embedder):
    """A second embedder (another name and another projection of the tiny CLIP's vectors)."""

    class Rotated:
        name = "open_clip:" + str(tiny_clip_embedder.name.split(":", 1)[1]).replace("/random", "/random")
        dim = tiny_clip_embedder.dim
        rotation = np.linalg.qr(np.random.default_rng(0).standard_normal((dim, dim)))[0].astype(np.float32)

        def preprocess(self, image):
            return tiny_clip_embedder.preprocess(image)

        def embed_preprocessed(self, batch):
            return tiny_clip_embedder.embed_preprocessed(batch) @ self.rotation

        def embed_images(self, images):
            return tiny_clip_embedder.embed_images(images) @ self.rotation

        def embed_texts(self, texts):
            return tiny_clip_embedder.embed_texts(texts) @ self.rotation

    rotated = Rotated()
    rotated.name = tiny_clip_embedder.name + "#rotated"
    return rotated


def test_several_embedders_decode_each_image_once_and_share_ids(tmp_path, photo_folder, tiny_clip_embedder,
                                                                second_embedder, monkeypatch):
    decoded = []
    real_load = indexing.load_image
    monkeypatch.setattr(indexing, "load_image", lambda path, **kw: decoded.append(path) or real_load(path, **kw))
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add(photo_folder, embedders=[tiny_clip_embedder, second_embedder], progress=False)
    assert report.indexed == 6 and len(decoded) == 6  # six photos, two embedders, six decodes
    other = gallery.with_embedder(second_embedder)
    assert sorted(gallery.ids()) == sorted(other.ids()) and len(other.ids()) == 6
    np.testing.assert_allclose(other.embeddings(gallery.ids()),
                               gallery.embeddings() @ second_embedder.rotation, atol=1e-5)
    assert set(gallery.embedder_names) == {tiny_clip_embedder.name, second_embedder.name}
    # a re-run finds nothing to do for either embedder
    again = gallery.add(photo_folder, embedders=[tiny_clip_embedder, second_embedder], progress=False)
    assert (again.indexed, again.unchanged, len(decoded)) == (0, 6, 6)


def test_opening_without_an_embedder_uses_the_recorded_default(tmp_path, photo_folder, tiny_clip_embedder,
                                                              second_embedder):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, embedders=[tiny_clip_embedder, second_embedder], progress=False)
    assert gallery.default_embedder == tiny_clip_embedder.name  # the first one indexed
    assert Gallery.open(tmp_path / "g").embedder_name == tiny_clip_embedder.name
    gallery.set_default_embedder(second_embedder.name)
    assert Gallery.open(tmp_path / "g").embedder_name == second_embedder.name
    rows = {row["embedder"]: row for row in gallery_contents(tmp_path / "g")}
    assert rows[second_embedder.name]["default"] and not rows[tiny_clip_embedder.name]["default"]
    assert all(row["images"] == 6 for row in rows.values())


def test_several_embedders_and_no_record_opens_the_largest_and_says_so(tmp_path, photo_folder, tiny_clip_embedder,
                                                                       second_embedder, caplog):
    """A gallery from before defaults were recorded: opening works (never AmbiguousEmbedderError), takes
    the embedder with the most images, not whichever is listed first, and logs which one it took."""
    legacy = Gallery.open(tmp_path / "g", second_embedder)
    legacy.add(photo_folder, progress=False)
    Gallery.open(tmp_path / "g", tiny_clip_embedder).add(photo_folder / "a", progress=False)
    from pictrieve.vectorstore.records import RECORDS_COLLECTION

    chroma_client(legacy).delete_collection(RECORDS_COLLECTION)
    with caplog.at_level("WARNING"):
        assert Gallery.open(tmp_path / "g").embedder_name == second_embedder.name  # 6 images beat 4
    assert "records no default" in caplog.text and "set_default_embedder" in caplog.text


def test_json_records_round_trip_and_opening_never_writes(tmp_path, photo_folder, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    assert gallery.get_json("needle-trust") is None
    gallery.add(photo_folder, progress=False)
    gallery.put_json("needle-trust", {"weights": [0.5, 0.5]})
    gallery.put_json("needle-trust", {"weights": [0.7, 0.3]})
    assert Gallery.open(tmp_path / "g").get_json("needle-trust") == {"weights": [0.7, 0.3]}

    database = tmp_path / "g" / "chroma.sqlite3"
    before = (database.stat().st_mtime_ns, database.read_bytes())
    reopened = Gallery.open(tmp_path / "g", hnsw={"ef_search": 50})
    reopened.search_text("a red square", k=2)
    reopened.get_json("needle-trust")
    assert (database.stat().st_mtime_ns, database.read_bytes()) == before
