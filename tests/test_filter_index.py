"""Filters found in numpy columns (issue 30, filtered search at 100k): the photos passing a PhotoFilter are exactly
those Chroma's ``where`` selects (``near``'s radius checked), filtered searches return what the store's filter
returned, and the columns follow every write (this process's, another's, deletes), survive a restart, and are
read again when their saved file is torn. Real embedded Chroma galleries holding synthetic vectors."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pictrieve.vectorstore import filter_index
from pictrieve.vectorstore.changes import position, read_metadata
from pictrieve.vectorstore.filter_index import columns_path, passing_ids
from pictrieve.vectorstore.gallery import Gallery, chroma_collection
from pictrieve.vectorstore.photo_filter import PhotoFilter

PLACES = [("Lisbon", "Lisbon", "PT", 38.72, -9.14), ("Porto", "Porto", "PT", 41.15, -8.61),
          ("Suva", "Central", "FJ", -18.14, 178.44), ("Taveuni", "Northern", "FJ", -16.8, -179.97)]
CAMERAS = [("Apple", "iPhone 12", "iPhone 12"), ("Canon", "Canon EOS R6", "Canon EOS R6")]
START = dt.datetime(2019, 1, 1, tzinfo=dt.timezone.utc)


class SyntheticEmbedder:
    name = "test:synthetic-8"
    dim = 8


def _record(rng: random.Random, i: int) -> dict:
    when = START + dt.timedelta(days=rng.randint(0, 3 * 365), seconds=rng.randint(0, 86399))
    meta = {"path": f"/p/{when:%Y-%m}/{i}.jpg", "folder": f"/p/{when:%Y-%m}", "name": f"{i}.jpg"}
    if rng.random() < 0.9:
        meta["taken_at_ts"] = int(when.timestamp())
        if rng.random() < 0.7:  # the camera's own clock (an older record has no taken_at_local_ts: read from this)
            local = when.astimezone(dt.timezone(dt.timedelta(hours=rng.choice([-8, -3, 0, 1, 5.5, 9, 13]))))
            meta.update(taken_at=local.isoformat(), taken_at_source=rng.choice(["exif", "exif", "file"]))
            if rng.random() < 0.5:
                meta["taken_at_local_ts"] = int(local.replace(tzinfo=dt.timezone.utc).timestamp())
    if rng.random() < 0.7:
        city, region, country, lat, lon = rng.choice(PLACES)
        lat, lon = lat + rng.uniform(-0.3, 0.3), lon + rng.uniform(-0.3, 0.3)
        lon = lon - 360 if lon > 180 else lon + 360 if lon < -180 else lon
        meta.update(gps_lat=lat, gps_lon=lon if rng.random() < 0.9 else round(lon),  # a few stored as ints
                    place=f"{city}, {region}, {country}", place_city=city, place_region=region, place_country=country)
    if rng.random() < 0.8:
        make, model, camera = rng.choice(CAMERAS)
        meta.update(camera_make=make, camera_model=model, camera=camera)
    return meta


def _vectors(n: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, SyntheticEmbedder.dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _filters(rng: random.Random) -> list[PhotoFilter]:
    edge = START + dt.timedelta(days=400)  # a photo taken at this very second: in "after", not in "before"
    found = [PhotoFilter(before=edge), PhotoFilter(after=edge, before=edge + dt.timedelta(days=1)), PhotoFilter(place="Nowhere"), PhotoFilter(camera="Apple"), PhotoFilter(place="FJ"),
             PhotoFilter(near=(-17.5, 179.9), radius_km=200.0),  # a box across the antimeridian
             PhotoFilter(near=(38.72, -9.14), radius_km=25.0), PhotoFilter(folder="/p/2020-06")]
    naive = START.replace(tzinfo=None) + dt.timedelta(days=400)
    found += [PhotoFilter(place="lisbon"), PhotoFilter(place="portugal"), PhotoFilter(place="fiji, north"),
              PhotoFilter(camera="iphone"), PhotoFilter(camera="canon eos"), PhotoFilter(folder="/P"),
              PhotoFilter(folder="2020-06"), PhotoFilter(after=naive, before=naive + dt.timedelta(days=20)),
              PhotoFilter(after=naive, before=naive + dt.timedelta(days=30), exif_dates_only=True)]
    for _ in range(25):
        start = START + dt.timedelta(days=rng.randint(0, 1000))
        found.append(PhotoFilter(
            after=start if rng.random() < 0.7 else None,
            before=start + dt.timedelta(days=rng.randint(1, 400)) if rng.random() < 0.6 else None,
            near=(lambda p: (p[3], p[4]))(rng.choice(PLACES)) if rng.random() < 0.3 else None,
            radius_km=rng.choice([5.0, 30.0, 80.0]),
            place=rng.choice(["Lisbon", "PT", "Northern", "Suva, Central, FJ", "por", "fiji"]) if rng.random() < 0.3
            else None,
            camera=rng.choice(["Canon", "iPhone 12", "Canon EOS R6", "apple"]) if rng.random() < 0.3 else None))
    return found


@pytest.fixture
def gallery(tmp_path):
    rng = random.Random(3)
    gallery = Gallery.open(tmp_path / "g", SyntheticEmbedder())
    records = [_record(rng, i) for i in range(400)]
    records[7]["taken_at_ts"] = int((START + dt.timedelta(days=400)).timestamp())
    gallery.upsert([f"r{i}" for i in range(400)], _vectors(400, 0), records)
    filter_index._cache.clear()
    yield gallery
    filter_index._cache.clear()


def _store_answer(gallery, photo_filter: PhotoFilter) -> set[str]:
    """What Chroma's own ``where`` selects, with ``near``'s radius checked: the filter as it ran before."""
    found = chroma_collection(gallery).get(where=photo_filter.where(), include=["metadatas"])
    return {id_ for id_, meta in zip(found["ids"], found["metadatas"]) if photo_filter.accepts(meta or {})}


def _store_search(gallery, vector, k: int, photo_filter: PhotoFilter) -> list[str]:
    found = chroma_collection(gallery).query(query_embeddings=[vector.tolist()], n_results=400, where=photo_filter.where(),
                                     include=["metadatas"])
    return [id_ for id_, meta in zip(found["ids"][0], found["metadatas"][0]) if photo_filter.accepts(meta or {})][:k]


def test_the_columns_pass_exactly_what_the_store_filter_passes(gallery):
    """The columns decide as :meth:`PhotoFilter.accepts` does on what Chroma's ``where`` keeps (a server's path)."""
    everything = gallery.metadata_of(gallery.ids())
    for photo_filter in _filters(random.Random(5)):
        expected = _store_answer(gallery, photo_filter)
        assert set(passing_ids(gallery, photo_filter)) == expected, photo_filter
        assert expected == {id_ for id_, meta in everything.items() if photo_filter.accepts(meta)}, photo_filter
    edge = START + dt.timedelta(days=400)
    assert "r7" in passing_ids(gallery, PhotoFilter(after=edge)) and "r7" not in passing_ids(gallery, PhotoFilter(before=edge))
    assert passing_ids(gallery, PhotoFilter(near=(-17.5, 179.9), radius_km=200.0))  # both sides of 180 degrees
    assert {m["place_city"] for m in gallery.metadata_of(passing_ids(gallery, PhotoFilter(
        near=(-17.5, 179.9), radius_km=200.0))).values()} == {"Suva", "Taveuni"}


@pytest.mark.parametrize("exact_max", [1000, 3])  # scored here, or searched by Chroma among the passing ids
def test_filtered_searches_return_what_the_store_filter_returned(gallery, monkeypatch, exact_max):
    monkeypatch.setattr(filter_index, "EXACT_MAX", exact_max)
    monkeypatch.setattr(filter_index, "COLUMN_EXACT_MAX", max(exact_max, 3))
    vectors = _vectors(6, 9)
    for photo_filter in _filters(random.Random(6))[:14]:
        for vector in vectors:
            hits = gallery.search_vector(vector, k=5, where=photo_filter)
            assert [h.id for h in hits] == _store_search(gallery, vector, 5, photo_filter), photo_filter
            assert all(abs(h.score - float(vector @ gallery.embeddings([h.id])[0])) < 1e-5 for h in hits)
    assert gallery.search_vector(vectors[0], k=5, where=PhotoFilter(place="Nowhere")) == []
    assert (gallery.location, gallery.collection_name) in filter_index._cache  # the columns answered


def test_every_write_is_seen_by_the_next_filtered_search(gallery):
    lisbon = PhotoFilter(place="Lisbon")
    before = set(passing_ids(gallery, lisbon))
    gallery.upsert(["new"], _vectors(1, 1), [{"path": "/p/x.jpg", "place_city": "Lisbon"}])
    assert set(passing_ids(gallery, lisbon)) == before | {"new"}
    moved = sorted(before)[0]
    gallery.update_metadata([moved], [{"place_city": "Porto", "place_region": "Porto", "place": "Porto, Porto, PT"}])
    gallery.delete([sorted(before)[1]])
    assert set(passing_ids(gallery, lisbon)) == (before | {"new"}) - set(sorted(before)[:2]) == _store_answer(gallery, lisbon)
    code = ("import sys, numpy as np; from pictrieve.vectorstore.gallery import Gallery\n"
            "class E: name = 'test:synthetic-8'; dim = 8\n"
            "g = Gallery.open(sys.argv[1], E())\n"
            "g.upsert(['far'], np.eye(8, dtype=np.float32)[:1], [{'path': '/q/a.jpg', 'camera': 'Leica M6'}])\n"
            "g.delete(['new'])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code, gallery.location], check=True, env=env, timeout=300)
    assert passing_ids(gallery, PhotoFilter(camera="Leica M6")) == ["far"]
    assert "new" not in passing_ids(gallery, lisbon)
    assert [h.id for h in gallery.search_vector(np.eye(8)[0], k=3, where=PhotoFilter(camera="Leica M6"))] == ["far"]


def test_saved_columns_survive_a_restart_and_a_torn_file_is_read_again(gallery, monkeypatch):
    camera = PhotoFilter(camera="Canon")
    expected = _store_answer(gallery, camera)
    assert set(passing_ids(gallery, camera)) == expected
    (saved,) = columns_path(gallery.location, gallery.collection_name,
                            position(gallery.location, gallery.collection_name)[0]).parent.glob("*.npz")
    gallery.upsert(["late"], _vectors(1, 2), [{"path": "/p/late.jpg", "camera": "Canon"}])  # after the save
    filter_index._cache.clear()  # a new process: the saved columns, then what was written since
    reads: list = []
    real = filter_index.read_fields
    monkeypatch.setattr(filter_index, "read_fields", lambda *args, **kw: reads.append(args[3:]) or real(*args, **kw))
    assert set(passing_ids(gallery, camera)) == expected | {"late"}
    assert len(reads) == 1 and len(reads[0][0]) == 1  # one record read, not 401
    with open(saved, "r+b") as handle:
        handle.truncate(100)
    filter_index._cache.clear()
    reads.clear()
    assert set(passing_ids(gallery, camera)) == expected | {"late"}
    assert reads == [(None,)]  # every record read again


def _slow_columns(gallery) -> filter_index.FilterColumns:
    """The columns read from every record, as a first filtered search read them before (issue 40: ~15 s at 100k)."""
    columns = filter_index.FilterColumns()
    columns.put(filter_index.read_fields(gallery.location, gallery.collection_name, filter_index.READ_KEYS))
    return columns


def _same_columns(found: filter_index.FilterColumns, slow: filter_index.FilterColumns) -> None:
    for photo_filter in _filters(random.Random(5)):
        assert set(found.passing(photo_filter)) == set(slow.passing(photo_filter)), photo_filter
    everything = PhotoFilter()
    ids, slow_ids = found.passing(everything), slow.passing(everything)
    assert sorted(ids) == sorted(slow_ids)
    for key in filter_index.TEXT_KEYS:
        assert sorted(zip(ids, found.values(key)), key=str) == sorted(zip(slow_ids, slow.values(key)), key=str)
    for key in filter_index.NUMBER_KEYS:
        mine = dict(zip(ids, found.numbers(key)))
        np.testing.assert_array_equal([mine[id_] for id_ in slow_ids], slow.numbers(key))


def test_each_write_turn_saves_the_columns_a_new_process_then_only_loads(gallery, monkeypatch):
    """Issue 40: the first filtered search of a new process read every record's filter fields (~15 s at 100k). Now
    the end of every write turn (indexing, a sync, an update) brings the columns up to date from what it wrote and
    saves them, so a new process loads them and reads no record; they equal the columns read from every record."""
    monkeypatch.setattr(filter_index, "SAVE_AFTER", 1)
    reads: list = []
    real = filter_index.read_fields
    monkeypatch.setattr(filter_index, "read_fields", lambda *args, **kw: reads.append(args[3:]) or real(*args, **kw))
    rng = random.Random(4)
    gallery.upsert([f"n{i}" for i in range(30)], _vectors(30, 5), [_record(rng, 1000 + i) for i in range(30)])
    gallery.update_metadata(["r3", "n2"], [{"place_city": "Porto", "camera": "Leica M6"}, {"taken_at_ts": 0}])
    with gallery.writing():  # one turn of several writes: brought up to date once, at its end
        gallery.delete(["r4", "n5"])
        gallery.upsert(["r6"], _vectors(1, 6), [{"path": "/p/r6.jpg", "folder": "/q", "camera": "Canon"}])
        assert len(reads) == 2
    assert [len(rows) for (rows,) in reads] == [30, 2, 1]  # only the records each turn wrote were read
    for turn in ("written", "loaded"):
        filter_index._cache.clear()  # a new process
        reads.clear()
        columns = filter_index.filter_columns(gallery)
        assert reads == [], turn
        _same_columns(columns, _slow_columns(gallery))


def test_a_save_torn_at_the_end_of_a_write_turn_keeps_the_last_good_columns(gallery, monkeypatch):
    """A crash while the columns are saved leaves the columns saved before (never half a file); the write itself
    stands, and the next filtered search reads what was written since."""
    monkeypatch.setattr(filter_index, "SAVE_AFTER", 1)
    location, name = gallery.location, gallery.collection_name
    path = columns_path(location, name, position(location, name)[0])
    good = path.read_bytes()
    real_savez = np.savez

    def torn(handle, **arrays):
        real_savez(handle, **arrays)
        handle.truncate(handle.tell() // 2)
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", torn)
    gallery.upsert(["torn"], _vectors(1, 7), [{"path": "/p/torn.jpg", "camera": "Leica M6"}])
    monkeypatch.setattr(np, "savez", real_savez)
    assert path.read_bytes() == good and not list(path.parent.glob(".*.tmp"))
    filter_index._cache.clear()  # a new process
    assert "torn" in filter_index.filter_columns(gallery).passing(PhotoFilter(camera="Leica M6"))
    _same_columns(filter_index.filter_columns(gallery), _slow_columns(gallery))


def _vector_reads(monkeypatch) -> list[str]:
    """The ids whose vectors are read from Chroma (not from the vectors saved beside the filter columns)."""
    read: list[str] = []
    real = filter_index.stored_vectors
    monkeypatch.setattr(filter_index, "stored_vectors", lambda collection, ids, *a: read.extend(ids) or real(collection, ids, *a))
    return read


def _vector_file(gallery) -> Path:
    location, name = gallery.location, gallery.collection_name
    folder = columns_path(location, name, position(location, name)[0]).parent
    (found,) = [path for path in folder.glob("*.vectors-*") if not path.name.startswith(".")]
    return found


def test_a_new_process_scores_a_filtered_search_from_the_saved_vectors(gallery, monkeypatch):
    """Issue 40: a new process's first filtered search loaded Chroma's vector index to score a few thousand photos.
    The vectors are saved beside the filter columns: a new process scores from them and reads none from Chroma, with
    the hits (ids, order, cosines) the store's own filtered search gives, also for more passing photos than
    EXACT_MAX (scored here while the columns hold their vectors)."""
    monkeypatch.setattr(filter_index, "EXACT_MAX", 3)
    read = _vector_reads(monkeypatch)
    vectors = _vectors(4, 11)
    filter_index._cache.clear()  # a new process
    for photo_filter in _filters(random.Random(7))[:12]:
        for vector in vectors:
            hits = gallery.search_vector(vector, k=5, where=photo_filter)
            assert [h.id for h in hits] == _store_search(gallery, vector, 5, photo_filter), photo_filter
            assert all(abs(h.score - float(vector @ gallery.embeddings([h.id])[0])) < 1e-5 for h in hits)
    assert read == []
    assert len(passing_ids(gallery, PhotoFilter(camera="Canon"))) > 3  # more than EXACT_MAX, still scored here


def test_vectors_written_deleted_or_re_embedded_elsewhere_are_never_scored_stale(gallery, monkeypatch):
    """A photo re-embedded, added or deleted by another process (after this one, and a new one, loaded the saved
    vectors) is scored with its new vector by the next filtered search: a record the change feed reports as written
    is read again, never taken from the saved vectors."""
    monkeypatch.setattr(filter_index, "SAVE_AFTER", 10**6)  # the saved vectors stay behind the writes
    canon = PhotoFilter(camera="Canon")
    query = _vectors(1, 12)[0]
    gallery.search_vector(query, k=5, where=canon)  # this process holds the saved vectors
    target = gallery.search_vector(query, k=5, where=canon)[-1].id
    away = -query  # re-embedded away from the query: it must leave the top 5
    closest = query  # a new photo right on the query: it must come first
    code = ("import sys, json, numpy as np; from pictrieve.vectorstore.gallery import Gallery\n"
            "class E: name = 'test:synthetic-8'; dim = 8\n"
            "g = Gallery.open(sys.argv[1], E())\n"
            "meta = g.metadata_of([sys.argv[2]])[sys.argv[2]]\n"
            "v = np.asarray(json.loads(sys.argv[3]), dtype=np.float32)\n"
            "g.upsert([sys.argv[2]], v[:1], [meta])\n"
            "g.upsert(['closest'], v[1:], [{'path': '/p/closest.jpg', 'camera': 'Canon'}])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code, gallery.location, target,
                    json.dumps([away.tolist(), closest.tolist()])], check=True, env=env, timeout=300)
    for process in ("this one", "a new one"):
        if process == "a new one":
            filter_index._cache.clear()
        hits = gallery.search_vector(query, k=5, where=canon)
        assert [h.id for h in hits] == _store_search(gallery, query, 5, canon), process
        assert hits[0].id == "closest" and target not in [h.id for h in hits], process
    subprocess.run([sys.executable, "-c", "import sys; from pictrieve.vectorstore.gallery import Gallery\n"
                    "class E: name = 'test:synthetic-8'; dim = 8\n"
                    "Gallery.open(sys.argv[1], E()).delete(['closest'])", gallery.location], check=True, env=env,
                   timeout=300)
    hits = gallery.search_vector(query, k=5, where=canon)
    assert [h.id for h in hits] == _store_search(gallery, query, 5, canon) and "closest" not in [h.id for h in hits]


@pytest.mark.parametrize("damage", ["bytes changed", "cut short", "missing", "not a vector file"])
def test_damaged_saved_vectors_are_never_trusted(gallery, monkeypatch, damage):
    """A vector file changed on disk, cut short, gone or replaced is not used: the search reads the vectors from
    Chroma and answers as the store does."""
    path = _vector_file(gallery)
    if damage == "bytes changed":  # same size, a few rows of other numbers
        data = bytearray(path.read_bytes())
        data[-200:-100] = bytes(100)
        path.write_bytes(bytes(data))
    elif damage == "cut short":
        with open(path, "r+b") as handle:
            handle.truncate(path.stat().st_size // 2)
    elif damage == "missing":
        path.unlink()
    else:
        path.write_bytes(b"not numpy at all")
    filter_index._cache.clear()  # a new process
    read = _vector_reads(monkeypatch)
    for vector in _vectors(6, 13):
        for photo_filter in (PhotoFilter(camera="Canon"), PhotoFilter(place="PT"), PhotoFilter(folder="/p")):
            hits = gallery.search_vector(vector, k=5, where=photo_filter)
            assert [h.id for h in hits] == _store_search(gallery, vector, 5, photo_filter), (damage, photo_filter)
            assert all(abs(h.score - float(vector @ gallery.embeddings([h.id])[0])) < 1e-5 for h in hits)
    assert read  # read from Chroma instead


def test_hits_records_and_count_read_from_the_database_file_are_chromas(gallery):
    """A search scored from the filter columns reads its hits' records, and ``count`` its number, from the gallery's
    database file (Chroma loads the whole vector index on a collection's first read): what they read is what
    Chroma's ``get`` and ``count`` give, lists, flags and numbers alike, after updates and deletes."""
    extra = {"captions": ["a dog", "the dog runs", "a dog"], "scores": [3, 1, 2], "ratios": [0.5, 0.25],
             "flagged": True, "off": False, "zero": 0, "real": 1.5, "empty_text": "", "camera": "Canon"}
    gallery.upsert(["rich"], _vectors(1, 14), [{"path": "/p/rich.jpg", **extra}])
    gallery.update_metadata(["r1"], [{"camera": "Canon", "captions": ["one", "two"]}])
    chroma_collection(gallery).upsert(ids=["bare"], embeddings=_vectors(1, 15).tolist())  # no metadata at all
    gallery.delete(["r2"])
    ids = chroma_collection(gallery).get(include=[])["ids"]
    mine = read_metadata(gallery.location, gallery.collection_name, ids + ["nowhere"])
    got = chroma_collection(gallery).get(ids=ids, include=["metadatas"])
    assert json.dumps(mine, sort_keys=True) == json.dumps(dict(zip(got["ids"], got["metadatas"])), sort_keys=True)
    assert mine["rich"] == {"path": "/p/rich.jpg", **extra} and mine["bare"] is None and "nowhere" not in mine
    assert gallery.count() == chroma_collection(gallery).count() == 401
    query = _vectors(1, 14)[0]
    hits = gallery.search_vector(query, k=3, where=PhotoFilter(camera="Canon"))
    assert hits[0].id == "rich" and hits[0].metadata == {"path": "/p/rich.jpg", **extra}


def test_each_save_appends_what_it_read_and_a_file_mostly_stale_is_written_anew(gallery, monkeypatch):
    """A 100k gallery's vectors are 154 MB: a save appends only the vectors read since the last one (new photos, photos
    re-embedded) to the same file, and the columns' file names each record's row; once rows no record names are half
    the file, it is written anew and the old one removed. A new process scores from what was saved, reading nothing
    from Chroma, with the store's own hits."""
    monkeypatch.setattr(filter_index, "SAVE_AFTER", 1)
    first = _vector_file(gallery)
    size = first.stat().st_size
    row = 8 * 4  # float32 rows of the 8-d test vectors
    gallery.upsert([f"a{i}" for i in range(5)], _vectors(5, 16), [{"path": f"/p/a{i}.jpg", "camera": "Canon"}
                                                                 for i in range(5)])
    assert _vector_file(gallery) == first and first.stat().st_size == size + 5 * row
    with open(first, "ab") as handle:  # an append cut short by a crash: rows the columns' file never named
        handle.write(b"\x7f" * 101)  # more than the one row appended next
    meta = gallery.metadata_of(["r3"])["r3"]
    gallery.upsert(["r3"], _vectors(1, 17), [meta])  # re-embedded: its new vector appended where the junk was
    assert _vector_file(gallery) == first and first.stat().st_size == size + 6 * row
    read = _vector_reads(monkeypatch)
    query = _vectors(1, 17)[0]
    for turn in ("appended", "written anew"):
        filter_index._cache.clear()  # a new process
        for photo_filter in (PhotoFilter(camera="Canon"), PhotoFilter(folder="/p")):
            hits = gallery.search_vector(query, k=5, where=photo_filter)
            assert [h.id for h in hits] == _store_search(gallery, query, 5, photo_filter), (turn, photo_filter)
        assert gallery.search_vector(query, k=1, where=PhotoFilter(folder="/p"))[0].id == "r3"
        assert read == [], turn
        if turn == "appended":  # re-embed most photos: the file would be mostly rows no record names
            ids = [f"r{i}" for i in range(250)]
            metas = gallery.metadata_of(ids)
            gallery.upsert(ids, _vectors(250, 18), [metas[id_] for id_ in ids])
            query = _vectors(250, 18)[3]
            assert _vector_file(gallery) != first and not first.exists()
            assert _vector_file(gallery).stat().st_size == 405 * row  # 405 records, one row each
