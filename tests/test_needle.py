"""NEEDLE: Eq. 4 aggregation and Eq. 5 trust updates against hand-computed numbers, guide screening
on planted outliers, smart tiling on a synthetic image, guide caching, and the graph's feedback
interrupts on a small real gallery (two embedders: a tiny random OpenCLIP and the packaged
EfficientNet-Lite0 features)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from PIL import Image, ImageDraw

from helpers.needle_fakes import CountingVisualizer, flickr_dir_of, isolated_cache, needle_gallery  # noqa: F401  (fixtures)
from pictrieve.agents.needle.aggregation import aggregate_rankings, position_score
from pictrieve.agents.needle.anomaly import screen_guides
from pictrieve.agents.needle.trust import TRUST_RECORD, TrustTable, feedback_loss, load_trust
from pictrieve.agents.needle.nodes import NeedleSettings, refine_query
from pictrieve.graphs.needle import build_needle_graph
from pictrieve.agents.settings import SettingsError
from pictrieve.tools.models.guide_images import guide_paths
from pictrieve.vectorstore.tiles import TileIndex, TilingSettings, index_tiles, smart_tiles

# ------------------------------------------------------------------------------ Eq. 4


def test_aggregation_sums_weighted_reciprocal_ranks_over_every_guide_list():
    rankings = {"e1": [["a", "b", "c"], ["b", "a"]], "e2": [["c", "b"]]}
    fused = dict(aggregate_rankings(rankings, {"e1": 0.75, "e2": 0.25}))
    assert fused["a"] == pytest.approx(0.75 * (1 + 1 / 2))
    assert fused["b"] == pytest.approx(0.75 * (1 / 2 + 1) + 0.25 * (1 / 2))
    assert fused["c"] == pytest.approx(0.75 * (1 / 3) + 0.25 * 1)
    assert [id_ for id_, _ in aggregate_rankings(rankings, {"e1": 0.75, "e2": 0.25})] == ["b", "a", "c"]
    # No damping constant (unlike RRF), and an untrusted embedder contributes nothing.
    assert dict(aggregate_rankings(rankings, {"e1": 1.0, "e2": 0.0}))["c"] == pytest.approx(1 / 3)


def test_aggregation_counts_an_image_once_per_list_at_its_best_tile_and_respects_depth():
    # Tile lists mapped to parents: image "a" owns the 1st and 3rd tiles of one list.
    fused = dict(aggregate_rankings({"e": [["a", "b", "a", "c"]]}, {"e": 1.0}))
    assert fused == {"a": pytest.approx(1.0), "b": pytest.approx(0.5), "c": pytest.approx(1 / 3)}
    assert "c" not in dict(aggregate_rankings({"e": [["a", "b", "c"]]}, {"e": 1.0}, depth=2))
    assert position_score(3) == pytest.approx(1 / 3) and position_score(3, depth=2) == 0.0


# ------------------------------------------------------------------------------ Eq. 5


def test_feedback_loss_charges_each_embedder_for_irrelevant_images_it_ranked_high():
    assert feedback_loss([["x", "a", "b"], ["a", "x"]], {"x"}) == pytest.approx(1 + 1 / 2)
    assert feedback_loss([["a", "b"]], {"x"}) == 0.0


def test_mwu_update_normalises_and_punishes_the_embedder_that_ranked_irrelevant_images_first():
    table = TrustTable()
    rankings = {"good": [["a", "b", "x"]], "bad": [["x", "a", "b"]]}
    weights = table.update("dogs", rankings, {"x"}, eta=0.5)
    # Hand-computed: good pays 1/3, bad pays 1 -> 0.5 * (1 - 0.5/3) and 0.5 * (1 - 0.5), renormalised.
    good, bad = 0.5 * (1 - 0.5 / 3), 0.5 * 0.5
    assert weights == pytest.approx({"good": good / (good + bad), "bad": bad / (good + bad)})
    assert sum(weights.values()) == pytest.approx(1.0)
    assert table.for_topic("cats", ["good", "bad"]) == {"good": 0.5, "bad": 0.5}  # topics are separate


def test_mwu_clamps_so_a_weight_never_goes_negative():
    table = TrustTable()
    # eta * loss = 0.9 * (1 + 1/2 + 1/3) > 1: the authors' code would make this weight negative.
    weights = table.update("t", {"a": [["x", "y", "z"]], "b": [["p", "q", "r"]]}, {"x", "y", "z"}, eta=0.9)
    assert 0 < weights["a"] < 0.05 and weights["b"] > 0.95
    again = table.update("t", {"a": [["p"]], "b": [["p"]]}, set(), eta=0.9)
    assert again == pytest.approx(weights)  # no feedback, no change
    with pytest.raises(ValueError):
        table.update("t", {"a": [["x"]]}, {"x"}, eta=1.5)


# ------------------------------------------------------------------------------ anomaly detection


def _cluster_plus_outlier(m: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=dim)
    inliers = [centre + 0.05 * rng.normal(size=dim) for _ in range(m - 1)]
    return np.stack(inliers + [rng.normal(size=dim) * 3])


@pytest.mark.parametrize("m", [4, 8])
def test_screening_flags_a_planted_outlier_guide(m):
    vectors = _cluster_plus_outlier(m)
    result = screen_guides({"e1": vectors, "e2": vectors}, {"e1": 0.5, "e2": 0.5}, tau=1.5)
    assert result.dropped == [m - 1]
    assert all(score < 1.5 for score in result.scores[:-1])


def test_screening_never_drops_every_guide_and_skips_tiny_sets():
    rng = np.random.default_rng(1)
    spread = rng.normal(size=(4, 16))
    result = screen_guides({"e": spread}, {"e": 1.0}, tau=1e-6)  # everything "outlies" at this tau
    assert len(result.kept) == 1 and result.kept[0] == int(np.argmin(result.scores))
    assert screen_guides({"e": spread[:2]}, {"e": 1.0}, tau=1e-6).kept == [0, 1]


def test_umap_reduction_runs_when_asked():
    pytest.importorskip("umap")
    vectors = _cluster_plus_outlier(8)
    result = screen_guides({"e": vectors}, {"e": 1.0}, reducer="umap")
    assert result.reducer == "umap" and len(result.scores) == 8 and result.kept


def test_screening_weights_embedders_by_trust():
    clean = _cluster_plus_outlier(4)
    noisy = np.random.default_rng(5).normal(size=(4, 32))
    trusted = screen_guides({"clean": clean, "noisy": noisy}, {"clean": 1.0, "noisy": 0.0})
    assert trusted.dropped == [3]


# ------------------------------------------------------------------------------ tiling


def _busy_corner_image() -> Image.Image:
    """Empty except for many small filled squares in the top-left quadrant."""
    image = Image.new("RGB", (400, 400), "white")
    draw = ImageDraw.Draw(image)
    for row in range(4):
        for col in range(4):
            x, y = 10 + col * 45, 10 + row * 45
            draw.rectangle([x, y, x + 25, y + 25], fill="black")
    return image


def test_tiling_splits_deeper_where_the_objects_are_and_stops_at_min_size():
    settings = TilingSettings(max_objects=3, min_fraction=0.25, max_aspect=2.5)
    tiles = smart_tiles(_busy_corner_image(), settings)
    area = lambda box: (box[2] - box[0]) * (box[3] - box[1])  # noqa: E731
    assert sum(area(box) for box in tiles) == 400 * 400  # a partition of the image
    in_corner = [box for box in tiles if box[2] <= 200 and box[3] <= 200]
    elsewhere = [box for box in tiles if box not in in_corner]
    assert min(area(b) for b in in_corner) < min(area(b) for b in elsewhere)
    assert all(min(b[2] - b[0], b[3] - b[1]) >= 100 for b in tiles)  # 0.25 of the short side
    assert smart_tiles(Image.new("RGB", (300, 200), "white"), settings) == [(0, 0, 300, 200)]


# ------------------------------------------------------------------------------ guide images


def test_generated_guides_are_cached_by_prompt_and_seed(tmp_path):
    visualizer = CountingVisualizer()
    first = guide_paths(visualizer, "a dog", 2, seed=1, cache_dir=tmp_path)
    again = guide_paths(visualizer, "a dog", 2, seed=1, cache_dir=tmp_path)
    assert first == again and len(first) == 2 and visualizer.calls == 1
    assert all(Path(p).is_file() for p in first)
    guide_paths(visualizer, "a dog", 2, seed=2, cache_dir=tmp_path)
    assert visualizer.calls == 2


# ------------------------------------------------------------------------------ the graph


def _path_of(gallery, hit):
    return Path(gallery.get([hit.id])[0].path).name


def test_needle_finds_the_photos_its_guides_show(needle_gallery, isolated_cache):
    gallery, reference, rows = needle_gallery
    graph = build_needle_graph(gallery, visualizers=f"exemplar:{reference}")
    out = graph.invoke({"query": rows[2]["captions"][0]}, context={"k": 5, "guides": 1})
    # The exemplar of a query that is photo 2's own caption is photo 2, and photo 2 is in the gallery.
    assert [g["path"] for g in out["guides"]] == [str(flickr_dir_of(reference, 2))]
    assert _path_of(gallery, out["hits"][0]) == Path(rows[2]["image"]).name
    assert out["weights"] == {gallery.embedder_name: 0.5, "efficientnet-lite0": 0.5}
    assert [h.rank for h in out["hits"]] == [1, 2, 3, 4, 5]


class FixedPictures:
    """A generator stand-in that draws the same pictures for any prompt, so screening sees fixed guides."""

    name = "fixed"
    generates = True

    def __init__(self, pictures: list[Image.Image]):
        self.pictures = pictures

    def visualize(self, prompt, *, n=1, seed=None):
        return self.pictures[:n]


def test_screening_drops_the_one_unrelated_guide_among_four(needle_gallery, isolated_cache, flickr_dir):
    """Three views of photo 2 (a dog) and photo 9 (a man drilling ice) as the four guides: screening
    with the real EfficientNet features marks photo 9's guide an outlier, and the search uses the
    other three. Fixed pictures and a deterministic embedder: no random model chooses anything."""
    from PIL import ImageOps

    gallery, _, rows = needle_gallery
    dog = Image.open(flickr_dir / rows[2]["image"]).convert("RGB")
    width, height = dog.size
    cropped = dog.crop((width // 10, height // 10, width, height)).resize(dog.size)
    unrelated = Image.open(flickr_dir / rows[9]["image"]).convert("RGB")
    graph = build_needle_graph(gallery, visualizers=[FixedPictures([dog, ImageOps.mirror(dog), cropped, unrelated])])
    out = graph.invoke({"query": rows[2]["captions"][0]},
                       context={"k": 3, "guides": 4, "embedders": ["efficientnet-lite0"]})
    statuses = {g["id"]: g["status"] for g in out["guides"]}
    assert statuses == {"g1": "used", "g2": "used", "g3": "used", "g4": "outlier"}
    scores = {g["id"]: g["outlier_score"] for g in out["guides"]}
    assert scores["g4"] > NeedleSettings().tau > max(scores["g1"], scores["g2"], scores["g3"])
    assert _path_of(gallery, out["hits"][0]) == Path(rows[2]["image"]).name


def test_guide_review_replaces_rejected_guides_before_searching(needle_gallery, isolated_cache):
    gallery, reference, rows = needle_gallery
    graph = build_needle_graph(gallery, visualizers=f"exemplar:{reference}", checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "guides"}}
    context = {"k": 3, "guides": 2, "feedback": "guides"}
    paused = graph.invoke({"query": rows[4]["captions"][0]}, config, context=context)
    shown = paused["__interrupt__"][0].value["guides"]
    assert [g["id"] for g in shown] == ["g1", "g2"]
    paused = graph.invoke(Command(resume={"rejected": ["g2"]}), config, context=context)
    replacement = paused["__interrupt__"][0].value["guides"]
    assert len(replacement) == 1 and replacement[0]["replaces"] == "g2"
    assert replacement[0]["path"] not in {g["path"] for g in shown}  # the next-best exemplar, not the same
    out = graph.invoke(Command(resume={"approved": [replacement[0]["id"]]}), config, context=context)
    statuses = {g["id"]: g["status"] for g in out["guides"]}
    assert statuses == {"g1": "used", "g2": "discarded", replacement[0]["id"]: "used"}
    with pytest.raises(SettingsError, match="unknown guide"):
        graph.invoke({"query": "a dog"}, {"configurable": {"thread_id": "bad"}}, context=context)
        graph.invoke(Command(resume={"rejected": ["g9"]}), {"configurable": {"thread_id": "bad"}}, context=context)


def test_result_feedback_lowers_the_trust_of_the_embedder_that_ranked_them_and_persists(needle_gallery, isolated_cache):
    gallery, reference, rows = needle_gallery
    graph = build_needle_graph(gallery, visualizers=f"exemplar:{reference}", checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "results"}}
    context = {"k": 4, "guides": 2, "feedback": "results", "eta": 0.5, "trust_loss": "eq5"}
    paused = graph.invoke({"query": rows[1]["captions"][0], "topic": "test"}, config, context=context)
    hits = paused["__interrupt__"][0].value["hits"]
    state = graph.get_state(config).values
    rankings = state["rankings"]
    marked = [hits[-1]["id"]]
    losses = {name: feedback_loss(lists, marked, depth=40) for name, lists in rankings.items()}
    out = graph.invoke(Command(resume={"irrelevant": marked}), config, context=context)
    stored = load_trust(gallery).weights["test"]
    assert stored == pytest.approx(out["weights"])
    # Hand-computed Eq. 5 from the session's own rankings: uniform start, clamped factor, renormalised.
    raw = {name: 0.5 * max(0.01, 1 - 0.5 * loss) for name, loss in losses.items()}
    assert out["weights"] == pytest.approx({name: w / sum(raw.values()) for name, w in raw.items()})
    assert max(losses.values()) > 0  # the marked image was in some ranking, so some weight moved
    assert marked[0] not in {h.id for h in out["hits"]}
    gallery.put_json(TRUST_RECORD, {})  # leave the module's gallery untrained for the other tests


def test_tiles_are_indexed_resumably_and_searched(needle_gallery, isolated_cache):
    gallery, reference, rows = needle_gallery
    settings = TilingSettings(min_fraction=0.4)
    report = index_tiles(gallery, settings=settings, progress=False, limit=4)
    assert report.tiled == {name: 4 for name in gallery.embedder_names}
    assert all(report.tiles[name] >= 4 for name in gallery.embedder_names)
    again = index_tiles(gallery, settings=settings, progress=False, limit=4)
    assert again.skipped == 4 and again.tiled == {}
    view = gallery.with_embedder("efficientnet-lite0")
    first = gallery.ids()[0]
    vector = view.embeddings([first])
    assert TileIndex(view).rank_ids(vector, 3)[0][0][0] == first  # its whole-image tile matches itself
    # Ranking by tiles still finds images that are not tiled yet (an interrupted `pictrieve tile`).
    from pictrieve.agents.needle.search import guide_rankings

    untiled = [id_ for id_ in gallery.ids() if id_ not in TileIndex(view).tiled_ids()][0]
    ranked = guide_rankings({"efficientnet-lite0": view}, {"efficientnet-lite0": view.embeddings([untiled])},
                            depth=5, tiles=True)
    assert ranked["efficientnet-lite0"][0][0] == untiled
    with pytest.raises(Exception, match="other settings"):
        index_tiles(gallery, settings=TilingSettings(min_fraction=0.3), progress=False, limit=1)


def test_tiling_says_each_photo_split_and_every_few_tiles_embedded(needle_gallery, isolated_cache, monkeypatch):
    """Issue 40: `tile` went 48 s between progress updates (its bar counted batches of photos): now each photo
    split and each few tiles embedded, per embedder, move the note on. Written nowhere: the collections here only
    count what they are given."""
    from pictrieve.vectorstore import tiles

    gallery, _, _ = needle_gallery
    monkeypatch.setattr(tiles, "EMBED_CHUNK", 2)
    plan = tiles.plan_tiles(gallery, None, TilingSettings(min_fraction=0.4))
    views = [gallery.with_embedder(name) for name in plan.embedders]

    class Counting:
        rows = 0

        def upsert(self, ids, embeddings, metadatas):
            self.rows += len(ids)

    sinks = [Counting() for _ in views]
    notes: list[str] = []
    report = tiles.tile_images(views, sinks, plan.todo[:3], plan.settings, on_progress=notes.append)
    assert notes[:3] == [f"split {n}/3 photos into tiles" for n in (1, 2, 3)]
    for view, sink in zip(views, sinks):
        said = [note for note in notes if note.startswith(f"{view.embedder_name}: embedded ")]
        done = [int(note.split()[-2].split("/")[0]) for note in said]
        extra = report.tiles[view.embedder_name] - 3  # the tiles beside the three whole photos
        assert done == list(range(2, extra, 2)) + [extra] and said[-1].endswith(f"/{extra} tiles")
        assert sink.rows == report.tiles[view.embedder_name]


def test_tiles_embedded_across_photos_equal_each_tile_embedded_alone(needle_gallery, isolated_cache, monkeypatch):
    """Issue 40: embedder calls take tiles across photos (and a photo's shared work is done once); a tile's vector
    is still its own crop's, whatever call it went in and in whatever order, and every tile lands under its id."""
    from pictrieve.tools.core.images import load_image
    from pictrieve.vectorstore import tiles

    gallery, _, _ = needle_gallery
    plan = tiles.plan_tiles(gallery, None, TilingSettings(min_fraction=0.4))
    views = [gallery.with_embedder(name) for name in plan.embedders]

    class Keeping:
        def __init__(self) -> None:
            self.rows: dict[str, tuple[np.ndarray, dict]] = {}

        def upsert(self, ids, embeddings, metadatas):
            self.rows.update({id_: (np.asarray(v), m) for id_, v, m in zip(ids, embeddings, metadatas)})

    kept = {}
    for chunk in (3, 1000):
        monkeypatch.setattr(tiles, "EMBED_CHUNK", chunk)
        sinks = [Keeping() for _ in views]
        tiles.tile_images(views, sinks, plan.todo[:4], plan.settings)
        kept[chunk] = sinks
    for view, small, large in zip(views, kept[3], kept[1000]):
        assert small.rows.keys() == large.rows.keys() and len(small.rows) > 4 + 4  # some photo was split
        for id_, (vector, meta) in small.rows.items():
            np.testing.assert_allclose(vector, large.rows[id_][0], atol=1e-5)
            if meta["tile"]:
                target = next(t for t in plan.todo if t.id == meta["parent"])
                box = tuple(int(v) for v in meta["box"].split(","))
                alone = view.embedder.embed_images([load_image(target.path).crop(box)])[0]
                np.testing.assert_allclose(vector, alone, atol=1e-5)


class _KeepingRows:
    """A tile collection that keeps what each upsert got (ids in order), writing nowhere."""

    def __init__(self, log: list | None = None, name: str = "") -> None:
        self.upserts: list[list[str]] = []
        self.log, self.name = log, name

    def upsert(self, ids, embeddings, metadatas):
        self.upserts.append(list(ids))
        if self.log is not None:
            self.log.append(("write", self.name, list(ids)))


def test_tiling_runs_the_embedders_at_once(needle_gallery, isolated_cache, monkeypatch):
    """Issue 40.4: `tile` ran its embedders one after another on one thread (45 CPU-s in 111 s on 2 cores). Each
    embedder's first model call here waits until every embedder has made its first: one after another, the first
    would wait for the others for ever (the barrier breaks instead)."""
    import threading

    from pictrieve.vectorstore import tiles

    gallery, _, _ = needle_gallery
    plan = tiles.plan_tiles(gallery, None, TilingSettings(min_fraction=0.4))
    views = [gallery.with_embedder(name) for name in plan.embedders]
    together = threading.Barrier(len(views), timeout=60)
    for view in views:
        embedder, embed = view.embedder, view.embedder.embed_preprocessed
        first = [True]

        def meeting(batch, embed=embed, first=first):
            if first[0]:
                first[0] = False
                together.wait()
            return embed(batch)

        monkeypatch.setattr(embedder, "embed_preprocessed", meeting)
    report = tiles.tile_images(views, [_KeepingRows() for _ in views], plan.todo[:4], plan.settings)
    assert report.tiled == {name: 4 for name in plan.embedders}


def test_tiling_writes_each_batch_whole_photos_last_and_holds_few_photos_ahead(needle_gallery, isolated_cache):
    """Each embedder writes a batch in one upsert, its whole-image rows (what marks a photo tiled) last; a batch
    counts as done when every embedder wrote it; the photos are split at most SPLIT_AHEAD batches ahead of the
    embedders, so a large gallery's pixels are not all held at once."""
    from pictrieve.vectorstore import tiles

    gallery, _, _ = needle_gallery
    plan = tiles.plan_tiles(gallery, None, TilingSettings(min_fraction=0.4))
    views = [gallery.with_embedder(name) for name in plan.embedders]
    targets = plan.todo[:7]
    log: list = []
    sinks = [_KeepingRows(log, view.embedder_name) for view in views]
    done: list[int] = []
    report = tiles.tile_images(views, sinks, targets, plan.settings, batch_size=2,
                               on_progress=lambda note: log.append(("note", note)),
                               on_batch=lambda n: (done.append(n), log.append(("batch", n))))
    assert done == [2, 2, 2, 1] and report.tiled == {name: 7 for name in plan.embedders}
    order = [target.id for target in targets]
    for sink in sinks:
        assert len(sink.upserts) == 4
        for number, ids in enumerate(sink.upserts):
            wholes = [id_ for id_ in ids if id_.endswith("#0")]
            assert wholes == [f"{id_}#0" for id_ in order[2 * number : 2 * number + 2]]
            assert ids[-len(wholes):] == wholes  # the whole-image rows go in last
    split = 0
    for kind, *rest in log:
        if kind == "note" and rest[0].startswith("split "):
            split += 1
        elif kind == "write":
            batch = order.index(rest[1][-1].removesuffix("#0")) // 2
            assert split <= 2 * (batch + 1 + tiles.SPLIT_AHEAD)


def test_a_failing_embedder_stops_the_tiling_and_its_error_is_raised(needle_gallery, isolated_cache, monkeypatch):
    import threading

    from pictrieve.vectorstore import tiles

    gallery, _, _ = needle_gallery
    plan = tiles.plan_tiles(gallery, None, TilingSettings(min_fraction=0.4))
    views = [gallery.with_embedder(name) for name in plan.embedders]

    def broken(batch):
        raise RuntimeError("the model fell over")

    monkeypatch.setattr(views[-1].embedder, "embed_preprocessed", broken)
    sinks = [_KeepingRows() for _ in views]
    with pytest.raises(RuntimeError, match="the model fell over"):
        tiles.tile_images(views, sinks, plan.todo[:6], plan.settings, batch_size=1)
    # nothing its model embedded was written (a photo with no tile but the whole one needs no model call)
    assert not [id_ for ids in sinks[-1].upserts for id_ in ids if not id_.endswith("#0")]
    assert not [thread.name for thread in threading.enumerate() if thread.name.startswith("tiles-")]


def test_tile_embedders_put_a_centre_crop_through_the_trunk_once_with_the_same_vectors(needle_gallery):
    """Issue 40.4: `efficientnet-lite0` and `offline-labels` both run the classifier's centre crop of a tile through
    the same trunk; inside `tile` (sharing_trunk_rows) the second takes the first's row, bit for bit the same."""
    from pictrieve.tools.core.images import load_image
    from pictrieve.tools.models.embedders.image_features import ImageFeatureEmbedder
    from pictrieve.tools.models.embedders.offline import OfflineEmbedder
    from pictrieve.tools.models.embedders.trunk_sharing import sharing_trunk_rows

    gallery, _, _ = needle_gallery
    images = [load_image(item.path) for item in list(gallery.items())[:2]]
    features, labels = ImageFeatureEmbedder(), OfflineEmbedder("")
    assert features.trunk_runtime is not None  # ONNX Runtime, the CPU default: the runtime that shares
    alone = features.embed_images(images), labels.embed_images(images)
    with sharing_trunk_rows() as rows:
        shared = features.embed_images(images), labels.embed_images(images)
    assert rows.computed == 4  # each photo and its mirror; offline-labels' one crop per photo was shared
    assert np.array_equal(shared[0], alone[0]) and np.array_equal(shared[1], alone[1])


def test_the_tiling_bar_shows_where_the_splitter_and_each_embedder_are():
    from pictrieve.vectorstore.tiles import ProgressNotes

    notes = ProgressNotes()
    assert notes.line("split 1/66 photos into tiles") == "split 1/66"
    assert notes.line("loading the SSD-MobileNet COCO detector") == "loading the SSD-MobileNet COCO detector; split 1/66"
    assert notes.line("offline-labels:detect: embedded 4/53 tiles") == "split 1/66, offline-labels:detect 4/53 tiles"
    assert notes.line("offline: embedded 8/53 tiles") == "split 1/66, offline 8/53, offline-labels:detect 4/53 tiles"
    assert notes.line("split 2/66 photos into tiles") == "split 2/66, offline 8/53, offline-labels:detect 4/53 tiles"


def test_settings_and_query_refinement():
    assert refine_query("  A dog,  on the beach!! ", prefix="a photo of") == "a photo of A dog on the beach"
    with pytest.raises(SettingsError, match="feedback"):
        NeedleSettings(feedback="sometimes")
    with pytest.raises(SettingsError, match="eta"):
        NeedleSettings(eta=1.0)


def test_a_failing_visualizer_contributes_no_guides_and_none_at_all_is_a_clear_error(needle_gallery, isolated_cache):
    gallery, reference, rows = needle_gallery
    broken = build_needle_graph(gallery, visualizers=[CountingVisualizer(fail=True)])
    with pytest.raises(SettingsError, match="no visualizer produced"):
        broken.invoke({"query": "a dog"})
    mixed = build_needle_graph(gallery, visualizers=[CountingVisualizer(fail=True), f"exemplar:{reference}"])
    out = mixed.invoke({"query": rows[0]["captions"][0]}, context={"k": 2, "guides": 1})
    assert [g["visualizer"] for g in out["guides"]] == [f"exemplar:{reference}"]
    with pytest.raises(SettingsError, match="visualizer"):
        build_needle_graph(gallery).invoke({"query": "a dog"})


# ------------------------------------------------------------------------------ embedder and CLI


def test_efficientnet_features_embed_images_only(flickr_dir):
    from PIL import ImageOps

    from pictrieve.tools.models.embedders.factory import create_embedder
    from pictrieve.tools.models.embedders.image_features import ImageOnlyEmbedderError

    embedder = create_embedder("efficientnet-lite0")
    paths = sorted((flickr_dir / "images").glob("*.jpg"))[:3]
    images = [Image.open(p).convert("RGB") for p in paths]
    vectors = embedder.embed_images(images + [ImageOps.mirror(images[0])])
    assert vectors.shape == (4, 1280) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    # A photo is closer to its own mirror image than to two other photos.
    assert vectors[3] @ vectors[0] > max(vectors[3] @ vectors[1], vectors[3] @ vectors[2])
    with pytest.raises(ImageOnlyEmbedderError, match="images only"):
        embedder.embed_texts(["a dog"])


def test_cli_needle_search_with_result_feedback_and_tile(needle_gallery, isolated_cache):
    from click.testing import CliRunner

    from pictrieve.cli.main import cli

    gallery, reference, rows = needle_gallery
    gallery.put_json(TRUST_RECORD, {})  # the trust earlier tests taught this (module-wide) gallery: forgotten
    # One guide: the exemplar of photo 3's own caption is photo 3 (as in test_needle_finds_the_photos_its_guides_show)
    args = ["search", rows[3]["captions"][0], "-g", gallery.location, "--method", "needle", "--guides", "1",
            "--visualizer", f"exemplar:{reference}", "-k", "3", "--json"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    hits = json.loads(out.stdout)["hits"]
    assert Path(hits[0]["path"]).name == Path(rows[3]["image"]).name
    out = CliRunner().invoke(cli, args + ["--feedback", "results", "--topic", "cli"], input="3\n")
    assert out.exit_code == 0, out.output
    assert hits[2]["id"] not in {h["id"] for h in json.loads(out.stdout)["hits"]}
    assert "cli" in load_trust(gallery).weights
    gallery.put_json(TRUST_RECORD, {})
    out = CliRunner().invoke(cli, ["tile", "-g", gallery.location, "--limit", "2", "--min-fraction", "0.4"])
    assert out.exit_code == 0, out.output
    assert "already tiled" in out.output
    bad = CliRunner().invoke(cli, ["search", "a dog", "-g", gallery.location, "--method", "needle"])
    assert bad.exit_code != 0 and "--visualizer" in bad.output
