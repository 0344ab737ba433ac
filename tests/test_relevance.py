"""The relevance cutoff: every hit says whether it matches well, a search says when none does, and
``pictrieve calibrate`` chooses and stores the cutoff (vectorstore/relevance.py, evaluation/relevance_cutoff.py)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from helpers import FLICKR8K_DEV, make_photo
from helpers.cli import run
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.relevance import (
    NO_MATCH_HEADER,
    RELATIVE_MARGIN,
    agent_summary,
    choose_threshold,
    record_key,
    shipped_cutoffs,
    store_cutoff,
)

# Four stored unit vectors whose cosines with the query vector are exactly these (the query is axis 0).
COSINES = [0.9, 0.7, 0.5, 0.2]


def _known(dim: int) -> tuple[np.ndarray, np.ndarray]:
    vectors = np.zeros((len(COSINES), dim), dtype=np.float32)
    for i, c in enumerate(COSINES):
        vectors[i, 0], vectors[i, i + 1] = c, np.sqrt(1 - c * c)
    query = np.zeros(dim, dtype=np.float32)
    query[0] = 1.0
    return vectors, query


@pytest.fixture
def known_gallery(tmp_path, tiny_clip_embedder):
    """A gallery holding four vectors with known cosines to ``query`` (and four real photo files)."""
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    vectors, query = _known(tiny_clip_embedder.dim)
    paths = [make_photo(tmp_path / f"p{i}.png", seed=i) for i in range(len(COSINES))]
    gallery.upsert([f"id{i}" for i in range(len(COSINES))], vectors,
                   [{"path": str(p), "captions": [f"photo {i}"]} for i, p in enumerate(paths)])
    return gallery, query


def test_the_stored_threshold_splits_the_hits_and_only_relevant_drops_the_rest(known_gallery):
    gallery, query = known_gallery
    store_cutoff(gallery, 0.6, {"criterion": "test"})
    hits = gallery.search_vector(query, k=4)
    assert [round(h.score, 3) for h in hits] == COSINES
    assert [h.relevant for h in hits] == [True, True, False, False]
    assert [h.to_json()["relevant"] for h in hits] == [True, True, False, False]
    assert [h.id for h in gallery.search_vector(query, k=4, only_relevant=True)] == ["id0", "id1"]
    assert gallery.relevance_cutoff().source == "gallery"
    store_cutoff(gallery, 0.95, {})
    hits = gallery.search_vector(query, k=4)
    assert not any(h.relevant for h in hits)  # nothing reaches it: the closest are still returned, marked
    assert gallery.search_vector(query, k=4, only_relevant=True) == []
    assert agent_summary("a giraffe", hits).startswith("No photo in the gallery matches 'a giraffe' well; the closest are: id0")


def test_an_uncalibrated_embedder_falls_back_to_the_relative_rule(known_gallery):
    gallery, query = known_gallery
    assert gallery.embedder_name not in shipped_cutoffs() and gallery.get_json(record_key(gallery.embedder_name)) is None
    cutoff = gallery.relevance_cutoff()
    assert (cutoff.source, cutoff.threshold) == ("relative", None)
    assert cutoff.judge([0.9, 0.9 - RELATIVE_MARGIN / 2, 0.9 - 2 * RELATIVE_MARGIN]) == [True, True, False]
    assert [h.relevant for h in gallery.search_vector(query, k=4)] == [True, False, False, False]


def test_the_offline_default_ships_a_calibrated_threshold():
    shipped = shipped_cutoffs()["offline"]
    assert 0.0 < shipped["threshold"] < 1.0 and "flickr8k-train" in shipped["stats"]["folder"]


def test_a_gallerys_own_calibration_wins_over_the_shipped_cutoff(tmp_path):
    """The offline default ships a cutoff; ``pictrieve calibrate`` on a gallery of it must still be what judges."""
    gallery = Gallery.open(tmp_path / "g", "offline")  # no model is loaded to read or store a record
    assert gallery.embedder_name == "offline" and gallery.relevance_cutoff().source == "shipped"
    shipped = shipped_cutoffs()["offline"]["threshold"]
    store_cutoff(gallery, shipped + 0.1, {"criterion": "test"})
    cutoff = gallery.relevance_cutoff()
    assert (cutoff.source, cutoff.threshold) == ("gallery", pytest.approx(shipped + 0.1))
    assert cutoff.judge([shipped + 0.05]) == [False]  # judged by the gallery's cutoff, not the shipped one


def test_choose_threshold_takes_the_middle_of_the_best_run():
    # Interleaved scores: t = 0.25, 0.45 and 0.65 each reach 2/3 balanced accuracy; the middle one is chosen.
    threshold, stats = choose_threshold([0.3, 0.5, 0.7], [0.2, 0.4, 0.6])
    assert threshold == pytest.approx(0.45) and stats["balanced_accuracy"] == pytest.approx(0.6667, abs=1e-4)
    # Separated scores: the one best candidate is the midpoint between the two neighbouring scores.
    assert choose_threshold([0.5, 0.6], [0.1, 0.2])[0] == pytest.approx(0.35)


def test_choose_threshold_maximises_balanced_accuracy():
    threshold, stats = choose_threshold([0.5, 0.6, 0.7, 0.8], [0.1, 0.2, 0.3, 0.65])
    # 0.3 < t <= 0.5 gets every present and 3 of 4 absent (0.875); nothing does better.
    assert 0.3 < threshold <= 0.5 and stats["balanced_accuracy"] == 0.875
    threshold, stats = choose_threshold([0.5, 0.6], [0.1, 0.2])
    assert 0.2 < threshold <= 0.5 and stats["balanced_accuracy"] == 1.0
    with pytest.raises(ValueError):
        choose_threshold([], [0.1])


def test_the_tools_the_retriever_and_the_graph_carry_relevant(known_gallery, monkeypatch):
    from langchain_core.messages import ToolCall

    from pictrieve.graphs.search import build_search_graph
    from pictrieve.integrations.langchain_tools import image_search_tool
    from pictrieve.vectorstore.retriever import GalleryRetriever

    gallery, query = known_gallery
    # text queries embed to the known query vector, so the cosines are exactly COSINES
    monkeypatch.setattr(type(gallery.embedder), "embed_texts", lambda self, texts: np.stack([query] * len(texts)))
    store_cutoff(gallery, 0.6, {})
    tool = image_search_tool(gallery, pictures=False)
    message = tool.invoke(ToolCall(name=tool.name, args={"query": "a dog", "k": 4}, id="1", type="tool_call"))
    rows = json.loads(message.content[0]["text"])
    assert [r["relevant"] for r in rows] == [True, True, False, False]
    assert message.content[1]["text"] == "2 of the 4 photos shown match 'a dog' well; the other 2 are only the closest."
    message = tool.invoke(ToolCall(name=tool.name, args={"query": "a dog", "k": 4, "only_relevant": True}, id="2",
                                   type="tool_call"))
    assert [r["id"] for r in message.artifact] == ["id0", "id1"]
    docs = GalleryRetriever(gallery=gallery, k=4).invoke("a dog")
    assert [d.metadata["relevant"] for d in docs] == [True, True, False, False]
    assert [d.id for d in GalleryRetriever(gallery=gallery, k=4, only_relevant=True).invoke("a dog")] == ["id0", "id1"]
    graph = build_search_graph(gallery)
    assert [h.relevant for h in graph.invoke({"query": "a dog"}, context={"k": 4})["hits"]] == [True, True, False, False]
    assert len(graph.invoke({"query": "a dog"}, context={"k": 4, "only_relevant": True})["hits"]) == 2
    store_cutoff(gallery, 0.95, {})
    message = tool.invoke(ToolCall(name=tool.name, args={"query": "a giraffe", "k": 2}, id="3", type="tool_call"))
    assert message.content[1]["text"].startswith("No photo in the gallery matches 'a giraffe' well; the closest are: id0")


def test_the_page_says_no_photo_matches_well(known_gallery):
    from pictrieve.ui.app import search_body

    gallery, query = known_gallery
    store_cutoff(gallery, 0.95, {})
    body = search_body(gallery.search(vector=query, k=3))
    assert body["notice"] == NO_MATCH_HEADER and [h["relevant"] for h in body["hits"]] == [False] * 3
    assert body["summary"].startswith("No photo in the gallery matches the given photo well; the closest are: id0")
    store_cutoff(gallery, 0.6, {})
    body = search_body(gallery.search(vector=query, k=3, only_relevant=True))
    assert body["notice"] == "" and len(body["hits"]) == 2
    assert body["summary"] == "All 2 photos shown match the given photo well."
    store_cutoff(gallery, 0.95, {})
    body = search_body(gallery.search(vector=query, k=3, only_relevant=True))
    assert body["hits"] == [] and body["why"] == ("3 photos came closest, but none matches well enough to pass "
                                                  "the relevance cutoff")
    assert body["notice"] == "nothing found: " + body["why"]


def _captioned_folder(root, captions: dict[str, str]):
    (root / "images").mkdir(parents=True)
    lines = []
    for i, (name, caption) in enumerate(captions.items()):
        make_photo(root / "images" / f"{name}.png", seed=i)
        lines.append(json.dumps({"image": f"images/{name}.png", "captions": [caption, caption + " outside"]}))
    (root / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_the_cli_marks_hits_says_when_none_matches_and_drops_them(tmp_path, tiny_clip_name):
    folder = _captioned_folder(tmp_path / "photos", {"dog": "a black dog", "kids": "two children play",
                                                     "bike": "a man rides a bike"})
    gallery = Gallery.open(tmp_path / "g", tiny_clip_name)
    gallery.add(folder / "images", progress=False)
    scores = [h.score for h in gallery.search_text("a black dog", k=3)]
    store_cutoff(gallery, (scores[0] + scores[1]) / 2, {})
    done = run("search", "a black dog", "-g", str(tmp_path / "g"), "-k", "3", "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert [h["relevant"] for h in body["hits"]] == [True, False, False] and body["relevant_count"] == 1
    assert body["relevance"]["source"] == "gallery"
    done = run("search", "a black dog", "-g", str(tmp_path / "g"), "-k", "3")
    assert NO_MATCH_HEADER not in done.stdout and "below the relevance cutoff:" in done.stdout
    done = run("search", "a black dog", "-g", str(tmp_path / "g"), "-k", "3", "--only-relevant", "--json")
    assert len(json.loads(done.stdout)["hits"]) == 1
    store_cutoff(gallery, scores[0] + 0.01, {})  # above every hit
    # Vectors alone: nothing reaches the cutoff. (Hybrid search, the default, would still call the photo whose
    # caption holds every word of the query relevant: its own words say so.)
    done = run("search", "a black dog", "-g", str(tmp_path / "g"), "-k", "3", "--no-hybrid")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == NO_MATCH_HEADER and len(lines) == 4, done.stdout
    done = run("search", "a black dog", "-g", str(tmp_path / "g"), "-k", "3", "--only-relevant", "--no-hybrid")
    assert done.returncode == 1 and done.stdout.splitlines() == [
        "nothing found: 3 photos came closest, but none matches well enough to pass the relevance cutoff"]
    done = run("search", "a black dog", "-g", str(tmp_path / "g"), "-k", "3", "--only-relevant", "--no-hybrid",
               "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["hits"] == []
    assert json.loads(done.stdout)["why"].startswith("3 photos came closest, but none matches well")
    worded = json.loads(run("search", "a black dog", "-g", str(tmp_path / "g"), "-k", "3", "--json").stdout)
    assert [h["relevant"] for h in worded["hits"]] == [True, False, False]


def test_calibrate_chooses_and_stores_the_cutoff_on_a_captioned_folder(tmp_path, tiny_clip_name):
    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery
    from pictrieve.evaluation.relevance_cutoff import score_folder

    folder = _captioned_folder(tmp_path / "photos", {"dog": "a black dog", "kids": "two children play",
                                                     "bike": "a man rides a bike"})
    absent = tmp_path / "absent.jsonl"
    absent.write_text("".join(json.dumps(row) + "\n" for row in [
        {"query": "a giraffe in a kitchen", "key_nouns": ["giraffe"], "split": "train"},
        {"query": "a spreadsheet", "key_nouns": ["spreadsheet"], "split": "train"},
        {"query": "a bike shop", "key_nouns": ["bike"], "split": "train"},  # a caption names it: left out
        {"query": "a harp", "key_nouns": ["harp"], "split": "dev"},  # held out: not used to calibrate
    ]))
    target = tmp_path / "target"
    done = run("calibrate", str(folder), "-g", str(target), "-e", tiny_clip_name, "--absent", str(absent), "--json",
               "--results", str(tmp_path / "rows.jsonl"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["stored"] and report["stats"]["absent_queries"] == 2 and report["stats"]["present_queries"] == 6
    assert re.search(r"absent query 'a bike shop' is left out", done.stderr)
    cutoff = Gallery.open(target, tiny_clip_name).relevance_cutoff()
    assert (cutoff.source, cutoff.threshold) == ("gallery", pytest.approx(report["threshold"]))
    # the same choice, made here from the scores the command used
    photos = CaptionedFolder.load(folder)
    scores = score_folder(photos, eval_gallery(photos, tiny_clip_name), ["a giraffe in a kitchen", "a spreadsheet"])
    assert choose_threshold(scores.own, scores.absent_best)[0] == pytest.approx(report["threshold"])
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows].count("absent") == 2 and len(rows) == 8
    done = run("calibrate", str(folder), "-g", str(tmp_path / "other"), "-e", tiny_clip_name, "--absent", str(absent),
               "--dry-run")
    assert done.returncode == 0 and "not stored" in done.stdout
    assert not (tmp_path / "other").exists()


def test_the_shipped_absent_queries_are_absent_from_flickr8k_captions():
    from pictrieve.evaluation.relevance_cutoff import load_absent_queries, present_in_captions

    queries = load_absent_queries()
    assert len(queries) >= 60 and {q.split for q in queries} == {"train", "dev"}
    folders = [FLICKR8K_DEV, FLICKR8K_DEV.parent / "flickr8k-train"]
    if not all((f / "captions.jsonl").is_file() for f in folders):
        pytest.skip("the flickr8k folders are not here")
    captions = [c for f in folders for line in (f / "captions.jsonl").read_text().splitlines()
                for c in json.loads(line)["captions"]]
    assert present_in_captions(queries, captions) == {}
