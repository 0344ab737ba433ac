"""Every store keeps the :class:`~pictrieve.vectorstore.store.ImageStore` contract: the same assertions run on
each store of ``helpers.stores.STORES`` (Chroma's :class:`Gallery` and the exact in-memory store).

Vectors written by hand (unit vectors along axes, or known mixtures) make the expected order exact, so an
approximate index and brute force must agree; metadata written by hand checks every ``where`` operator the
photo filters use.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from helpers import make_photo
from helpers.stores import STORES, open_store

from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.filter_explain import explain_filter
from pictrieve.vectorstore.errors import DimensionMismatchError, EmptyGalleryError, GalleryError, ImageNotFoundError
from pictrieve.vectorstore.errors import QueryError
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.photo_filter import PhotoFilter
from pictrieve.vectorstore.core import ImageWriter
from pictrieve.vectorstore.store import ImageStore

JUNE = int(dt.datetime(2024, 6, 10, 12, tzinfo=dt.timezone.utc).timestamp())
JULY = int(dt.datetime(2024, 7, 10, 12, tzinfo=dt.timezone.utc).timestamp())


@pytest.fixture(params=STORES)
def store(request, tmp_path, tiny_clip_embedder):
    return open_store(request.param, tmp_path / "gallery", tiny_clip_embedder)


def axis(dim: int, i: int, lean: float = 0.0) -> np.ndarray:
    """The unit vector along axis ``i``, leaning ``lean`` towards axis 0 (then normalised)."""
    vector = np.zeros(dim, np.float32)
    vector[i] = 1.0
    vector[0] += lean
    return vector / np.linalg.norm(vector)


@pytest.fixture
def written(store):
    """Six hand-made records: vectors along axes 1..6, metadata for every filter."""
    dim = store.embedder.dim
    ids = [f"id{i}" for i in range(1, 7)]
    metadatas = [{"path": f"/photos/{'june' if i <= 3 else 'july'}/p{i}.jpg", "n": i, "tag": "ab"[i % 2],
                  "folder": f"/photos/{'june' if i <= 3 else 'july'}", "taken_at_ts": JUNE if i <= 3 else JULY,
                  "gps_lat": 48.85 + 0.01 * i, "gps_lon": 2.35 if i != 2 else 20.0,
                  "place_city": "Paris" if i % 3 else "Lyon", "captions": [f"photo number {i}"]}
                 for i in range(1, 7)]
    assert store.upsert(ids, np.stack([axis(dim, i) for i in range(1, 7)]), metadatas) == 6
    return ids


def _photo(when: str, source: str = "exif", *, local: bool = True, **fields) -> dict:
    """Metadata as indexing writes it for a photo taken at ``when`` (ISO 8601); ``local=False``: a record indexed
    before ``taken_at_local_ts`` was stored."""
    moment = dt.datetime.fromisoformat(when)
    meta = {"taken_at": when, "taken_at_ts": int(moment.timestamp()), "taken_at_source": source, **fields}
    if local:
        meta["taken_at_local_ts"] = int(moment.replace(tzinfo=dt.timezone.utc).timestamp())
    return meta


LISBON = {"place": "Lisbon, Lisbon, PT", "place_city": "Lisbon", "place_region": "Lisbon", "place_country": "PT",
          "gps_lat": 38.7167, "gps_lon": -9.1333}


@pytest.fixture
def placed(store):
    """Four phone photos as indexing stores them: two in Lisbon (an iPhone at 00:00 local on June 13, a Pixel 7 at
    23:30 local on June 12, the latter an older record without ``taken_at_local_ts``), one in Tokyo (a Canon at
    08:00 local on June 12, still June 11 in UTC), and a screenshot dated by its file."""
    dim = store.embedder.dim
    metadatas = [
        _photo("2023-06-13T00:00:00+01:00", path="/photos/Trips/Lisbon/a1.jpg", folder="/photos/Trips/Lisbon",
               camera="Apple iPhone 13 Pro", camera_make="Apple", camera_model="iPhone 13 Pro", **LISBON),
        _photo("2023-06-12T23:30:00+01:00", local=False, path="/photos/Trips/Lisbon/a2.jpg",
               folder="/photos/Trips/Lisbon", camera="Google Pixel 7", camera_make="Google",
               camera_model="Pixel 7", **LISBON),
        _photo("2023-06-12T08:00:00+09:00", path="/photos/tokyo/a3.jpg", folder="/photos/tokyo",
               camera="Canon EOS R6", camera_make="Canon", camera_model="Canon EOS R6", place="Tokyo, Tokyo, JP",
               place_city="Tokyo", place_region="Tokyo", place_country="JP", gps_lat=35.6895, gps_lon=139.6917),
        _photo("2023-06-12T10:00:00+00:00", "file", path="/photos/screens/a4.png", folder="/photos/screens"),
    ]
    ids = ["a1", "a2", "a3", "a4"]
    store.upsert(ids, np.stack([axis(dim, i) for i in range(1, 5)]), metadatas)
    return ids


JUNE_12 = {"after": "2023-06-12", "before": "2023-06-13"}


@pytest.mark.parametrize("options, expected", [
    ({"place": "lisbon"}, {"a1", "a2"}),
    ({"place": "LISBON"}, {"a1", "a2"}),
    ({"place": "lis"}, {"a1", "a2"}),  # the start of a word
    ({"place": "portugal"}, {"a1", "a2"}),  # a country by name
    ({"place": "PT"}, {"a1", "a2"}),  # by code
    ({"place": "prt"}, {"a1", "a2"}),  # by ISO alpha-3 code
    ({"place": "Lisbon, Portugal"}, {"a1", "a2"}),  # each comma part must match
    ({"place": "Lisbon, Japan"}, set()),
    ({"place": "japan"}, {"a3"}),
    ({"place": "isbon"}, set()),  # inside a word is no match
    ({"place": "jp"}, {"a3"}),
    ({"place": "li"}, set()),  # two letters that are a code (Liechtenstein) mean the country, never "Lisbon"
    ({"camera": "iphone 1"}, set()),  # under three letters, whole words only: "1" is not "13"
    ({"camera": "iphone"}, {"a1"}),
    ({"camera": "google pixel 7"}, {"a2"}),
    ({"camera": "pixel"}, {"a2"}),
    ({"camera": "canon eos"}, {"a3"}),
    ({"camera": "pro iphone"}, set()),  # words in their order
    ({"folder": "/PHOTOS/trips"}, {"a1", "a2"}),  # that folder and those inside it, case aside
    ({"folder": "/photos"}, {"a1", "a2", "a3", "a4"}),
    ({"folder": "/photos/trip"}, set()),  # a path matches whole folder names
    ({"folder": "trips/lisbon"}, {"a1", "a2"}),  # a relative path that is no folder here: folder names in a row
    ({"folder": "photos/nope"}, set()),
    # Calendar dates in each photo's own local time: June 12 there, whatever the UTC date.
    (JUNE_12, {"a2", "a3", "a4"}),
    ({**JUNE_12, "exif_dates_only": True}, {"a2", "a3"}),  # the screenshot has only its file's date
    ({"after": "2023-06-13"}, {"a1"}),
    ({"before": "2023-06-12T09:00:00"}, {"a3"}),  # a time without a zone: the photo's clock
    ({"after": "2023-06-12T23:00:00+00:00"}, {"a1"}),  # a time with a zone: instants (a2 is 22:30 UTC)
    ({"place": "lisbon", "camera": "pixel", **JUNE_12}, {"a2"}),
])
def test_text_and_dates_match_as_people_write_them(store, placed, options, expected):
    """Both stores decide by one rule (the filter columns for Chroma, :meth:`PhotoFilter.accepts` in memory)."""
    where = PhotoFilter.parse(**options)
    query = axis(store.embedder.dim, 1, lean=0.1)
    assert {hit.id for hit in store.search_vector(query, k=10, where=where)} == expected
    assert set(store.metadata_where(placed, where)) == expected
    assert explain_filter(store, where).passing == len(expected)


@pytest.mark.parametrize("options, message", [
    ({"place": "Paris"}, "0 photos pass place 'Paris'; places here: Lisbon PT (2), Tokyo JP (1); 1 photo without one"),
    ({"camera": "nikon"}, "0 photos pass camera 'nikon'; cameras here: Apple iPhone 13 Pro (1), Canon EOS R6 (1), "
                          "Google Pixel 7 (1); 1 photo without one"),
    ({"folder": "photos/nope"}, "0 photos pass folder 'photos/nope' (no such folder on disk); folders here: "
                                "/photos/Trips/Lisbon (2), /photos/screens (1), /photos/tokyo (1)"),
    ({"near": "41.15,-8.61", "radius_km": 50}, "0 photos pass within 50 km of 41.15,-8.61; the nearest photo is "
                                               "274 km away (Lisbon PT); 1 photo without a GPS position"),
    ({"after": "2024-01-01"}, "0 photos pass taken on or after 2024-01-01; photos here were taken 2023-06-12 .. "
                              "2023-06-13 (1 photo dated by its file)"),
    ({"before": "2023-06-12", "exif_dates_only": True},
     "0 photos pass taken before 2023-06-12 (EXIF dates only); photos here were taken 2023-06-12 .. 2023-06-13; "
     "1 photo dated only by its file is left out (exif_dates_only)"),
    ({"place": "lisbon", "camera": "canon"}, "each filter passes photos on its own (place 'lisbon': 2, camera "
                                             "'canon': 1), but no photo passes them all together"),
    ({"place": "Paris", "camera": "nikon", "after": "2023-06-12"},
     "0 photos pass place 'Paris'; places here: Lisbon PT (2), Tokyo JP (1); 1 photo without one; 0 photos pass "
     "camera 'nikon'; cameras here: Apple iPhone 13 Pro (1), Canon EOS R6 (1), Google Pixel 7 (1); 1 photo "
     "without one"),
    ({"place": "lisbon"}, "2 photos of 4 pass the filters"),
])
def test_an_empty_filter_says_which_condition_left_nothing(store, placed, options, message):
    where = PhotoFilter.parse(**options)
    explanation = explain_filter(store, where)
    assert explanation.message == message
    assert explanation.empty == (not message.startswith("2 photos"))
    assert explanation.total == 4 and explanation.to_json()["message"] == message


def test_an_empty_gallery_says_so(store):
    assert explain_filter(store, PhotoFilter(place="Lisbon")).message == "the gallery has no photos"


@pytest.fixture
def written_odd(store, written):
    """``written`` and two records Chroma and Python disagree on: ``id7`` lacks ``tag`` and ``n`` (Chroma's ``$ne``
    and ``$nin`` match a record without the key, chroma-core/chroma#4316) and ``id8`` holds ``n=True`` (Chroma
    keeps bools apart from ints, where Python says ``True == 1``)."""
    dim = store.embedder.dim
    odd = [{"path": "/photos/misc/p7.jpg", "folder": "/photos/misc"},
           {"path": "/photos/misc/p8.jpg", "folder": "/photos/misc", "n": True}]
    assert store.upsert(["id7", "id8"], np.stack([axis(dim, 7), axis(dim, 8)]), odd) == 2
    return written + ["id7", "id8"]


def test_both_protocols_are_implemented(store):
    assert isinstance(store, ImageStore) and isinstance(store, ImageWriter)
    assert isinstance(store.location, str) and store.embedder_name and store.collection_name


def test_a_new_store_is_empty_and_searching_it_says_so(store):
    assert store.count() == 0 and store.ids() == [] and store.metadata_of(["x"]) == {}
    assert store.get_json("anything") is None
    with pytest.raises(EmptyGalleryError):
        store.search_vector(axis(store.embedder.dim, 1), k=3)
    with pytest.raises(EmptyGalleryError):
        store.rank_ids(axis(store.embedder.dim, 1)[None], k=3)


def test_records_read_back_in_one_order(store, written):
    assert store.count() == 6 and sorted(store.ids()) == written
    assert [item.id for item in store.items()] == store.ids()
    items = store.get(["id3", "id1"])
    assert [item.id for item in items] == ["id3", "id1"] and items[0].path == "/photos/june/p3.jpg"
    assert items[0].metadata["n"] == 3 and store.captions("id3") == ["photo number 3"]
    vectors = store.embeddings(["id2", "id5"])
    assert vectors.dtype == np.float32 and vectors.shape == (2, store.embedder.dim)
    np.testing.assert_allclose(vectors, np.stack([axis(store.embedder.dim, 2), axis(store.embedder.dim, 5)]), atol=1e-6)
    everything = store.embeddings()
    assert np.allclose(everything[store.ids().index("id4")], axis(store.embedder.dim, 4), atol=1e-6)
    assert set(store.metadata_of(["id1", "nope"])) == {"id1"}
    with pytest.raises(ImageNotFoundError) as unknown:  # a KeyError too, as before
        store.get(["nope"])
    assert isinstance(unknown.value, KeyError) and "nope" in str(unknown.value)


def test_search_ranks_by_cosine_exactly(store, written):
    dim = store.embedder.dim
    query = axis(dim, 4) + 0.5 * axis(dim, 2) + 0.25 * axis(dim, 6)
    hits = store.search_vector(query, k=3)
    assert all(isinstance(hit, ImageHit) for hit in hits)
    assert [hit.id for hit in hits] == ["id4", "id2", "id6"] and [hit.rank for hit in hits] == [1, 2, 3]
    expected = query @ np.stack([axis(dim, 4), axis(dim, 2), axis(dim, 6)]).T / np.linalg.norm(query)
    np.testing.assert_allclose([hit.score for hit in hits], expected, atol=1e-5)
    assert hits[0].path == "/photos/july/p4.jpg" and hits[0].metadata["n"] == 4
    assert all(hit.relevant is not None for hit in hits)
    ranked = store.rank_ids(np.stack([query, axis(dim, 1)]), k=2)
    assert [[id_ for id_, _ in row] for row in ranked] == [["id4", "id2"], ["id1", ranked[1][1][0]]]
    assert ranked[0][0][1] == pytest.approx(hits[0].score, abs=1e-5) and ranked[1][0][1] == pytest.approx(1.0, abs=1e-5)
    assert len(store.search_vector(query, k=50)) == 6


@pytest.mark.parametrize("where, expected", [
    ({"n": {"$gte": 5}}, {"id5", "id6"}),
    ({"n": {"$lt": 2}}, {"id1"}),
    ({"tag": "a"}, {"id2", "id4", "id6"}),
    ({"tag": {"$eq": "b"}}, {"id1", "id3", "id5"}),
    ({"tag": {"$ne": "b"}}, {"id2", "id4", "id6", "id7", "id8"}),  # a record without the key passes $ne
    ({"tag": {"$nin": ["b"]}}, {"id2", "id4", "id6", "id7", "id8"}),  # and $nin
    ({"n": {"$in": [1, 6]}}, {"id1", "id6"}),  # True is not 1
    ({"n": {"$nin": [1, 2, 3, 4]}}, {"id5", "id6", "id7", "id8"}),
    ({"n": True}, {"id8"}),
    ({"n": {"$ne": 1}}, {"id2", "id3", "id4", "id5", "id6", "id7", "id8"}),
    ({"n": {"$gt": 0}}, {"id1", "id2", "id3", "id4", "id5", "id6"}),  # a bool is not a number
    ({"n": 1.0}, {"id1"}),  # but an int equals its float
    ({"$and": [{"tag": "a"}, {"n": {"$lte": 4}}]}, {"id2", "id4"}),
    ({"$or": [{"n": 1}, {"place_city": "Lyon"}]}, {"id1", "id3", "id6"}),
    ({"missing_key": "x"}, set()),
    (PhotoFilter(before=dt.datetime(2024, 7, 1, tzinfo=dt.timezone.utc)), {"id1", "id2", "id3"}),
    (PhotoFilter(after=dt.datetime(2024, 7, 1, tzinfo=dt.timezone.utc), place="Lyon"), {"id6"}),
    (PhotoFilter(folder="/photos/july"), {"id4", "id5", "id6"}),
    (PhotoFilter(near=(48.85, 2.35), radius_km=5), {"id1", "id3", "id4"}),  # id5 is 5.6 km away, id2 far east
])
def test_filters_apply_in_the_store(store, written_odd, where, expected):
    """``k`` photos that pass come back when there are ``k`` (never a top-k cut afterwards); the expected sets are
    what Chroma (1.5.9) itself returns, so the in-memory store answers as Chroma does."""
    dim = store.embedder.dim
    query = axis(dim, 2, lean=0.1)
    if expected:
        hits = store.search_vector(query, k=len(expected), where=where)
        assert {hit.id for hit in hits} == expected
        assert len(store.search_vector(query, k=1, where=where)) == 1
    else:
        assert store.search_vector(query, k=3, where=where) == []
    assert set(store.metadata_where(written_odd, where)) == expected


def test_an_ordering_compares_numbers_only(store, written):
    """Chroma refuses ``$gt``/``$lt`` against a string; the in-memory store refuses it as well."""
    with pytest.raises(GalleryError):
        store.search_vector(axis(store.embedder.dim, 1), k=1, where={"tag": {"$gt": "a"}})


def test_writes_replace_merge_and_delete(store, written):
    dim = store.embedder.dim
    store.upsert(["id1"], axis(dim, 3)[None], [{"path": "/photos/moved.jpg", "n": 10}])
    moved = store.get(["id1"])[0].metadata  # the vector and the keys given are replaced, other keys kept (as Chroma)
    assert store.count() == 6 and moved["path"] == "/photos/moved.jpg" and moved["n"] == 10 and moved["tag"] == "b"
    assert {hit.id for hit in store.search_vector(axis(dim, 3), k=2)} == {"id1", "id3"}
    store.update_metadata(["id2"], [{"n": 20, "extra": "yes"}])
    merged = store.get(["id2"])[0].metadata
    assert merged["n"] == 20 and merged["extra"] == "yes" and merged["tag"] == "a"
    store.delete(["id2", "never-there"])
    assert store.count() == 5 and "id2" not in store.ids() and store.metadata_of(["id2"]) == {}
    assert store.upsert([], np.zeros((0, dim), np.float32), []) == 0


def test_bad_requests_are_gallery_errors(store, written):
    dim = store.embedder.dim
    with pytest.raises(QueryError):
        store.search_vector(axis(dim, 1), k=0)
    with pytest.raises(QueryError):
        store.search_text("   ")
    with pytest.raises(DimensionMismatchError):
        store.search_vector(np.ones(dim + 1, np.float32), k=1)
    with pytest.raises(DimensionMismatchError):
        store.upsert(["x"], np.ones((1, dim + 1), np.float32), [{"path": "/x.jpg"}])
    with pytest.raises(ValueError):
        store.upsert(["x", "y"], np.ones((1, dim), np.float32), [{"path": "/x.jpg"}])
    with pytest.raises(GalleryError):  # Chroma's own refusal (a ValueError from its checks) comes out as a kind
        store.search_vector(axis(dim, 1), k=1, where={"n": {"$near": 1}})
    assert issubclass(QueryError, GalleryError) and issubclass(DimensionMismatchError, GalleryError)


def test_json_records_and_the_default_embedder(store, written):
    assert store.get_json("settings") is None
    store.put_json("settings", {"a": 1, "b": [1, 2]})
    assert store.get_json("settings") == {"a": 1, "b": [1, 2]}
    store.set_default_embedder()
    assert store.default_embedder == store.embedder_name
    assert store.relevance_cutoff().embedder == store.embedder_name


def test_views_share_ids_but_not_vectors(store, written):
    assert store.embedder_names == [store.embedder_name]
    other = store.with_embedder("offline")
    assert other.embedder_name == "offline" and other.count() == 0 and other.location == store.location
    views = store.views(["offline", store.embedder_name])
    assert [view.embedder_name for view in views] == [store.embedder_name, "offline"] and views[0] is store
    assert not store.tiles().exists()  # none made (`pictrieve tile`): NEEDLE ranks whole images


def test_photos_index_and_search_by_text_image_and_words(store, tmp_path):
    """Indexing writes through the store; text search with ``hybrid`` finds a photo by its own words."""
    folder = tmp_path / "photos"
    for i, caption in enumerate(["a zebra grazing", "a red bicycle", "two children play"]):
        make_photo(folder / f"p{i}.png", seed=i)
        (folder / f"p{i}.txt").write_text(caption + "\n")
    report = store.add(folder, progress=False)
    assert report.indexed == 3 and store.count() == 3
    assert sorted(store.ids()) == sorted(path_id(folder / f"p{i}.png") for i in range(3))
    assert store.default_embedder == store.embedder_name
    assert store.add(folder, progress=False).indexed == 0  # unchanged files are not embedded again
    best = store.search_text("zebra", k=1, hybrid=True)[0]
    assert best.path == str(folder / "p0.png") and best.keyword_match and best.relevant
    assert len(store.search_text("zebra", k=3)) == 3
    store.update_metadata([path_id(folder / "p2.png")], [{"captions": ["an okapi in the rain"]}])
    assert store.search_text("okapi", k=1, hybrid=True)[0].path == str(folder / "p2.png")  # the words are fresh
    assert store.search_image(folder / "p1.png", k=1)[0].path == str(folder / "p1.png")
    (folder / "p2.png").unlink()
    assert store.sync(allow_large=True) == [str(folder / "p2.png")] and store.count() == 2


def test_an_exact_copy_reuses_its_twin_and_folds_into_it(store, tmp_path):
    """A copy of a stored photo takes its twin's vector (found by content hash, ``find_content``), and a search
    with ``collapse_duplicates`` returns the pair once, the copy listed in ``copies``."""
    folder = tmp_path / "photos"
    for i in range(3):
        make_photo(folder / f"p{i}.png", seed=i)
    store.add(folder, progress=False)
    twin = folder / "copies" / "p0-again.png"
    twin.parent.mkdir()
    twin.write_bytes((folder / "p0.png").read_bytes())
    found = store.find_content(store.get([path_id(folder / "p0.png")])[0].metadata["sha256"])
    assert found is not None and found[0] == path_id(folder / "p0.png")
    store.add(folder, progress=False)
    assert store.count() == 4
    np.testing.assert_allclose(*store.embeddings([path_id(folder / "p0.png"), path_id(twin)]), atol=1e-6)
    hits = store.search_image(folder / "p0.png", k=3, collapse_duplicates=True)
    assert len(hits) == 3 and len({hit.path for hit in hits} & {str(folder / "p0.png"), str(twin)}) == 1
    assert hits[0].copies and set(hits[0].copies) | {hits[0].path} == {str(folder / "p0.png"), str(twin)}
    assert len(store.search_text("a photo", k=3, hybrid=True, collapse_duplicates=True)) == 3
