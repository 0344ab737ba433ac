"""Gallery code paths with a tiny random-weight open_clip model (real Chroma, real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import make_photo
from pictrieve.vectorstore.errors import DimensionMismatchError, EmptyGalleryError, GalleryError
from pictrieve.vectorstore.gallery import Gallery, chroma_collection
from pictrieve.vectorstore.chroma_store import path_id


def test_add_then_search_by_text_image_and_vector(tmp_path, photo_folder, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add(photo_folder, progress=False)
    assert (report.indexed, report.unchanged, report.failed, report.total) == (6, 0, [], 6)
    assert gallery.count() == 6

    target = photo_folder / "a" / "img2.png"
    by_image = gallery.search_image(target, k=3)
    assert by_image[0].path == str(target) and by_image[0].rank == 1
    assert by_image[0].score == pytest.approx(1.0, abs=1e-4)
    assert [h.rank for h in by_image] == [1, 2, 3]
    assert by_image[0].score >= by_image[1].score >= by_image[2].score

    hits = gallery.search_text("a red square", k=10)
    assert len(hits) == 6  # k is capped at the gallery size
    vector = gallery.embeddings([path_id(target)])[0]
    assert gallery.search_vector(vector, k=1)[0].id == path_id(target)


def test_metadata_and_captions_from_sidecars(tmp_path, photo_folder, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    txt, jsonl, none = gallery.get(
        [path_id(photo_folder / "a" / "img0.png"), path_id(photo_folder / "b" / "img4.jpg"),
         path_id(photo_folder / "a" / "img1.png")]
    )
    assert txt.captions == ["a red square", "something else"]
    assert jsonl.captions == ["noise photo", "second"]
    assert none.captions == []
    meta = none.metadata
    assert meta["path"] == str(photo_folder / "a" / "img1.png")
    assert meta["width"] == 48 and meta["height"] == 40 and len(meta["sha256"]) == 64


def test_persists_across_processes(tmp_path, photo_folder, tiny_clip_embedder, tiny_clip_name):
    location = tmp_path / "g"
    gallery = Gallery.open(location, tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    expected = gallery.search_image(photo_folder / "b" / "img5.jpg", k=3)
    script = (
        "import json, sys; from pictrieve import Gallery\n"
        "g = Gallery.open(sys.argv[1])\n"  # no embedder given: the gallery's own is reused
        "hits = g.search_image(sys.argv[2], k=3)\n"
        "print(json.dumps({'name': g.embedder_name, 'count': g.count(), 'ids': [h.id for h in hits]}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(location), str(photo_folder / "b" / "img5.jpg")],
        capture_output=True, text=True, check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"name": tiny_clip_name, "count": 6, "ids": [h.id for h in expected]}


def test_reindex_skips_unchanged_and_reembeds_changed(tmp_path, photo_folder, tiny_clip_embedder, monkeypatch):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    changed = make_photo(photo_folder / "a" / "img1.png", seed=99)
    touched = photo_folder / "a" / "img3.png"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10_000_000_000))
    before = gallery.embeddings([path_id(changed)])

    report = gallery.add(photo_folder, progress=False)
    assert (report.indexed, report.unchanged) == (1, 5)  # the touched file is recognised by its hash
    assert not np.allclose(gallery.embeddings([path_id(changed)]), before)

    monkeypatch.setattr(tiny_clip_embedder, "embed_preprocessed", _fail)
    assert gallery.add(photo_folder, progress=False).unchanged == 6  # nothing is embedded again


def _fail(batch):
    raise AssertionError("unchanged files must not be embedded again")


def test_interrupted_index_resumes(tmp_path, photo_folder, tiny_clip_embedder, monkeypatch):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    real = tiny_clip_embedder.embed_preprocessed
    calls = []

    def interrupted(batch):
        calls.append(len(batch))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(batch)

    monkeypatch.setattr(tiny_clip_embedder, "embed_preprocessed", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gallery.add(photo_folder, batch_size=2, progress=False)
    assert gallery.count() == 2  # the first batch was committed before the interruption
    monkeypatch.setattr(tiny_clip_embedder, "embed_preprocessed", real)

    report = Gallery.open(tmp_path / "g", tiny_clip_embedder).add(photo_folder, batch_size=2, progress=False)
    assert (report.indexed, report.unchanged) == (4, 2)
    assert gallery.count() == 6


def test_small_batches_index_every_photo_past_the_first_prefetch_window(tmp_path, tiny_clip_embedder):
    """Decoding runs ahead by 4 x batch_size photos and refills as each is taken: with batch_size=1
    the window is 4, so photos 5 to 7 are indexed only if the window refills."""
    photos = tmp_path / "photos"
    for i in range(7):
        make_photo(photos / f"{i}.png", seed=i)
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add(photos, batch_size=1, progress=False)
    assert (report.indexed, report.failed, report.total) == (7, [], 7)
    assert sorted(Path(gallery.get([id_])[0].path).name for id_ in gallery.ids()) == [f"{i}.png" for i in range(7)]


def test_corrupt_files_are_skipped_and_reported(tmp_path, photo_folder, tiny_clip_embedder):
    (photo_folder / "a" / "broken.jpg").write_bytes(b"not an image at all")
    good = photo_folder / "b" / "img5.jpg"
    (photo_folder / "b" / "truncated.jpg").write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add(photo_folder, progress=False)
    assert report.indexed == 6 and report.total == 8
    assert sorted(Path(f.path).name for f in report.failed) == ["broken.jpg", "truncated.jpg"]
    assert all("not a readable image" in f.error for f in report.failed)


def test_sync_drops_deleted_files(tmp_path, photo_folder, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    (photo_folder / "a" / "img2.png").unlink()
    assert gallery.sync() == [str(photo_folder / "a" / "img2.png")]
    assert gallery.count() == 5


def test_sync_from_python_is_guarded_against_an_unplugged_folder(tmp_path, photo_folder, tiny_clip_embedder):
    """The guard is in Gallery.sync itself, so a Python caller gets it too (issue 19.1)."""
    from pictrieve.vectorstore.errors import LargeRemovalError, MissingFoldersError

    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    (photo_folder / "b").rename(photo_folder / "b-unplugged")
    with pytest.raises(MissingFoldersError, match="nothing removed") as refused:
        gallery.sync()
    assert str(photo_folder / "b") in str(refused.value) and gallery.count() == 6
    assert sorted(Path(p).name for p in gallery.sync(dry_run=True)) == ["img4.jpg", "img5.jpg"]
    with pytest.raises(LargeRemovalError, match="2 of 6"):  # a third of the gallery
        gallery.sync(allow_missing_folders=True)
    assert gallery.count() == 6
    assert len(gallery.sync(allow_missing_folders=True, allow_large=True)) == 2 and gallery.count() == 4


def test_dimension_mismatch_is_a_clear_error(tmp_path, photo_folder, tiny_clip_embedder):
    Gallery.open(tmp_path / "g", tiny_clip_embedder).add(photo_folder, progress=False)

    class Narrower:
        name, dim = tiny_clip_embedder.name, 16

    with pytest.raises(DimensionMismatchError, match="stores 32-d vectors.*16-d"):
        Gallery.open(tmp_path / "g", Narrower())


def test_empty_and_missing_galleries_say_what_to_do(tmp_path, tiny_clip_embedder):
    with pytest.raises(EmptyGalleryError, match=r"gallery.add\(PHOTOS\)"):
        Gallery.open(tmp_path / "empty", tiny_clip_embedder).search_text("a dog")
    with pytest.raises(GalleryError, match="no gallery at"):
        Gallery.open(tmp_path / "missing", tiny_clip_embedder, create=False)
    with pytest.raises(ValueError, match="empty text query"):
        Gallery.open(tmp_path / "empty", tiny_clip_embedder).search_text("  ")


def test_a_missing_source_is_reported(tmp_path, tiny_clip_embedder):
    with pytest.raises(FileNotFoundError, match="no such file, folder or glob"):
        Gallery.open(tmp_path / "g", tiny_clip_embedder).add(tmp_path / "nope", progress=False)


def test_embeddings_and_ids_share_one_order(tmp_path, photo_folder, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    ids = gallery.ids()
    reversed_ids = ids[::-1]
    np.testing.assert_allclose(gallery.embeddings(reversed_ids), gallery.embeddings()[::-1])
    gallery.update_metadata(ids[:1], [{"quality": 0.5}])
    assert gallery.get(ids[:1])[0].metadata["quality"] == 0.5
    with pytest.raises(KeyError):
        gallery.get(["no-such-id"])


def test_a_file_that_cannot_be_read_is_reported_not_fatal(tmp_path, photo_folder, tiny_clip_embedder, monkeypatch):
    """A permission error raised in a decode worker is one reported failure, not the end of the run.
    (As root ``chmod 0`` does not stop reads, so the error is raised in the worker on purpose; the
    command-line test in test_cli_faults.py drops root's override instead.)"""
    from pictrieve.vectorstore import indexing as ingest

    locked = photo_folder / "a" / "img3.png"
    real_hash = ingest.file_sha256

    def hash_or_refuse(path, *args, **kwargs):
        if path == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_hash(path, *args, **kwargs)

    monkeypatch.setattr(ingest, "file_sha256", hash_or_refuse)
    report = Gallery.open(tmp_path / "g", tiny_clip_embedder).add(photo_folder, progress=False)
    assert [f.path for f in report.failed] == [str(locked)] and "Permission denied" in report.failed[0].error
    assert report.indexed == report.total - 1 == 5


def test_the_indexing_bar_moves_while_a_batch_embeds(tmp_path, tiny_clip_name, capfd, monkeypatch):
    """A full batch embeds a few images a call, each call noted on the bar ('embedded N'), and stores
    the same vectors as one call per batch (a batch of 32 on a CPU sat 13 s silent behind the bar).
    A slow call keeps the step; a quick one (a GPU) doubles it."""
    import re

    import numpy as np

    from pictrieve.vectorstore import indexing

    step = indexing.EMBED_PROGRESS_STEP
    count = 2 * step + 3
    for i in range(count):
        make_photo(tmp_path / "photos" / f"{i}.png", seed=i)

    def notes_when(quick_call_s: float, name: str) -> tuple[list[int], Gallery]:
        monkeypatch.setattr(indexing, "EMBED_QUICK_CALL_S", quick_call_s)
        gallery = Gallery.open(tmp_path / name, tiny_clip_name)
        gallery.add(tmp_path / "photos", batch_size=count)  # one batch
        return sorted({int(n) for n in re.findall(r"embedded (\d+)", capfd.readouterr().err)}), gallery

    assert notes_when(0.0, "slow")[0] == [step, 2 * step, count]  # every call counts as slow: 8, 8, 3
    notes, shown = notes_when(float("inf"), "quick")  # every call is quick: 8, then the 11 left
    assert notes == [step, count]

    quiet = Gallery.open(tmp_path / "quiet", tiny_clip_name)
    quiet.add(tmp_path / "photos", batch_size=count, progress=False)  # one call for the batch
    ids = sorted(chroma_collection(shown).get()["ids"])
    assert len(ids) == count and ids == sorted(chroma_collection(quiet).get()["ids"])
    stored = []
    for gallery in (shown, quiet):
        got = chroma_collection(gallery).get(ids=ids, include=["embeddings"])
        by_id = dict(zip(got["ids"], got["embeddings"]))
        stored.append(np.asarray([by_id[id_] for id_ in ids]))
    assert np.abs(stored[0] - stored[1]).max() < 1e-5


def test_indexing_shows_the_model_loading_before_the_first_image(tmp_path, tiny_clip_name, capfd):
    """A bar names the embedder while it loads, before the indexing bar, for a new gallery and for a
    reopened one (a CLIP model takes tens of seconds to load on a CPU: the terminal sat silent)."""
    import re

    for i in range(3):
        make_photo(tmp_path / "a" / f"{i}.png", seed=i)
        make_photo(tmp_path / "b" / f"{i}.png", seed=10 + i)
    Gallery.open(tmp_path / "g", tiny_clip_name).add(tmp_path / "a")
    Gallery.open(tmp_path / "g").add(tmp_path / "b")  # reopened: its embedder is made on first use
    err = capfd.readouterr().err
    order = [m.group(0) for m in re.finditer(rf"loading {re.escape(tiny_clip_name)}|indexing", err)]
    collapsed = [word for i, word in enumerate(order) if i == 0 or word != order[i - 1]]
    assert collapsed == [f"loading {tiny_clip_name}", "indexing"] * 2, err
