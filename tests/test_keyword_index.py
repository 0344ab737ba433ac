"""The keyword index of hybrid search kept up to date write by write (issue 30): BM25 scores equal to ``bm25s``'s
and to a fresh build after any mix of writes; a write of k records reads k; it survives restarts and torn
writes; deletes, metadata updates, raw collection writes and another process's writes are all seen. Real
embedded Chroma galleries holding synthetic vectors (no model needed)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from pictrieve.vectorstore import changes, filter_index, keywords
from pictrieve.vectorstore.atomic_files import write_atomically
from pictrieve.vectorstore.gallery import Gallery, chroma_client, chroma_collection
from pictrieve.vectorstore.changes import index_folder, position
from pictrieve.vectorstore.keywords import BM25_B, BM25_K1, INDEX_KIND, KeywordIndex, hybrid_search, keyword_index
from pictrieve.vectorstore.photo_filter import PhotoFilter

VOCABULARY = ["".join(chr(97 + (i * 7 + j) % 26) for j in range(3 + i % 4)) for i in range(40)]


def _document(rng: random.Random) -> list[str]:
    return [rng.choice(VOCABULARY[: rng.randint(1, 40)]) for _ in range(rng.randint(0, 8))]


def _lucene_bm25(documents: list[list[str]], terms: list[str]) -> list[float]:
    """Lucene's BM25, written out plainly (float64)."""
    n = len(documents)
    mean = sum(map(len, documents)) / n
    out = []
    for document in documents:
        score = 0.0
        for term in terms:
            df = sum(term in other for other in documents)
            tf = document.count(term)
            if tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf / (tf + BM25_K1 * (1 - BM25_B + BM25_B * len(document) / mean))
        out.append(score)
    return out


def test_records_without_words_count_wherever_they_are():
    for documents in ([["lisbon"], ["porto", "porto"], []], [[], []], [[], ["lisbon"], []]):
        index = KeywordIndex([str(n) for n in range(len(documents))], documents)
        assert len(index) == len(documents)
        expected = _lucene_bm25(documents, ["lisbon"])
        assert {r.id: round(r.score, 5) for r in index.rank("lisbon")} == \
            {str(n): round(score, 5) for n, score in enumerate(expected) if score > 0}


def test_an_index_changed_record_by_record_ranks_as_a_fresh_one_and_as_bm25s():
    rng = random.Random(0)
    documents = {f"id{i}": _document(rng) for i in range(300)}
    order = {id_: n for n, id_ in enumerate(documents)}
    first = list(documents)[:100]
    index = KeywordIndex(first, [documents[i] for i in first])
    index.update((i, documents[i], order[i]) for i in list(documents)[100:200])
    index.merge()
    index.update((i, documents[i], order[i]) for i in list(documents)[200:])
    for _ in range(60):  # rewritten records, in the base and among the recent ones
        id_ = rng.choice(list(documents))
        documents[id_] = _document(rng)
        index.update([(id_, documents[id_], order[id_])])
    for id_ in rng.sample(list(documents), 30):
        del documents[id_]
        index.remove([id_])
    ids = sorted(documents, key=order.get)
    fresh = KeywordIndex(ids, [documents[i] for i in ids])
    bm25s = None
    try:
        import bm25s  # the library this index replaced, where it is installed

        model = bm25s.BM25(k1=BM25_K1, b=BM25_B, backend="numpy")
        model.index([documents[i] for i in ids], show_progress=False)
    except ImportError:
        model = None
    for _ in range(150):
        terms = list(dict.fromkeys(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 3))))
        ranked = index.rank(" ".join(terms))
        assert ranked == fresh.rank(" ".join(terms))  # ids, scores, tie-aware ranks and order, flags
        plain = dict(zip(ids, _lucene_bm25([documents[i] for i in ids], terms)))
        assert {r.id for r in ranked} == {id_ for id_, score in plain.items() if score > 0}
        assert all(math.isclose(r.score, plain[r.id], rel_tol=1e-6) for r in ranked)
        assert [(-r.score, order[r.id]) for r in ranked] == sorted((-r.score, order[r.id]) for r in ranked)
        if model is not None:
            known = [t for t in terms if t in model.vocab_dict]
            expected = np.asarray(model.get_scores(known)) if known else np.zeros(len(ids))
            assert {r.id: r.score for r in ranked} == {ids[row]: float(expected[row])
                                                      for row in np.flatnonzero(expected > 0)}  # to the last bit
    assert len(index) == len(fresh) == len(documents) and index.ids == ids


class SyntheticEmbedder:
    """Only a name and a dimension: vectors are written directly."""

    name = "test:synthetic-8"
    dim = 8


def _meta(folder: str, name: str, **extra) -> dict:
    return {"path": f"/photos/{folder}/{name}", "folder": f"/photos/{folder}", "name": name, **extra}


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, SyntheticEmbedder.dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture
def gallery(tmp_path):
    gallery = Gallery.open(tmp_path / "g", SyntheticEmbedder())
    folders = ["lisbon", "porto", "berlin_2019", "tokyo"]
    metas = [_meta(folders[i % 4], f"IMG_{i:04d}.jpg", place="Lisbon, Lisbon, PT" if i % 7 == 0 else "")
             for i in range(60)]
    for i in range(0, 60, 3):  # lists are kept apart by Chroma: read from there too
        metas[i] |= {"captions": ["A dog on the beach", f"a dog, number {i}"], "caption": "A dog on the beach"}
    metas[5]["photo_text"] = "Rua Augusta tram stop"
    gallery.upsert([f"r{i}" for i in range(60)], _vectors(60), metas)
    keywords._cache.clear()
    yield gallery
    keywords._cache.clear()


@pytest.fixture
def reads(monkeypatch, gallery):
    """The ids whose records the keyword index reads from the gallery (what an update costs)."""
    seen: list[str] = []
    real = keywords.read_fields

    def counted(*args, **kwargs):
        found = real(*args, **kwargs)
        seen.extend(found or ())
        return found

    monkeypatch.setattr(keywords, "read_fields", counted)
    return seen


def _saved_folder(gallery) -> str:
    """Where the gallery's keyword index is saved: in the (test's) cache, not in the gallery's folder."""
    folder = index_folder(gallery.location, position(gallery.location, gallery.collection_name)[0], INDEX_KIND)
    assert str(folder).startswith(os.environ["PICTRIEVE_CACHE"])
    return str(folder)


def _same_as_a_fresh_build(gallery) -> None:
    fresh = KeywordIndex.from_records((item.id, item.metadata) for item in gallery.items())
    index = keyword_index(gallery)
    assert len(index) == len(fresh) == gallery.count()
    for query in ("lisbon", "porto 2019", "berlin", "tokyo lisbon", "img", "venice", "0042", "pt", "dog beach",
                  "dog number 12", "tram"):
        assert index.rank(query) == fresh.rank(query), query


def test_a_write_of_k_photos_reads_those_k(gallery, reads):
    _same_as_a_fresh_build(gallery)
    assert len(reads) == 60  # the first build reads every record
    reads.clear()
    gallery.upsert(["new"], _vectors(1, 1), [_meta("venice", "gondola.jpg")])
    assert [r.id for r in keyword_index(gallery).rank("venice gondola")] == ["new"]
    assert reads == ["new"]
    reads.clear()
    gallery.update_metadata(["r1"], [{"folder": "/photos/venice"}])  # metadata only, as OCR's text is written
    assert {r.id for r in keyword_index(gallery).rank("venice")} == {"new", "r1"}
    assert reads == ["r1"]
    reads.clear()
    gallery.delete(["new", "r2"])
    assert [r.id for r in keyword_index(gallery).rank("venice")] == ["r1"]
    assert reads == []  # deletes are read from Chroma's log, no record is
    chroma_collection(gallery).upsert(ids=["raw"], embeddings=_vectors(1, 2).tolist(), metadatas=[_meta("venice", "x.jpg")])
    assert {r.id for r in keyword_index(gallery).rank("venice")} == {"r1", "raw"}  # no write counter moved
    _same_as_a_fresh_build(gallery)


def test_another_process_writing_and_deleting_is_seen(gallery, reads):
    _same_as_a_fresh_build(gallery)
    reads.clear()
    code = ("import sys, numpy as np; from pictrieve.vectorstore.gallery import Gallery\n"
            "class E: name = 'test:synthetic-8'; dim = 8\n"
            "g = Gallery.open(sys.argv[1], E())\n"
            "g.upsert(['far'], np.eye(8, dtype=np.float32)[:1], [{'path': '/photos/reykjavik/a.jpg'}])\n"
            "g.delete(['r3', 'r7'])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code, gallery.location], check=True, env=env, timeout=300)
    assert [r.id for r in keyword_index(gallery).rank("reykjavik")] == ["far"]
    assert sorted(reads) == ["far"]
    _same_as_a_fresh_build(gallery)


def test_the_saved_index_survives_a_restart_and_a_torn_write(gallery, reads):
    _same_as_a_fresh_build(gallery)
    gallery.upsert(["new"], _vectors(1, 1), [_meta("venice", "gondola.jpg")])
    gallery.delete(["r0"])  # a record of the saved base, taken out
    keyword_index(gallery)
    folder = _saved_folder(gallery)
    (state,) = [name for name in os.listdir(folder) if name.endswith(".json")]
    assert json.loads(open(f"{folder}/{state}").read())["recent"][0][0] == "new"
    keywords._cache.clear()  # a new process
    reads.clear()
    assert [r.id for r in keyword_index(gallery).rank("venice")] == ["new"]
    assert reads == []  # read from the gallery's folder, not from its records
    _same_as_a_fresh_build(gallery)
    reads.clear()
    # A crash while saving left a half-written file beside the good one: the good one is read.
    with open(f"{folder}/.{state}.123.tmp", "w") as handle:
        handle.write('{"version": 1, "base": "')
    keywords._cache.clear()
    assert [r.id for r in keyword_index(gallery).rank("venice")] == ["new"] and reads == []
    # A state file that cannot be read is rebuilt from the records, never trusted.
    with open(f"{folder}/{state}", "w") as handle:
        handle.write('{"version": 1, "base": "gone.npz", "cur')
    keywords._cache.clear()
    _same_as_a_fresh_build(gallery)
    assert len(reads) == 60
    # So is a torn base.
    (base,) = [name for name in os.listdir(folder) if name.endswith(".npz")]
    with open(f"{folder}/{base}", "r+b") as handle:
        handle.truncate(200)
    keywords._cache.clear()
    reads.clear()
    _same_as_a_fresh_build(gallery)
    assert len(reads) == 60


def test_a_save_that_fails_half_way_leaves_the_file_it_replaces(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("good")

    def half(handle):
        handle.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_atomically(path, half)
    assert path.read_text() == "good" and os.listdir(tmp_path) == ["state.json"]


def test_recent_records_merge_into_the_base_and_rank_the_same(gallery, monkeypatch):
    monkeypatch.setattr(keywords, "MERGE_AT", 5)
    _same_as_a_fresh_build(gallery)
    for n in range(12):
        gallery.upsert([f"m{n}", f"r{n}"], _vectors(2, 10 + n), [_meta("madrid", f"{n}.jpg"), _meta("rome", "x.jpg")])
        if n % 3 == 0:
            gallery.delete([f"m{n - 1}"])
        index = keyword_index(gallery)
        assert index.pending < 5 + 2
    folder = _saved_folder(gallery)
    assert len([name for name in os.listdir(folder) if name.endswith(".npz")]) == 1  # old bases are removed
    _same_as_a_fresh_build(gallery)
    keywords._cache.clear()
    _same_as_a_fresh_build(gallery)


def test_a_collection_made_again_is_indexed_again(gallery):
    _same_as_a_fresh_build(gallery)
    with gallery.writing():
        chroma_client(gallery).delete_collection(gallery.collection_name)
    again = Gallery.open(gallery.location, SyntheticEmbedder())
    again.upsert(["only"], _vectors(1, 5), [_meta("lisbon", "a.jpg")])
    assert [r.id for r in keyword_index(again).rank("lisbon")] == ["only"]


def test_a_gallery_restored_from_an_older_copy_is_indexed_again(gallery, tmp_path, monkeypatch):
    import shutil

    from pictrieve.vectorstore import filter_index
    from pictrieve.vectorstore.photo_filter import PhotoFilter

    monkeypatch.setattr(filter_index, "SAVE_AFTER", 1)  # the filter columns are saved after each change too

    _same_as_a_fresh_build(gallery)
    filter_index.passing_ids(gallery, PhotoFilter(folder="/photos/lisbon"))
    database = os.path.join(gallery.location, "chroma.sqlite3")
    shutil.copy(database, tmp_path / "backup.sqlite3")
    gallery.update_metadata(["r0"], [{"folder": "/photos/venice"}])
    gallery.upsert(["new"], _vectors(1, 1), [_meta("venice", "gondola.jpg")])
    assert {r.id for r in keyword_index(gallery).rank("venice")} == {"r0", "new"}  # saved beside the gallery
    assert "r0" not in filter_index.passing_ids(gallery, PhotoFilter(folder="/photos/lisbon"))
    keywords._cache.clear()
    filter_index._cache.clear()  # a new process, after the gallery's database was put back as it was
    shutil.copy(tmp_path / "backup.sqlite3", database)
    assert keyword_index(gallery).rank("venice") == []
    _same_as_a_fresh_build(gallery)
    assert "r0" in filter_index.passing_ids(gallery, PhotoFilter(folder="/photos/lisbon"))
    filter_index._cache.clear()


RAW_WRITER = ("import sys, chromadb\n"
              "collection = chromadb.PersistentClient(path=sys.argv[1]).get_collection(sys.argv[2])\n"
              "collection.add(ids=['raw'], embeddings=[[1.0] + [0.0] * 7],\n"
              "               metadatas=[{'path': '/photos/venice/gondola.jpg', 'folder': '/photos/venice'}])\n")
"""Another tool's write: a bare chromadb client in another process (no pictrieve, no write counter)."""


def _raw_write(gallery, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RAW_WRITER + "".join(extra), gallery.location, gallery.collection_name],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_a_writer_in_another_process_commits_while_a_first_build_reads(gallery, monkeypatch):
    """The first build reads Chroma's file in chunks, each its own short read: a writer in another process commits
    while the reader is held between two chunks (in one long read transaction, as before, it waited for the whole
    read). What was written meanwhile, a delete and an update of records already read included, is in the result."""
    monkeypatch.setattr(changes, "CHUNK_ROWS", 7)
    writes: list[subprocess.CompletedProcess] = []

    def write_once() -> None:  # the reader is paused here, holding no lock
        if not writes:
            writes.append(_raw_write(gallery, "collection.delete(ids=['r0'])\n",
                                     "collection.update(ids=['r1'], metadatas=[{'folder': '/photos/oslo'}])\n",
                                     timeout=60))

    monkeypatch.setattr(changes, "between_chunks", write_once)
    index = keyword_index(gallery)
    assert writes and writes[0].returncode == 0, writes and writes[0].stderr[-2000:]
    assert {r.id for r in index.rank("venice gondola")} == {"raw"}
    assert {r.id for r in index.rank("oslo")} == {"r1"} and "r0" not in index.known_ids()
    monkeypatch.setattr(changes, "between_chunks", None)
    _same_as_a_fresh_build(gallery)
    writes.clear()
    monkeypatch.setattr(changes, "between_chunks", write_once)
    gallery.delete(["raw"])
    filter_index._cache.clear()  # a process with no columns held nor saved: a first build, read in chunks
    monkeypatch.setattr(filter_index.FilterColumns, "load", classmethod(lambda cls, path: None))
    assert set(filter_index.passing_ids(gallery, PhotoFilter(folder="/photos/venice"))) == {"raw"}  # (written again)
    assert writes and writes[0].returncode == 0, writes[0].stderr[-2000:]


def test_a_running_reader_sees_a_bare_chroma_client_of_another_process(gallery):
    """A long-running reader (ui, mcp, serve) holds its keyword index and filter columns; a write by another tool
    moves no pictrieve counter, yet the next hybrid and filtered searches include it (the change feed's position
    is checked before a held index is used)."""
    query = np.eye(8, dtype=np.float32)[0]
    assert not [h for h in hybrid_search(gallery, "venice gondola", query, 5) if h.keyword_match]
    assert filter_index.passing_ids(gallery, PhotoFilter(folder="/photos/venice")) == []
    written = _raw_write(gallery)
    assert written.returncode == 0, written.stderr[-2000:]
    hits = hybrid_search(gallery, "venice gondola", query, 5)
    assert hits[0].id == "raw" and hits[0].keyword_match
    assert filter_index.passing_ids(gallery, PhotoFilter(folder="/photos/venice")) == ["raw"]
    assert [h.id for h in gallery.search_vector(query, 5, PhotoFilter(folder="/photos/venice"))] == ["raw"]
    filter_index._cache.clear()


def test_a_commit_in_progress_makes_a_read_wait_briefly_and_say_so(gallery, monkeypatch, caplog):
    """While another process's commit holds the database (an exclusive lock, held here on a second connection), a
    read of the change feed waits :data:`~pictrieve.vectorstore.changes.BUSY_SECONDS` per try, logs each retry and
    gives up after :data:`~pictrieve.vectorstore.changes.BUSY_TRIES` (the caller then reads through Chroma's API);
    once the commit is done it reads at once."""
    import logging
    import sqlite3

    monkeypatch.setattr(changes, "BUSY_SECONDS", 0.05)
    monkeypatch.setattr(changes, "BUSY_TRIES", 3)
    holder = sqlite3.connect(os.path.join(gallery.location, "chroma.sqlite3"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.INFO, logger="pictrieve.vectorstore.changes"):
            assert changes.position(gallery.location, gallery.collection_name) is None
            assert changes.snapshot(gallery.location, gallery.collection_name) is None
        retries = [r for r in caplog.records if "being written by another process" in r.getMessage()]
        assert len(retries) == 2 * (3 - 1) and all(r.levelno == logging.INFO for r in retries)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert changes.position(gallery.location, gallery.collection_name)[1] > 0
    assert len(changes.snapshot(gallery.location, gallery.collection_name).changed) == 60


def test_a_word_every_photo_carries_is_ranked_without_an_object_per_photo(monkeypatch):
    """Issue 40.4: the keyword side of a hybrid search keeps its ranking as arrays; only the photos the fusion
    reads become :class:`KeywordRank` objects (at 100k photos one object per match cost up to 140 ms idle,
    over a second under load: benchmarks/keyword_common_word.py). Each photo here says "dog" a different
    number of times, so no two scores tie."""
    from dataclasses import astuple

    from pictrieve.vectorstore import keywords

    index = keywords.KeywordIndex([f"p{i}" for i in range(300)], [["dog"] * (i + 1) for i in range(300)])
    expected = index.rank("dog")
    made = []

    class CountedRank(keywords.KeywordRank):
        def __init__(self, *args, **kwargs):
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(keywords, "KeywordRank", CountedRank)
    ranking = index.ranking("dog")
    assert len(ranking) == 300 and len(set(ranking.scores.tolist())) == 300 and not made
    cut = keywords._passing(None, ranking, None, 10)
    assert [r.id for r in cut] == [r.id for r in expected[:10]] and [r.rank for r in cut] == list(range(1, 11))
    assert len(made) == 10, len(made)
    assert astuple(ranking[3]) == astuple(expected[3]) and astuple(ranking[-1]) == astuple(expected[-1])
