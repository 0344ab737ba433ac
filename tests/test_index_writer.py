"""Indexing's writer (issue 40 item 3): Gallery.add writes each batch on one writer thread while the next batch
embeds, at most one batch in flight; a write's error reaches the caller; an interrupt keeps the batch handed to
the writer; touched files' metadata is refreshed in one call per batch, not one per photo."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from pictrieve.vectorstore import indexing
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.indexing import BatchWriter, PlannedFile, prepare_file
from pictrieve.vectorstore.chroma_store import path_id

SLOW_WRITE_S = 1.0
NEXT_EMBED_WAIT_S = 20.0


def slowed_upserts(monkeypatch, events: list[tuple[str, str, float]], fail_on: int | None = None,
                   until: threading.Event | None = None) -> None:
    """Gallery.upsert as it is, after a pause (or once ``until`` is set, at most :data:`NEXT_EMBED_WAIT_S`),
    noting when and on which thread each ran (and failing call ``fail_on``)."""
    real = Gallery.upsert

    def upsert(self, ids, vectors, metadatas):
        events.append(("write-start", threading.current_thread().name, time.monotonic()))
        if until is None:
            time.sleep(SLOW_WRITE_S)
        else:
            until.wait(NEXT_EMBED_WAIT_S)
        if fail_on is not None and sum(kind == "write-start" for kind, _, _ in events) == fail_on:
            raise RuntimeError("the disk is full")
        written = real(self, ids, vectors, metadatas)
        events.append(("write-end", threading.current_thread().name, time.monotonic()))
        return written

    monkeypatch.setattr(Gallery, "upsert", upsert)


def noted_embeds(monkeypatch, embedder, events: list[tuple[str, str, float]], embedded: threading.Event) -> None:
    real = embedder.embed_preprocessed

    def embed(batch):
        events.append(("embed", threading.current_thread().name, time.monotonic()))
        if sum(kind == "embed" for kind, _, _ in events) >= 2:
            embedded.set()
        return real(batch)

    monkeypatch.setattr(embedder, "embed_preprocessed", embed)


def photos(folder):
    return sorted(path for path in folder.rglob("img*") if path.suffix in {".png", ".jpg"})


def test_a_batch_embeds_while_the_one_before_it_is_written(tmp_path, photo_folder, tiny_clip_embedder, monkeypatch):
    monkeypatch.setattr(indexing, "WRITE_ROWS", 1)  # each model batch its own write
    events: list[tuple[str, str, float]] = []
    second_embed = threading.Event()  # the first write waits for it: written in the caller's turn, it never comes
    slowed_upserts(monkeypatch, events, until=second_embed)
    noted_embeds(monkeypatch, tiny_clip_embedder, events, second_embed)
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add(photo_folder, batch_size=2, progress=False)
    assert report.indexed == 6 and gallery.count() == 6
    writes = [event for event in events if event[0] == "write-start"]
    assert len(writes) == 3 and {name for _, name, _ in writes} == {"pictrieve-write_0"}
    kinds = [kind for kind, _, _ in events]
    first_end = kinds.index("write-end")
    assert kinds[:first_end].count("embed") == 2  # batch 2 embedded while batch 1 was being written
    for i, kind in enumerate(kinds):  # never two writes at once, never a third batch before the first is stored
        if kind == "write-start":
            assert kinds[i + 1:].index("write-end") < (kinds[i + 1:] + ["write-start"]).index("write-start")


def test_a_failed_background_write_stops_the_run_with_its_error(tmp_path, photo_folder, tiny_clip_embedder,
                                                              monkeypatch):
    monkeypatch.setattr(indexing, "WRITE_ROWS", 1)  # each model batch its own write
    events: list[tuple[str, str, float]] = []
    slowed_upserts(monkeypatch, events, fail_on=2)
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    with pytest.raises(RuntimeError, match="the disk is full"):
        gallery.add(photo_folder, batch_size=2, progress=False)
    assert gallery.count() == 2  # the batch written before the failure is kept
    monkeypatch.undo()
    report = Gallery.open(tmp_path / "g", tiny_clip_embedder).add(photo_folder, batch_size=2, progress=False)
    assert (report.indexed, report.unchanged) == (4, 2) and gallery.count() == 6


def test_an_interrupt_keeps_the_batch_handed_to_the_writer(tmp_path, photo_folder, tiny_clip_embedder, monkeypatch):
    events: list[tuple[str, str, float]] = []
    slowed_upserts(monkeypatch, events)
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.create()
    name = tiny_clip_embedder.name
    planned = [PlannedFile(str(path), path_id(path), [name]) for path in photos(photo_folder)]
    with pytest.raises(KeyboardInterrupt), gallery.writing():
        with BatchWriter([gallery], batch_size=3, background=True) as writer:
            for item in planned[:4]:
                writer.add(prepare_file(item, {name: tiny_clip_embedder}))
            raise KeyboardInterrupt  # a batch of 3 is being written (slowly), the 4th photo is queued
    assert gallery.count() == 3


def test_touched_files_are_refreshed_in_one_call_per_batch(tmp_path, photo_folder, tiny_clip_embedder, monkeypatch):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    for photo in photos(photo_folder):
        os.utime(photo, ns=(2_000_000_000, 2_000_000_000))  # the same content, a new modification time
    real, calls = Gallery.update_metadata, []

    def update_metadata(self, ids, metadatas):
        calls.append(len(ids))
        return real(self, ids, metadatas)

    monkeypatch.setattr(Gallery, "update_metadata", update_metadata)
    report = gallery.add(photo_folder, batch_size=4, progress=False)
    assert (report.indexed, report.unchanged) == (0, 6)
    assert calls == [4, 2]
    assert {item.metadata["mtime_ns"] for item in gallery.get([path_id(p) for p in photos(photo_folder)])} == {2_000_000_000}
    assert gallery.plan_index(photo_folder).todo == []


def test_a_first_index_asks_the_store_for_copies_only_once_it_holds_records(tmp_path, photo_folder,
                                                                           tiny_clip_embedder, monkeypatch):
    """Indexing into an empty collection looks no content hash up in the store (nothing stored to copy), yet a
    copy within the run and a copy of a stored photo in a later run are still copied, never embedded twice."""
    import shutil

    real, lookups = Gallery.find_content, []

    def find_content(self, sha256, *, other_than=None):
        lookups.append(sha256)
        return real(self, sha256, other_than=other_than)

    monkeypatch.setattr(Gallery, "find_content", find_content)
    shutil.copyfile(photo_folder / "a" / "img1.png", photo_folder / "b" / "twin.png")
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add(photo_folder, batch_size=2, progress=False)
    assert (report.indexed, report.copied, gallery.count(), lookups) == (7, 1, 7, [])

    shutil.copyfile(photo_folder / "a" / "img2.png", photo_folder / "b" / "later.png")
    report = gallery.add(photo_folder, batch_size=2, progress=False)
    assert (report.indexed, report.copied, gallery.count(), len(lookups)) == (1, 1, 8, 1)
    stored = gallery.embeddings([path_id(photo_folder / "a" / "img2.png"), path_id(photo_folder / "b" / "later.png")])
    assert np.allclose(stored[0], stored[1], atol=1e-6)


def test_the_in_memory_store_indexes_without_a_writer_thread(photo_folder, tiny_clip_embedder):
    """MemoryStore's write turn is a lock of the indexing thread: a writer thread waiting on it while that thread
    waits for the writer hung every in-memory index (seen in the full suite, test_method_contract's tiny store).
    Run in a thread with a deadline, so a regression fails here instead of hanging the run."""
    from pictrieve.vectorstore.memory_store import MemoryStore

    store = MemoryStore(tiny_clip_embedder)
    done = threading.Event()
    writer_threads: list[str] = []
    real = MemoryStore.upsert

    def upsert(self, *args, **kwargs):
        writer_threads.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    def index() -> None:
        MemoryStore.upsert = upsert
        try:
            store.add(photo_folder, progress=False)
        finally:
            MemoryStore.upsert = real
            done.set()

    threading.Thread(target=index, daemon=True).start()
    assert done.wait(120), "MemoryStore.add did not finish: its writes wait on the indexing thread's own lock"
    assert store.count() > 0 and writer_threads and not any(n.startswith("pictrieve-write") for n in writer_threads)


def test_small_model_batches_are_written_together_and_an_interrupt_keeps_them(tmp_path, photo_folder,
                                                                             tiny_clip_embedder, monkeypatch):
    """A Chroma upsert costs about as much for many records as for a few, so a gallery gathers embedded records
    into writes of WRITE_ROWS; an interrupt after some batches were embedded still writes them (the model's work
    is kept), while the files not yet embedded are left for the resumed run."""
    monkeypatch.setattr(indexing, "WRITE_ROWS", 4)
    monkeypatch.setattr(indexing, "WRITE_WAIT_S", float("inf"))  # written by count alone, however slow the machine
    real_upsert, writes = Gallery.upsert, []

    def upsert(self, ids, vectors, metadatas):
        writes.append(len(ids))
        return real_upsert(self, ids, vectors, metadatas)

    monkeypatch.setattr(Gallery, "upsert", upsert)
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    report = gallery.add(photo_folder, batch_size=1, progress=False)
    assert (report.indexed, gallery.count(), writes) == (6, 6, [4, 2])

    real_embed, embeds = tiny_clip_embedder.embed_preprocessed, []

    def interrupted(batch):
        embeds.append(len(batch))
        if len(embeds) == 3:
            raise KeyboardInterrupt
        return real_embed(batch)

    monkeypatch.setattr(tiny_clip_embedder, "embed_preprocessed", interrupted)
    writes.clear()
    again = Gallery.open(tmp_path / "h", tiny_clip_embedder)
    with pytest.raises(KeyboardInterrupt):
        again.add(photo_folder, batch_size=1, progress=False)
    assert (again.count(), writes) == (2, [2])  # the two embedded photos, gathered and not yet due, were written
    monkeypatch.setattr(tiny_clip_embedder, "embed_preprocessed", real_embed)
    report = again.add(photo_folder, batch_size=1, progress=False)
    assert (report.indexed, report.unchanged, again.count()) == (4, 2, 6)
