"""The relevance cutoff: every hit says whether it matches well, a search says when none does, and
``pictrieve calibrate`` chooses and stores the cutoff (vectorstore/relevance.py, evaluation/relevance_cutoff.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import numpy as np
import pytest

from helpers import FLICKR8K_DEV, make_photo
from helpers.cli import run
from pictrieve.vectorstore import relevance
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.relevance import (
    NO_MATCH_HEADER,
    RELATIVE_MARGIN,
    RelevanceCutoff,
    choose_threshold,
    cutoff_from_records,
    load_reference,
    record_key,
    shipped_cutoffs,
    store_cutoff,
    write_reference,
)
from pictrieve.vectorstore.search_request import SearchAnswer, SearchRequest

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
    answer = SearchAnswer.of_hits(SearchRequest.of(query="a giraffe", k=4), hits)
    assert answer.summary().startswith("No photo in the gallery matches 'a giraffe' well; the closest are: id0")


def test_an_uncalibrated_embedder_falls_back_to_the_relative_rule(known_gallery):
    gallery, query = known_gallery
    assert gallery.embedder_name not in shipped_cutoffs() and gallery.get_json(record_key(gallery.embedder_name)) is None
    cutoff = gallery.relevance_cutoff()
    assert (cutoff.source, cutoff.threshold) == ("relative", None)
    assert cutoff.judge([0.9, 0.9 - RELATIVE_MARGIN / 2, 0.9 - 2 * RELATIVE_MARGIN]) == [True, True, False]
    assert [h.relevant for h in gallery.search_vector(query, k=4)] == [True, False, False, False]


def test_the_offline_default_ships_a_per_query_rule_chosen_where_its_head_never_looked():
    cutoff = cutoff_from_records("offline", None)
    assert cutoff.source == "shipped" and cutoff.per_query and cutoff.rule in relevance.QUERY_RULES
    assert cutoff.reference.shape[0] >= 100 and np.allclose(np.linalg.norm(cutoff.reference, axis=1), 1, atol=1e-3)
    assert "fold" in cutoff.stats["chosen_on"] and 0 < cutoff.stats["cosine_threshold"] < 1
    assert "reference photos" in cutoff.describe() and "shipped" in cutoff.describe()


def _reference(dim: int, cosines: Sequence[float], axis: int = 0) -> np.ndarray:
    """Unit vectors whose cosines with the unit vector on ``axis`` (in the first half) are exactly ``cosines``;
    the rest of each lies in the second half, orthogonal to every query here."""
    rows = np.zeros((len(cosines), dim), dtype=np.float32)
    for i, c in enumerate(cosines):
        rows[i, axis], rows[i, dim // 2 + i % (dim // 2)] = c, np.sqrt(1 - c * c)
    return rows


@pytest.fixture
def reference_dir(tmp_path, monkeypatch):
    """Reference photos written where the rule reads them (not into the package)."""
    monkeypatch.setattr(relevance, "REFERENCE_DIR", tmp_path / "reference")
    load_reference.cache_clear()
    yield tmp_path / "reference"
    load_reference.cache_clear()


def test_a_per_query_rule_sets_each_querys_own_cosine_cutoff(reference_dir):
    dim = 16
    # the query on axis 0 meets the reference photos at 0.1 .. 0.5, the one on axis 3 at 0.3 .. 0.7
    reference = np.concatenate([_reference(dim, np.linspace(0.1, 0.5, 50)), _reference(dim, np.linspace(0.3, 0.7, 50), 3)])
    write_reference(reference_dir / "r.npy", reference)
    cutoff = RelevanceCutoff("e", 0.05, "shipped", {"cosine_threshold": 0.42}, "over-max", load_reference("r.npy"))
    first, second = np.eye(dim, dtype=np.float32)[[0, 3]]
    sims = np.stack([first, second]) @ cutoff.reference.T
    assert cutoff.query_cosines(np.stack([first, second])) == pytest.approx(sims.max(1) + 0.05, abs=1e-6)
    assert cutoff.for_query(first).threshold == pytest.approx(0.55, abs=2e-3)
    assert cutoff.for_query(second).threshold == pytest.approx(0.75, abs=2e-3)
    assert cutoff.judge([0.6, 0.5], first) == [True, False] and cutoff.judge([0.6, 0.5], second) == [False, False]
    # no query vector, or one of another size: the global cosine chosen beside the rule
    assert cutoff.judge([0.6, 0.4]) == [True, False] and cutoff.judge([0.6, 0.4], np.ones(5)) == [True, False]
    # the statistic calibrate chooses on: cosine minus the query's best reference cosine
    assert cutoff.statistic(np.array([[0.6], [0.6]]), np.stack([first, second]))[:, 0] == pytest.approx(
        0.6 - sims.max(1), abs=1e-6)
    z = RelevanceCutoff("e", 2.0, "shipped", {}, "z", cutoff.reference)
    assert z.for_query(first).threshold == pytest.approx(sims[0].mean() + 2 * sims[0].std(), abs=1e-4)
    with pytest.raises(ValueError, match="unknown"):
        cutoff_from_records("e", {"threshold": 0.1, "rule": "nonsense", "reference": "r.npy"})


def test_searches_judge_each_hit_by_its_querys_cutoff(known_gallery, reference_dir, monkeypatch):
    from pictrieve.vectorstore.relevance import judge_by_text

    gallery, query = known_gallery
    monkeypatch.setattr(type(gallery.embedder), "embed_texts", lambda self, texts: np.stack([query] * len(texts)))
    write_reference(reference_dir / "low.npy", _reference(len(query), np.linspace(0.0, 0.6, 40)))
    write_reference(reference_dir / "high.npy", _reference(len(query), np.linspace(0.0, 0.8, 40)))
    # the query's best reference photo is at 0.6: cutoff 0.65; at 0.8: cutoff 0.85 (hits: 0.9, 0.7, 0.5, 0.2)
    for name, expected in (("low.npy", [True, True, False, False]), ("high.npy", [True, False, False, False])):
        store_cutoff(gallery, 0.05, {"folder": "mine"}, rule="over-max", reference=name)
        assert [h.relevant for h in gallery.search_vector(query, k=4)] == expected
        assert [h.relevant for h in gallery.search_text("a zebra", k=4, hybrid=True)] == expected
        unjudged = [h.model_copy(update={"relevant": None}) for h in gallery.search_vector(query, k=4)]
        assert [h.relevant for h in judge_by_text(gallery, "a zebra", unjudged)] == expected
    assert gallery.relevance_cutoff().describe().startswith("cosine >= the query's best cosine over 40 reference")


def test_info_shows_the_rule_in_force_and_where_it_came_from(known_gallery):
    gallery, _ = known_gallery
    location = str(gallery.location)
    done = run("info", "-g", location)
    assert done.returncode == 0, done.stderr
    assert "matches well when: relative: a hit within 0.05 of the best cosine" in done.stdout
    store_cutoff(gallery, 0.6, {"folder": "/photos/captioned"})
    done = run("info", "-g", location)
    assert "matches well when: cosine >= 0.6000 (calibrated on /photos/captioned by `pictrieve calibrate`)" in done.stdout
    rows = json.loads(run("info", "-g", location, "--json").stdout)["collections"]
    assert rows[0]["relevance"]["source"] == "gallery" and rows[0]["relevance"]["threshold"] == 0.6


async def test_mcp_gallery_info_shows_the_rule_in_force_and_where_it_came_from(known_gallery):
    """MCP's gallery_info says per embedder what `pictrieve info` says: the rule, its threshold, where it came from."""
    from helpers.mcp import stdio_session

    gallery, _ = known_gallery
    store_cutoff(gallery, 0.6, {"folder": "/photos/captioned"})
    async with stdio_session(["-g", str(gallery.location), "-e", gallery.embedder_name]) as session:
        info = await session.call_tool("gallery_info", {})
    assert not info.isError, info.content
    (embedder,) = info.structuredContent["embedders"]
    assert embedder["relevance"] == {
        "rule": "cosine", "threshold": 0.6, "source": "gallery",
        "description": "cosine >= 0.6000 (calibrated on /photos/captioned by `pictrieve calibrate`)"}


def test_calibrate_keeps_a_shipped_per_query_rule_and_chooses_its_threshold(tmp_path, tiny_clip_name, reference_dir,
                                                                             monkeypatch):
    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery
    from pictrieve.evaluation.relevance_cutoff import calibrate

    folder = _captioned_folder(tmp_path / "photos", {"dog": "a black dog", "kids": "two children play",
                                                     "bike": "a man rides a bike"})
    photos = CaptionedFolder.load(folder)
    gallery = eval_gallery(photos, tiny_clip_name, location=tmp_path / "eval")
    reference = np.random.default_rng(0).normal(size=(30, gallery.embedder.dim)).astype(np.float32)
    write_reference(reference_dir / "tiny.npy", reference)
    monkeypatch.setattr(relevance, "shipped_cutoffs", lambda: {gallery.embedder_name: {
        "rule": "over-q99", "threshold": 0.0, "reference": "tiny.npy", "stats": {}}})
    absent = ["a giraffe in a kitchen", "a spreadsheet"]
    threshold, stats, scores = calibrate(photos, gallery, absent)
    assert stats["rule"] == scores.rule == "over-q99" and "cosine_threshold" in stats
    ref = load_reference("tiny.npy")
    texts = np.asarray(gallery.embedder.embed_texts(scores.captions + absent), dtype=np.float32)
    q99 = np.quantile(texts @ ref.T, 0.99, axis=1)
    assert scores.own_stat == pytest.approx(scores.own - q99[: len(scores.own)], abs=1e-5)
    assert scores.absent_best_stat == pytest.approx(scores.absent_best - q99[len(scores.own):], abs=1e-5)
    assert threshold == pytest.approx(choose_threshold(scores.own_stat, scores.absent_best_stat)[0])
    stored = store_cutoff(gallery, threshold, stats, stats["rule"], "tiny.npy")
    assert (stored.source, stored.rule, stored.per_query) == ("gallery", "over-q99", True)


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
    from pictrieve.ui.search import search_body

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


def test_a_receipt_found_by_its_own_text_is_relevant_not_under_no_match(known_gallery):
    """Why 6: a receipt found first by its own text sat under "no photo matches well" (the question's "receipt" is
    in no photo's words, so not every word of the query was the photo's). The words some photo carries, when they
    are at least half the query's, make it relevant; a query only one word of which some photo's words hold is
    left to the cutoff."""
    from pictrieve.vectorstore.search_request import SearchRequest, run_search

    gallery, _ = known_gallery
    store_cutoff(gallery, 0.999, {"folder": "nothing passes by its cosine"})
    receipt = "id2"
    gallery.update_metadata([receipt], [{"photo_text": "CORNER MARKET\nMILK 1.20\nBREAD 2.30\nTOTAL\n42.50"}])
    answer = run_search(gallery, SearchRequest.of(query="what is the total on the receipt?", k=4))
    assert answer.hits[0].id == receipt and answer.hits[0].matched_by in ("words", "both")
    assert answer.hits[0].relevant is True and answer.notice() == "" and answer.relevant_count == 1
    loose = run_search(gallery, SearchRequest.of(query="a brown dog sleeping on a market stall", k=4))
    assert loose.hits[0].id == receipt and not loose.hits[0].relevant  # 1 of 5 words: the cutoff decides
    assert loose.notice() == relevance.NO_MATCH_HEADER
