"""NEEDLE's nodes, each called alone with a state and what it is bound to (the interrupting reviews in a
graph of their own node only): refine, visualize, review_guides, regenerate, screen, rank, review_results,
learn, and the branches between them; and the trust weights read once per run."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from PIL import Image, ImageOps

from helpers.needle_fakes import CountingVisualizer, flickr_dir_of, isolated_cache, needle_gallery  # noqa: F401  (fixtures)

from pictrieve.agents.needle.aggregation import aggregate_rankings
from pictrieve.agents.needle.nodes import (
    NeedleGallery,
    NeedleState,
    after_rank,
    after_regenerate,
    after_review,
    after_visualize,
    learn,
    rank,
    refine,
    regenerate,
    review_guides,
    review_results,
    screen,
    visualize,
)
from pictrieve.agents.needle.trust import TRUST_RECORD, TrustTable, load_trust, save_trust
from pictrieve.graphs.needle import build_needle_graph
from pictrieve.agents.settings import SettingsError
from pictrieve.tools.models.visualizers import create_visualizer

EFFNET = "efficientnet-lite0"


def settings(**values):
    return Runtime(context=values)


def guide(path, number, status="new", visualizer="v", generated=False):
    return {"id": f"g{number}", "path": str(path), "visualizer": visualizer, "generated": generated, "seed": 0,
            "status": status}


@pytest.fixture
def untrained(needle_gallery):
    """The module's gallery, its trust record emptied again after the test."""
    gallery = needle_gallery[0]
    yield gallery
    gallery.put_json(TRUST_RECORD, {})


class CountingReads:
    """The real gallery, counting how often its trust record is read (every other call goes through)."""

    def __init__(self, gallery):
        self.gallery, self.trust_reads = gallery, 0

    def get_json(self, key):
        self.trust_reads += key == TRUST_RECORD
        return self.gallery.get_json(key)

    def __getattr__(self, name):
        return getattr(self.gallery, name)


def test_refine_cleans_the_query_and_reads_the_topics_weights_for_the_embedders_used(needle_gallery, untrained):
    gallery = untrained
    both = sorted([gallery.embedder_name, EFFNET])
    table = TrustTable(weights={"birds": {gallery.embedder_name: 0.2, EFFNET: 0.8}})
    save_trust(gallery, table)
    views = NeedleGallery(gallery)
    out = refine({"query": "A kite, over the beach!!", "topic": "birds"}, settings(prompt_prefix="a photo of"),
                 gallery=views)
    assert out["prompt"] == "a photo of A kite over the beach"
    assert out["weights"] == pytest.approx({gallery.embedder_name: 0.2, EFFNET: 0.8}) and sorted(out["weights"]) == both
    assert refine({"query": "a kite"}, gallery=views)["weights"] == {name: 0.5 for name in both}  # new topic: uniform
    assert refine({"query": "a kite"}, settings(embedders=[EFFNET]), gallery=views)["weights"] == {EFFNET: 1.0}
    with pytest.raises(SettingsError, match="no images for embedder"):  # said before any guide is made
        refine({"query": "a kite"}, settings(embedders=["offline-labels"]), gallery=views)
    with pytest.raises(SettingsError, match="query"):
        refine({"query": " "}, gallery=views)


def test_visualize_numbers_every_visualizers_guides_and_leaves_a_failing_one_out(needle_gallery, isolated_cache):
    _, reference, _ = needle_gallery
    exemplar = create_visualizer(f"exemplar:{reference}")
    broken, painter = CountingVisualizer(fail=True), CountingVisualizer()
    out = visualize({"prompt": "a dog"}, settings(guides=2, seed=3), visualizers=[broken, exemplar, painter])
    assert [(g["id"], g["visualizer"], g["generated"], g["seed"], g["status"]) for g in out["guides"]] == [
        ("g1", exemplar.name, False, 3, "new"), ("g2", exemplar.name, False, 3, "new"),
        ("g3", "counting", True, 3, "new"), ("g4", "counting", True, 3, "new")]
    assert out["regenerations"] == 0 and broken.calls == 1
    with pytest.raises(SettingsError, match="no visualizer produced"):
        visualize({"prompt": "a dog"}, visualizers=[broken])
    with pytest.raises(SettingsError, match="at least one visualizer"):
        visualize({"prompt": "a dog"}, visualizers=[])


def test_branches_follow_the_feedback_mode_and_the_guides_statuses():
    assert after_visualize({}, settings(feedback="guides")) == "review_guides"
    assert after_visualize({}, settings(feedback="results")) == "screen_guides"
    assert after_rank({}, settings(feedback="both")) == "review_results" and after_rank({}) == END
    rejected = {"guides": [guide("a", 1, "approved"), guide("b", 2, "rejected")], "regenerations": 0}
    assert after_review(rejected) == "regenerate"
    assert after_review(rejected, settings(max_regenerations=0)) == "rank"  # no rounds left: search with g1
    assert after_regenerate({"guides": [guide("a", 1, "approved"), guide("c", 3, "new")]}) == "review_guides"
    assert after_regenerate({"guides": [guide("a", 1, "approved"), guide("b", 2, "discarded")]}) == "rank"
    with pytest.raises(SettingsError, match="every guide picture was rejected"):
        after_regenerate({"guides": [guide("b", 2, "discarded")]})


def _alone(node):
    """``node`` as the only node of a graph, so its ``interrupt()`` pauses and resumes as in NEEDLE's."""
    builder = StateGraph(NeedleState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile(checkpointer=InMemorySaver())


def test_review_guides_asks_about_the_new_guides_and_marks_the_rejected_ones():
    graph, config = _alone(review_guides), {"configurable": {"thread_id": "guides"}}
    state = {"query": "q", "prompt": "a dog", "guides": [guide("a", 1, "used"), guide("b", 2), guide("c", 3)]}
    paused = graph.invoke(state, config)
    asked = paused["__interrupt__"][0].value
    assert asked["kind"] == "guides" and [g["id"] for g in asked["guides"]] == ["g2", "g3"]  # only the new ones
    out = graph.invoke(Command(resume={"rejected": ["g3"]}), config)
    assert [g["status"] for g in out["guides"]] == ["used", "approved", "rejected"]
    graph.invoke(state, {"configurable": {"thread_id": "bad"}})
    with pytest.raises(SettingsError, match="unknown guide"):
        graph.invoke(Command(resume={"rejected": ["g1"]}), {"configurable": {"thread_id": "bad"}})


def test_regenerate_replaces_each_rejected_guide_by_the_next_picture_of_its_visualizer(needle_gallery, isolated_cache):
    _, reference, _ = needle_gallery
    exemplar = create_visualizer(f"exemplar:{reference}")
    first = visualize({"prompt": "a dog"}, settings(guides=2), visualizers=[exemplar])["guides"]
    state = {"prompt": "a dog", "regenerations": 0,
             "guides": [{**first[0], "status": "approved"}, {**first[1], "status": "rejected"}]}
    out = regenerate(state, visualizers=[exemplar])
    assert out["regenerations"] == 1
    assert [(g["id"], g["status"], g.get("replaces")) for g in out["guides"]] == [
        ("g1", "approved", None), ("g2", "discarded", None), ("g3", "new", "g2")]
    assert out["guides"][2]["path"] not in {g["path"] for g in first}  # the next-best photo, not a shown one
    gone = regenerate(state, visualizers=[])  # its visualizer is not there any more: nothing replaces it
    assert [g["status"] for g in gone["guides"]] == ["approved", "discarded"]


def test_screen_drops_the_unrelated_guide_with_the_runs_embedders_and_weights(needle_gallery, flickr_dir, tmp_path):
    gallery, _, rows = needle_gallery
    folder = tmp_path
    dog = Image.open(flickr_dir / rows[2]["image"]).convert("RGB")
    width, height = dog.size
    pictures = [dog, ImageOps.mirror(dog), dog.crop((width // 10, height // 10, width, height)).resize(dog.size),
                Image.open(flickr_dir / rows[9]["image"]).convert("RGB")]
    for n, picture in enumerate(pictures, 1):
        picture.save(folder / f"{n}.png")
    guides = [guide(folder / f"{n}.png", n) for n in range(1, 5)]
    views = NeedleGallery(gallery)
    out = screen({"guides": guides, "weights": {EFFNET: 1.0}}, gallery=views)
    assert [g["status"] for g in out["guides"]] == ["approved", "approved", "approved", "outlier"]
    assert out["guides"][3]["outlier_score"] > 1.5 > max(g["outlier_score"] for g in out["guides"][:3])
    assert {name for name, _ in views._vectors} == {EFFNET}  # only the run's embedders embed the guides
    kept = screen({"guides": guides, "weights": {EFFNET: 1.0}}, settings(screen=False), gallery=views)
    assert [g["status"] for g in kept["guides"]] == ["approved"] * 4
    few = screen({"guides": guides[:2], "weights": {EFFNET: 1.0}}, gallery=views)
    assert [g["status"] for g in few["guides"]] == ["approved"] * 2


def test_rank_fuses_the_approved_guides_rankings_with_the_runs_weights(needle_gallery, isolated_cache):
    gallery, reference, rows = needle_gallery
    paths = [flickr_dir_of(reference, 1), flickr_dir_of(reference, 4)]
    guides = [guide(paths[0], 1, "approved"), guide(paths[1], 2, "outlier")]
    views = NeedleGallery(gallery)
    for weights in ({gallery.embedder_name: 0.9, EFFNET: 0.1}, {gallery.embedder_name: 0.1, EFFNET: 0.9}):
        out = rank({"guides": guides, "weights": weights}, settings(k=4, tiles=False), gallery=views)
        assert set(out["rankings"]) == set(weights) and all(len(lists) == 1 for lists in out["rankings"].values())
        expected = aggregate_rankings(out["rankings"], weights)[:4]  # Eq. 4 with the state's weights
        assert [(h.id, h.score) for h in out["hits"]] == [(id_, pytest.approx(s)) for id_, s in expected]
        assert [h.rank for h in out["hits"]] == [1, 2, 3, 4]
        assert [g["status"] for g in out["guides"]] == ["used", "outlier"]
    assert _name(gallery, rank({"guides": guides, "weights": {EFFNET: 1.0}}, settings(k=1, tiles=False),
                               gallery=views)["hits"][0]) == Path(rows[1]["image"]).name


def _name(gallery, hit):
    return Path(gallery.get([hit.id])[0].path).name


def test_review_results_asks_which_results_are_unwanted_and_refuses_ids_not_shown(needle_gallery):
    gallery = needle_gallery[0]
    hits = gallery.search_text("a dog", k=3)
    graph, config = _alone(review_results), {"configurable": {"thread_id": "results"}}
    paused = graph.invoke({"query": "a dog", "hits": hits}, config)
    asked = paused["__interrupt__"][0].value
    assert asked["kind"] == "results" and [h["id"] for h in asked["hits"]] == [h.id for h in hits]
    assert graph.invoke(Command(resume={"irrelevant": [hits[2].id]}), config)["irrelevant"] == [hits[2].id]
    graph.invoke({"query": "a dog", "hits": hits}, {"configurable": {"thread_id": "bad"}})
    with pytest.raises(SettingsError, match="unknown result"):
        graph.invoke(Command(resume={"irrelevant": ["not-shown"]}), {"configurable": {"thread_id": "bad"}})


def test_learn_updates_and_stores_the_topics_weights_and_ranks_again_without_the_marked(needle_gallery, untrained):
    gallery = untrained
    views = NeedleGallery(gallery)
    ids = gallery.ids()
    rankings = {gallery.embedder_name: [[ids[0], ids[1], ids[2]]], EFFNET: [[ids[2], ids[0], ids[1]]]}
    state = {"topic": "t", "rankings": rankings, "hits": views.hits([(ids[0], 1.0), (ids[2], 0.5), (ids[1], 0.2)]),
             "irrelevant": [ids[2]]}
    assert learn({**state, "irrelevant": []}, gallery=views) == {}
    dry = learn(state, settings(k=5, eta=0.5, learn=False), gallery=views)
    assert not load_trust(gallery).weights  # learn=False: nothing stored
    out = learn(state, settings(k=5, eta=0.5), gallery=views)
    expected = TrustTable().update("t", rankings, [ids[2]], eta=0.5, depth=40, loss="share", shown=[ids[0], ids[2], ids[1]])
    assert out["weights"] == pytest.approx(expected) == dry["weights"]
    assert out["weights"][gallery.embedder_name] > out["weights"][EFFNET]  # EFFNET ranked the marked image first
    assert load_trust(gallery).weights["t"] == pytest.approx(expected)
    assert [h.id for h in out["hits"]] == [ids[0], ids[1]]


@pytest.mark.parametrize("feedback, reads", [("off", 1), ("results", 2)])
def test_a_run_reads_the_trust_weights_once(needle_gallery, isolated_cache, untrained, feedback, reads):
    """Screening and ranking use the weights the run read at its start; learning reads the stored table
    again only to write it back (another session may have learned meanwhile)."""
    _, reference, rows = needle_gallery
    counted = CountingReads(untrained)
    graph = build_needle_graph(counted, visualizers=f"exemplar:{reference}", checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": feedback}}
    context = {"k": 3, "guides": 4, "feedback": feedback, "tiles": False}  # 4 guides: screening runs
    out = graph.invoke({"query": rows[1]["captions"][0], "topic": "t"}, config, context=context)
    if feedback == "results":
        out = graph.invoke(Command(resume={"irrelevant": [out["__interrupt__"][0].value["hits"][-1]["id"]]}),
                           config, context=context)
        assert "t" in load_trust(untrained).weights
    assert out["hits"] and counted.trust_reads == reads
