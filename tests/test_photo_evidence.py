"""Evidence beyond the cosine (issue 37, item 1): the COCO objects found in a photo at index time
(``pictrieve index --objects``, vectorstore/photo_evidence.py) confirm or deny the things a query names, and a
per-query rule shipped with ``evidence`` reads them (vectorstore/relevance.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from helpers.cli import run
from pictrieve.vectorstore import photo_evidence, relevance
from pictrieve.vectorstore.photo_evidence import named_objects, objects_text, parse_objects
from pictrieve.vectorstore.relevance import RelevanceCutoff


def test_query_words_name_the_coco_things_they_mean():
    assert named_objects("A man and his dogs on a beach") == {"person", "dog"}
    assert named_objects("two girls ride bikes past a bus") == {"person", "bicycle", "bus"}
    assert named_objects("a hot dog stand") == {"hot dog"}  # the pair first: no dog is named
    assert named_objects("waiting at a bus stop") == frozenset()  # a bus stop needs no bus
    assert named_objects("an orange sunset over the sea") == frozenset()  # the colour, not the fruit
    assert named_objects("a giraffe in a kitchen") == {"giraffe"}


def test_stored_objects_read_back_and_an_unanalysed_photo_is_none():
    text = objects_text({"person": 0.88, "dog": 0.91})
    assert text == "dog 0.91; person 0.88"
    assert parse_objects(text) == {"dog": 0.91, "person": 0.88}
    assert parse_objects(objects_text({})) == {} and parse_objects(None) is None
    assert parse_objects("sports ball 0.40") == {"sports ball": 0.4}


def _cutoff(reference_dir, dim: int = 8) -> RelevanceCutoff:
    """over-median at 0.30 over reference photos orthogonal to the query (its median cosine is 0: its cutoff is
    0.30), shipped with evidence: 0.25 for an analysed photo, +0.1 when confirmed, -1 when denied."""
    reference = np.zeros((20, dim), np.float32)
    reference[:, 1] = 1.0
    relevance.write_reference(reference_dir / "r.npy", reference)
    return RelevanceCutoff("e", 0.30, "shipped", {"cosine_threshold": 0.3}, "over-median",
                           relevance.load_reference("r.npy"),
                           {"threshold": 0.25, "detector": {"confirm_score": 0.5, "bonus": 0.1, "penalty": 1.0}})


@pytest.fixture
def reference_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(relevance, "REFERENCE_DIR", tmp_path / "reference")
    relevance.load_reference.cache_clear()
    yield tmp_path / "reference"
    relevance.load_reference.cache_clear()


def test_the_photos_objects_confirm_or_deny_what_the_query_names(reference_dir):
    cutoff = _cutoff(reference_dir)
    query = np.eye(8, dtype=np.float32)[0]
    scores = [0.32, 0.32, 0.27, 0.27]
    objects = [None, "cat 0.90", "dog 0.80", None]  # not analysed, no dog found, a dog found, not analysed
    assert cutoff.judge(scores, query, query="a dog", objects=objects) == [True, False, True, False]
    # a query that names no COCO thing: analysed photos are judged at the evidence threshold, unshifted
    assert cutoff.judge(scores, query, query="a sunset", objects=objects) == [True, True, True, False]
    # without the query's words, or without stored objects, the plain rule
    assert cutoff.judge(scores, query, objects=objects) == [True, True, False, False]
    assert cutoff.judge(scores, query, query="a dog") == [True, True, False, False]
    assert "index --objects" in cutoff.describe()


def test_the_shipped_offline_rule_carries_the_evidence_the_study_chose():
    shipped = relevance.shipped_cutoffs()["offline"]
    evidence = shipped["evidence"]
    assert set(evidence["detector"]) == {"confirm_score", "bonus", "penalty"}
    assert "flickr8k-train" in evidence["chosen_on"] and "dev" not in evidence["chosen_on"]


def test_index_objects_stores_what_the_detector_finds_and_a_rerun_does_only_the_rest(
        tmp_path, flickr_dir, tiny_clip_name, detector_cached, reference_dir):
    """A real photo of a dog and a person (flickr8k-dev) and a blank one, indexed with --objects by the CLI; then
    searches (hybrid and by vectors) under a rule with evidence mark the photo whose dog was found."""
    photos = tmp_path / "photos"
    photos.mkdir()
    shutil.copy(flickr_dir / "images" / "1003163366_44323f5815.jpg", photos / "bench.jpg")  # a man and his dog
    from PIL import Image

    Image.new("RGB", (120, 90), "gray").save(photos / "blank.png")
    gallery = str(tmp_path / "g")
    done = run("index", str(photos), "-g", gallery, "-e", tiny_clip_name, "--objects")
    assert done.returncode == 0, done.stderr
    assert "found the objects in 2 photos" in done.stdout and "0.13 s of CPU a photo" in done.stderr
    from pictrieve.vectorstore.gallery import Gallery

    stored = {item.path.rsplit("/", 1)[-1]: parse_objects(item.metadata.get(photo_evidence.OBJECTS_KEY))
              for item in Gallery.open(gallery, create=False).items()}
    assert {"person", "dog"} <= set(stored["bench.jpg"]) and stored["blank.png"] == {}
    again = run("index", str(photos), "-g", gallery, "-e", tiny_clip_name, "--objects", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["objects_found"] == 0

    # A rule no cosine passes, with evidence that makes a confirmed photo relevant: only the bench photo is.
    store = Gallery.open(gallery, create=False)
    relevance.write_reference(reference_dir / "r.npy", np.eye(store.embedder.dim, dtype=np.float32)[:4])
    store.put_json(relevance.record_key(store.embedder_name), {
        "threshold": 5.0, "rule": "over-median", "reference": "r.npy",
        "evidence": {"threshold": 5.0, "detector": {"confirm_score": 0.3, "bonus": 10.0, "penalty": 0.0}}})
    for hybrid in (True, False):
        hits = store.search_text("a dog", k=2, hybrid=hybrid)
        assert {h.path.rsplit("/", 1)[-1]: h.relevant for h in hits} == {"bench.jpg": True, "blank.png": False}
        assert not any(h.relevant for h in store.search_text("a sunset", k=2, hybrid=hybrid))
