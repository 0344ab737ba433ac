"""``pictrieve index DIR --watch`` run for real, in a subprocess, on copies of flickr8k-dev photos.

Every check waits for the gallery (read from this process, as any reader would) to show the change, with a
generous timeout, never for a fixed time. One watcher runs for the module on a folder where each test works
in its own sub-folder; the tests that stop, restart or remove the watched folder start their own.
"""

from __future__ import annotations

import math
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.mcp import HttpServer
from helpers.watcher import Watcher, copy_photos
from pictrieve.tools.core.images import file_sha256
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.watching import MAX_WAIT_SECONDS

pytestmark = pytest.mark.slow


def mark_vector(watcher: Watcher, path: Path) -> np.ndarray:
    """Store a made-up vector in the record of ``path`` (same metadata): a vector the embedder never makes, so
    a record that carries it later was moved, not embedded again."""
    view = watcher.view()
    meta = view.metadata_of([path_id(path)])[path_id(path)]
    rng = np.random.default_rng(7)
    marker = rng.normal(size=watcher.vector(path).shape[0]).astype(np.float32)
    marker /= np.linalg.norm(marker)
    view.upsert([path_id(path)], marker[None, :], [meta])
    return marker


@pytest.fixture(scope="module")
def watched(tmp_path_factory, flickr_dir, tiny_clip_name):
    """A watcher on a folder that starts with ten photos (in base/), indexed by its catch-up."""
    root = tmp_path_factory.mktemp("watch")
    copy_photos(flickr_dir, root / "photos" / "base", 0, 10)
    watcher = Watcher(root / "photos", root / "gallery", tiny_clip_name)
    watcher.wait_ready()
    assert watcher.view().count() == 10, watcher.out
    yield watcher
    assert watcher.stop() == 0, watcher.err


def test_a_new_photo_is_indexed(watched, flickr_dir):
    [photo] = copy_photos(flickr_dir, watched.folder / "new", 20, 1)
    record = watched.wait_for(lambda: watched.record(photo), "the new photo's record")
    assert record["path"] == str(photo) and record["name"] == photo.name and record["folder"] == str(photo.parent)
    assert record["sha256"] == file_sha256(photo)


def test_a_changed_photo_is_read_and_embedded_again(watched, flickr_dir):
    [photo] = copy_photos(flickr_dir, watched.folder / "change", 21, 1)
    watched.wait_for(lambda: watched.record(photo), "the photo's first record")
    before = watched.vector(photo)
    other = sorted((flickr_dir / "images").iterdir())[22]
    shutil.copyfile(other, photo)  # new content at the same path
    new_hash = file_sha256(photo)
    record = watched.wait_for(lambda: (r := watched.record(photo)) and r["sha256"] == new_hash and r,
                              "the changed photo's new record")
    assert record["size"] == photo.stat().st_size
    assert not np.allclose(watched.vector(photo), before)  # embedded again


def test_a_moved_photo_keeps_its_vector_under_its_new_path(watched, flickr_dir):
    [photo] = copy_photos(flickr_dir, watched.folder / "move", 23, 1)
    watched.wait_for(lambda: watched.record(photo), "the photo's first record")
    marker = mark_vector(watched, photo)
    target = watched.folder / "move" / "renamed" / "holiday.jpg"
    target.parent.mkdir()
    photo.rename(target)
    record = watched.wait_for(lambda: watched.record(target), "the moved photo's record")
    assert record["path"] == str(target) and record["name"] == "holiday.jpg"
    assert record["folder"] == str(target.parent)
    np.testing.assert_allclose(watched.vector(target), marker, atol=1e-6)  # followed, not embedded
    watched.wait_for(lambda: watched.record(photo) is None, "the old path's record gone")
    watched.wait_for(lambda: any("moved 1" in line for line in watched.batches()), "the batch line of the move")


def test_a_deleted_photo_is_forgotten(watched, flickr_dir):
    [photo] = copy_photos(flickr_dir, watched.folder / "delete", 24, 1)
    watched.wait_for(lambda: watched.record(photo), "the photo's record")
    photo.unlink()
    watched.wait_for(lambda: watched.record(photo) is None, "the deleted photo forgotten")
    watched.wait_for(lambda: any("forgotten 1" in line for line in watched.batches()), "the batch line")


def _added(batch_line: str) -> int:
    """How many photos a batch line of the watcher says it added."""
    return int(batch_line.split(" added ")[1].split(",")[0])


def test_a_burst_is_a_few_batches_and_a_file_being_written_waits(watched, flickr_dir):
    """500 photos copied one after another are indexed in a few batches, not 500; a photo still being written
    meanwhile is not read until its writer is done."""
    slow = watched.folder / "burst-slow" / "slow.jpg"
    slow.parent.mkdir()
    content = sorted((flickr_dir / "images").iterdir())[30].read_bytes()
    written = threading.Event()
    done_writing = threading.Event()

    def write_slowly() -> None:  # half at once, then a few bytes every 0.1 s until told to finish
        with open(slow, "wb") as out:
            out.write(content[: len(content) // 2])
            out.flush()
            written.set()
            at = len(content) // 2
            while not done_writing.is_set() and at < len(content) - 64:
                out.write(content[at:at + 16])
                out.flush()
                at += 16
                time.sleep(0.1)
            out.write(content[at:])

    writer = threading.Thread(target=write_slowly)
    writer.start()
    try:
        written.wait(10)
        before = len(watched.batches())
        burst = watched.folder / "burst"
        burst.mkdir()
        copy_started = time.monotonic()
        for photo in sorted((flickr_dir / "images").iterdir()):  # a card reader's pace: 500 files over 5 s or more
            shutil.copy2(photo, burst / photo.name)
            time.sleep(0.01)
        copy_seconds = time.monotonic() - copy_started
        photos = sorted(burst.iterdir())
        view = watched.view()
        watched.wait_for(lambda: len(view.metadata_of([path_id(p) for p in photos])) == len(photos),
                         "all 500 photos indexed")
        # a batch's line is printed after its records are written (and a little more work): wait for the lines too
        watched.wait_for(lambda: sum(_added(line) for line in watched.batches()[before:]) >= len(photos),
                         "the burst's batch lines")
        assert watched.record(slow) is None and str(slow) not in watched.err  # neither read nor reported
        batches = [line for line in watched.batches()[before:] if _added(line)]  # before the slow photo can be read
    finally:
        done_writing.set()
        writer.join()
    # The slow writer keeps the folders from going quiet, so a batch is cut each MAX_WAIT_SECONDS while files
    # arrive: a few batches for however long the copy took on this machine (1-2 quiet), never one a file.
    assert 1 <= len(batches) <= 2 + math.ceil(copy_seconds / MAX_WAIT_SECONDS), (copy_seconds, batches)
    assert sum(_added(line) for line in batches) == len(photos)
    record = watched.wait_for(lambda: watched.record(slow), "the slow photo once written")
    assert record["sha256"] == file_sha256(slow)


def test_the_server_sees_a_photo_copied_in(watched, flickr_dir, tmp_path):
    """A running `pictrieve mcp` (streamable HTTP) finds a photo copied into the watched folder, by itself. The
    search is limited to the photo's folder (a filter applied in the store), so no other photo can take its place
    (the burst above copied every flickr8k-dev photo, this one's twin included)."""
    import asyncio

    server = HttpServer(["-g", str(watched.gallery), "--state-dir", str(tmp_path / "state")])
    folder = watched.folder / "served"
    try:
        async def paths_in_folder() -> list[str] | None:
            async with server.session() as session:
                result = await session.call_tool("search_images", {"query": "a photo", "k": 5, "folder": str(folder)})
            if result.isError and "Error finding id" in server.output():
                # Known, not this test's subject: a filtered query in the moment between another process's write
                # and this server reopening its index (it looks every 0.5 s) fails in Chroma ("Error finding id")
                # instead of answering without the new photo. Asked again, it answers.
                return None
            assert not result.isError, (result.content, server.output()[-3000:])
            return [hit["path"] for hit in result.structuredContent["hits"]]

        assert asyncio.run(paths_in_folder()) == []  # not there yet
        [photo] = copy_photos(flickr_dir, folder, 40, 1)
        watched.wait_for(lambda: asyncio.run(paths_in_folder()) == [str(photo)], "the server finding the copied photo")
    finally:
        server.stop()


def test_a_removed_folder_keeps_its_photos(tmp_path, flickr_dir, tiny_clip_name):
    """The watched folder disappearing (an unplugged drive) forgets nothing, neither then nor when it comes back
    without them; one line says so."""
    photos = tmp_path / "photos"
    kept = copy_photos(flickr_dir, photos / "trip", 50, 6) + copy_photos(flickr_dir, photos, 56, 2)
    watcher = Watcher(photos, tmp_path / "gallery", tiny_clip_name)
    try:
        watcher.wait_ready()
        assert watcher.view().count() == 8
        shutil.rmtree(photos)
        watcher.wait_for(lambda: f"{photos} is gone" in watcher.err, "the line about the folder gone")
        [back] = copy_photos(flickr_dir, photos, 60, 1)  # the folder back, without the old photos
        watcher.wait_for(lambda: watcher.record(back), "a photo of the folder that came back")
        view = watcher.view()
        assert len(view.metadata_of([path_id(p) for p in kept])) == len(kept), watcher.out
        assert not any("forgotten" in line and "forgotten 0" not in line for line in watcher.out.splitlines())
        assert watcher.err.count("is gone") == 1
    finally:
        assert watcher.stop() == 0, watcher.err


def test_a_restart_catches_up_and_a_stop_loses_nothing(tmp_path, flickr_dir, tiny_clip_name):
    """SIGTERM in the middle of a burst stops cleanly; what changed while nothing watched (added, changed,
    moved, deleted) and what the stop left are done by the next start's catch-up."""
    photos = tmp_path / "photos"
    first = copy_photos(flickr_dir, photos / "old", 70, 8)
    watcher = Watcher(photos, tmp_path / "gallery", tiny_clip_name)
    watcher.wait_ready()
    marker = mark_vector(watcher, first[0])
    burst = copy_photos(flickr_dir, photos / "burst", 100, 300)
    watcher.wait_for(lambda: watcher.view().count() > 8, "the burst's first batch written")
    assert watcher.stop() == 0, watcher.err
    assert "stopped" in watcher.err
    # while nothing watches: one photo moved, one changed, one deleted, one added
    moved = photos / "elsewhere" / "moved.jpg"
    moved.parent.mkdir()
    first[0].rename(moved)
    shutil.copyfile(sorted((flickr_dir / "images").iterdir())[450], first[1])
    changed_hash = file_sha256(first[1])
    first[2].unlink()
    [added] = copy_photos(flickr_dir, photos / "new", 460, 1)
    again = Watcher(photos, tmp_path / "gallery", tiny_clip_name)
    try:
        again.wait_ready()
        catch_up = next(line for line in again.out.splitlines() if "catch-up:" in line)
        assert "moved 1, forgotten 1" in catch_up, catch_up
        view = again.view()
        assert len(view.metadata_of([path_id(p) for p in burst])) == len(burst)  # the stop lost nothing
        assert again.record(added) and again.record(first[2]) is None and again.record(first[0]) is None
        assert again.record(first[1])["sha256"] == changed_hash
        np.testing.assert_allclose(again.vector(moved), marker, atol=1e-6)
    finally:
        assert again.stop() == 0, again.err


def test_polling_follows_a_new_photo_and_a_move(tmp_path, flickr_dir, tiny_clip_name):
    """--poll (network shares; also the fallback when inotify cannot start) finds the same changes."""
    photos = tmp_path / "photos"
    copy_photos(flickr_dir, photos, 80, 6)
    watcher = Watcher(photos, tmp_path / "gallery", tiny_clip_name, "--poll", "0.5")
    try:
        watcher.wait_ready()
        assert "(polling every 0.5 s)" in watcher.err
        [photo] = copy_photos(flickr_dir, photos / "new", 86, 1)
        watcher.wait_for(lambda: watcher.record(photo), "the new photo's record")
        marker = mark_vector(watcher, photo)
        target = photos / "moved.jpg"
        photo.rename(target)
        watcher.wait_for(lambda: watcher.record(target) and watcher.record(photo) is None, "the move followed")
        np.testing.assert_allclose(watcher.vector(target), marker, atol=1e-6)
    finally:
        assert watcher.stop() == 0, watcher.err
