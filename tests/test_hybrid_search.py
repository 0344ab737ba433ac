"""Hybrid search: the photos' own words (folders, file names, captions, place, photo text) ranked by BM25 and
fused with the vectors. Real flickr8k-dev photos copied into named folders, a real gallery, a real second
process writing to it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.keywords import KeywordIndex, record_words, words
from pictrieve.vectorstore.photo_filter import PhotoFilter


def test_words_split_names_as_people_write_them():
    assert words("IMG_2019-06-01_LisbonTrip") == ["2019", "06", "01", "lisbon", "trip"]
    assert words("germany_2019") == ["germany", "2019"]
    assert words("São Paulo, the HTMLParser") == ["sao", "paulo", "html", "parser"]
    meta = {"folder": "/home/me/Pictures/trips/lisbon", "name": "tram28.jpg", "captions": ["A yellow tram"],
            "place": "Lisbon, Lisbon, PT", "photo_text": "Rua Augusta"}
    assert record_words(meta) == ["trips", "lisbon", "tram", "28", "yellow", "tram", "lisbon",
                                  "lisbon", "pt", "rua", "augusta"]
    assert "yellow" not in record_words(meta, fields=("folder", "name"))


def test_a_word_every_photo_carries_shifts_no_rank():
    index = KeywordIndex(["a", "b", "c"], [["trips", "lisbon"], ["trips"], ["trips", "porto", "beach", "sunset"]])
    ranked = index.rank("trips")
    assert {r.rank for r in ranked} == {1} and len(ranked) == 3
    assert [r.id for r in index.rank("lisbon trips")][:1] == ["a"]
    assert index.rank("the of") == [] and index.rank("zebra") == []


@pytest.fixture(scope="module")
def named_library(tmp_path_factory, flickr_dir):
    """Twelve flickr8k-dev photos: three in lisbon/, three in germany_2019/, six in a folder named by numbers."""
    root = tmp_path_factory.mktemp("library")
    photos = sorted((flickr_dir / "images").glob("*.jpg"))[:12]
    for n, photo in enumerate(photos):
        folder = "lisbon" if n in (2, 6, 9) else "germany_2019" if n in (3, 7, 10) else "2020_01"
        (root / folder).mkdir(exist_ok=True)
        shutil.copy(photo, root / folder / photo.name)
    return root


@pytest.fixture(scope="module")
def named_gallery(tmp_path_factory, named_library, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path_factory.mktemp("gallery") / "g", tiny_clip_embedder)
    gallery.add(named_library, progress=False)
    return gallery


def _folders(hits) -> list[str]:
    return [Path(h.path).parent.name for h in hits]


def test_photos_foldered_by_a_word_rank_first_for_it(named_gallery):
    hits = named_gallery.search_text("lisbon", k=6, hybrid=True)
    assert _folders(hits)[:3] == ["lisbon"] * 3
    assert [h.keyword_match for h in hits] == [True] * 3 + [False] * 3
    assert all(h.relevant for h in hits[:3])  # every word of the query is the photo's: relevant
    assert -1.0 <= hits[0].score <= 1.0  # the score stays the cosine
    germany = named_gallery.search_text("photos from Germany", k=3, hybrid=True)
    assert _folders(germany) == ["germany_2019"] * 3
    # The vectors alone (a random-weight model here) do not find them: the words do.
    assert _folders(named_gallery.search_text("lisbon", k=3)) != ["lisbon"] * 3
    assert not any(h.keyword_match for h in named_gallery.search_text("lisbon", k=3))


def test_filters_hold_on_the_keyword_side(named_gallery, named_library):
    inside = PhotoFilter.parse(folder=named_library / "2020_01")
    hits = named_gallery.search_text("lisbon", k=4, where=inside, hybrid=True)
    assert len(hits) == 4 and set(_folders(hits)) == {"2020_01"}
    assert not any(h.keyword_match for h in hits)
    only_germany = {"folder": str((named_library / "germany_2019").resolve())}
    assert set(_folders(named_gallery.search_text("lisbon germany", k=5, where=only_germany, hybrid=True))) \
        == {"germany_2019"}


def test_another_process_writing_is_seen_by_the_next_search(named_gallery, tmp_path, flickr_dir, tiny_clip_name):
    from pictrieve.vectorstore.keywords import keyword_index

    named_gallery.search_text("porto", k=3, hybrid=True)  # the keyword index is built (no porto yet)
    assert keyword_index(named_gallery) is keyword_index(named_gallery)  # kept while nothing is written
    porto = tmp_path / "porto"
    porto.mkdir()
    for photo in sorted((flickr_dir / "images").glob("*.jpg"))[20:22]:
        shutil.copy(photo, porto / photo.name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    code = ("import sys; from pictrieve.vectorstore.gallery import Gallery; "
            "Gallery.open(sys.argv[1], sys.argv[2]).add(sys.argv[3], progress=False)")
    subprocess.run([sys.executable, "-c", code, named_gallery.location, tiny_clip_name, str(porto)],
                   check=True, env=env, timeout=300)
    hits = named_gallery.search_text("porto", k=3, hybrid=True)
    assert _folders(hits)[:2] == ["porto", "porto"] and hits[0].keyword_match


def test_photos_with_every_word_of_the_query_come_first():
    from pictrieve.vectorstore.keywords import KeywordRank, fuse

    vector_ids = [f"v{n}" for n in range(1, 60)] + ["named"]
    keyword = [KeywordRank("named", 3.0, 1, all_words=True), KeywordRank("v40", 1.0, 2)]
    assert fuse(vector_ids, keyword, 3, rrf_k=5, weight=0.5) == ["named", "v1", "v2"]
    assert fuse(vector_ids, keyword, 3, rrf_k=5, weight=0.5, all_words_first=False) == ["v1", "v2", "v3"]
    assert fuse(vector_ids, keyword, 1)[0] == "named"  # the shipped setting


def test_the_fused_order_counts_ranks_from_one():
    """Pinned: with the shipped constants (k=2, weight 0.75) v3 scores 1/5 + 0.75/3 = 0.45 against v1's 1/3; ranks
    counted from 0 would tie v1 (1/2) with v3 (1/4 + 0.75/3) and put v1 first."""
    from pictrieve.vectorstore.keywords import RRF_K, KEYWORD_WEIGHT, KeywordRank, fuse

    assert (RRF_K, KEYWORD_WEIGHT) == (2, 0.75)
    keyword = [KeywordRank("v3", 2.0, 1), KeywordRank("k1", 1.0, 2)]
    assert fuse(["v1", "v2", "v3"], keyword, 4, all_words_first=False) == ["v3", "v1", "v2", "k1"]


def test_hash_like_file_names_give_no_words():
    assert record_words({"path": "/data/flickr8k-dev/images/1000268201_693b08cb0e.jpg"}, ("name",)) == ["1000268201"]
    assert record_words({"name": "IMG_20190601_beach.jpg", "folder": "/x/deadbeef12/cafe"}, ("folder", "name")) == \
        ["cafe", "20190601", "beach"]


def test_query_words_no_photo_carries_leave_the_named_photos_first():
    index = KeywordIndex(["a", "b"], [["lisbon", "2019"], ["porto", "tram"]])
    (lisbon,) = index.rank("a red car in Lisbon")  # no photo's words say red or car: those are for the vectors
    assert lisbon.id == "a" and lisbon.all_words and not lisbon.every_word
    (found,) = index.rank("photos from Lisbon")
    assert found.all_words and found.every_word
