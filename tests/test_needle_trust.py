"""NEEDLE's learned trust, as the paper claims it: the simulated person's marking rule, trust leaving a
planted bad embedder on fixed vectors (Eq. 4 + Eq. 5 in a loop), and the evaluation's learn-then-freeze
split on a small real gallery (planted random-projection embedders, exemplar guides, real MiniLM)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pictrieve.agents.needle.aggregation import aggregate_rankings
from pictrieve.agents.needle.trust import TrustTable, feedback_losses, load_trust
from pictrieve.evaluation.controls import RandomProjectionEmbedder
from pictrieve.evaluation.needle_trust import (
    ResultsFile,
    mark_irrelevant,
    plan_rows,
    run_trust_experiment,
    split_queries,
    summarise,
    topic_of,
)
from pictrieve.evaluation.relevance import MATCH_THRESHOLD, CaptionJudge, choose_threshold

# ------------------------------------------------------------------------------ the simulated person

CAPTIONS = {
    "target": ["A brown dog runs along the beach .", "A dog running on the sand near the sea ."],
    "other-dog": ["A black dog is running across a sandy beach .", "A dog plays by the ocean ."],
    "cyclist": ["A man rides his bicycle down a city street .", "A cyclist in traffic ."],
    "kitchen": ["Two women are cooking in a kitchen .", "People preparing food at a stove ."],
}
QUERY = CAPTIONS["target"][0]


@pytest.fixture(scope="module")
def judge():
    return CaptionJudge(CAPTIONS)


def test_the_person_marks_photos_whose_captions_do_not_match_not_everything_but_the_target(judge):
    shown = ["cyclist", "other-dog", "target", "kitchen"]
    # Another dog on another beach is what the query asks for: a person keeps it.
    assert judge.irrelevant(QUERY, shown) == ["cyclist", "kitchen"]
    assert mark_irrelevant("person", judge, QUERY, "target", shown) == ["cyclist", "kitchen"]
    # The earlier simulation marked the other dog too; it stays available for comparison only.
    assert mark_irrelevant("all-but-target", None, QUERY, "target", shown) == ["cyclist", "other-dog", "kitchen"]
    scores = judge.match(QUERY, shown)
    assert scores["target"] == pytest.approx(1.0, abs=1e-5)  # the query is one of its own captions
    assert scores["other-dog"] >= MATCH_THRESHOLD > max(scores["cyclist"], scores["kitchen"])
    with pytest.raises(ValueError, match="unknown marking rule"):
        mark_irrelevant("everyone", judge, QUERY, "target", shown)


def test_the_threshold_separates_a_photos_other_captions_from_other_photos(judge):
    photos = list(CAPTIONS.values()) + [["A child swings on a swing .", "A kid on a playground swing ."],
                                        ["Snowy mountains under a blue sky .", "A mountain covered in snow ."]]
    chosen = choose_threshold(photos, encoder=judge.encoder)
    # Each photo's first caption matches its other caption (positives, all above 0.48 with MiniLM).
    # The two dog photos match each other both ways (0.67, 0.72); every other pair is below 0.2. So the
    # best cut keeps every positive and lets exactly those 2 of the 30 negative pairs through.
    assert chosen["positive_pairs"] == 6 and chosen["negative_pairs"] == 30
    assert chosen["tpr"] == 1.0 and chosen["fpr"] == pytest.approx(2 / 30) and chosen["j"] == pytest.approx(28 / 30)
    assert 0.2 < chosen["threshold"] < 0.49 and chosen["threshold"] == round(chosen["threshold"], 3)


@pytest.mark.slow
def test_the_default_threshold_is_the_one_chosen_on_flickr8k_train(judge):
    from pictrieve.evaluation.datasets import CaptionedFolder

    train = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "flickr8k-train"
    if not (train / "captions.jsonl").is_file():
        pytest.skip("flickr8k-train not found")
    photos = CaptionedFolder.load(train, split="dev")
    assert choose_threshold(list(photos.captions.values()), encoder=judge.encoder)["threshold"] == MATCH_THRESHOLD


# ------------------------------------------------------------------------------ Eq. 4 + Eq. 5 in a loop


def _rank(vectors: np.ndarray, guide: np.ndarray, depth: int) -> list[str]:
    sims = vectors @ guide / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(guide))
    return [f"i{j}" for j in np.argsort(-sims, kind="stable")[:depth]]


def _learn_with_a_planted_embedder(loss: str, rounds: int = 100, seed: int = 1) -> dict[str, float]:
    """40 fixed photos in 4 topics; three real embedders see the topics through more and more noise, the
    planted one sees noise only. Each round: 4 guides of a topic, Eq. 4 fusion with the current weights,
    the top 5 shown, the person marks the off-topic ones, the weights learn."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, 16))
    topics = np.repeat(np.arange(4), 10)
    spaces = {f"real{k}": centres[topics] + noise * rng.normal(size=(40, 16)) for k, noise in enumerate((2, 3, 4))}
    spaces["planted"] = rng.normal(size=(40, 16))
    table = TrustTable()
    for round_ in range(rounds):
        topic = round_ % 4
        guides = [centres[topic] + 0.3 * rng.normal(size=16) for _ in range(4)]
        rankings = {name: [_rank(vectors, g if name != "planted" else rng.normal(size=16), 20) for g in guides]
                    for name, vectors in spaces.items()}
        shown = [id_ for id_, _ in aggregate_rankings(rankings, table.for_topic("t", list(spaces)))[:5]]
        irrelevant = [id_ for id_ in shown if topics[int(id_[1:])] != topic]  # the person: off-topic photos
        table.update("t", rankings, irrelevant, eta=0.2, depth=20, loss=loss, shown=shown)
    return table.for_topic("t", list(spaces))


def test_trust_leaves_a_planted_bad_embedder_with_the_share_loss_and_not_with_eq5():
    # The paper's Eq. 5 charges an embedder only for marked photos it ranked, so the planted one, whose
    # picks seldom reach the shown top 5 (the real embedders agree with each other, it agrees with no
    # one), is seldom charged and gains while the real ones pay for every off-topic photo shown.
    paper = _learn_with_a_planted_embedder("eq5")
    assert paper["planted"] > 0.4
    # The share of what each embedder ranked high among the shown photos that was marked: the planted
    # embedder's shown picks are off-topic, so its share is the highest whenever it is judged at all.
    share = _learn_with_a_planted_embedder("share")
    assert share["planted"] < 0.15 and share["planted"] < min(w for name, w in share.items() if name != "planted")


def test_share_loss_divides_eq5_by_what_the_embedder_ranked_of_the_shown_page():
    rankings = {"a": [["x", "y", "z"]], "b": [["y", "p"]], "unseen": [["q", "r"]]}
    shown, marked = ["x", "y"], ["x"]
    losses = feedback_losses(rankings, marked, loss="share", shown=shown)
    assert losses["a"] == pytest.approx(1 / (1 + 1 / 2))  # x at 1 marked, of x at 1 and y at 2 shown
    assert losses["b"] == 0.0  # ranked only y, which the person kept
    assert losses["unseen"] == pytest.approx((losses["a"] + losses["b"]) / 2)  # no evidence: the mean
    assert feedback_losses(rankings, marked) == {"a": 1.0, "b": 0.0, "unseen": 0.0}  # Eq. 5
    with pytest.raises(ValueError, match="needs the shown"):
        feedback_losses(rankings, marked, loss="share")


def test_an_embedder_absent_from_a_round_keeps_what_it_learned():
    """A topic's weights for an embedder that did not rank this query (a gallery view not searched this
    time) survive the round: only the embedders that ranked are charged, and the absent one's share
    is renormalised, not reset to uniform."""
    table = TrustTable(weights={"t": {"a": 0.5, "b": 0.3, "kept": 0.2}})
    table.update("t", {"a": [["x", "y"]], "b": [["y", "z"]]}, ["x"], eta=0.5)
    after = table.for_topic("t", ["a", "b", "kept"])
    assert set(table.weights["t"]) == {"a", "b", "kept"}
    assert after["kept"] / after["b"] == pytest.approx(0.2 / 0.3)  # neither was charged: same ratio
    assert after["a"] / after["b"] == pytest.approx(0.5 * 0.5 / 0.3)  # a ranked the marked x first


# ------------------------------------------------------------------------------ the experiment


def test_split_queries_gives_disjoint_seeded_photos():
    pairs = [(f"q{n}", f"t{n}") for n in range(10)]
    test, teach = split_queries(pairs, 3, 5, seed=0)
    assert len(test) == 3 and len(teach) == 5 and not {t for _, t in test} & {t for _, t in teach}
    assert split_queries(pairs, 3, 5, seed=0) == (test, teach)
    with pytest.raises(ValueError, match="need that many photos"):
        split_queries(pairs, 6, 5)
    with pytest.raises(ValueError, match="one query per photo"):
        split_queries(pairs + [("again", "t0")], 1, 1)


def test_random_projection_control_is_deterministic_and_registered():
    from PIL import Image

    from pictrieve.tools.models.embedders.factory import create_embedder

    control = create_embedder("random-projection:3")
    assert isinstance(control, RandomProjectionEmbedder) and control.name == "random-projection:3"
    photo = Image.new("RGB", (20, 10), (200, 30, 30))
    assert np.array_equal(control.embed_images([photo]), RandomProjectionEmbedder(3).embed_images([photo]))
    assert not np.allclose(control.embed_images([photo]), RandomProjectionEmbedder(4).embed_images([photo]))
    texts = control.embed_texts(["a dog", "a dog", "a cat"])
    assert np.allclose(texts[0], texts[1]) and abs(float(texts[0] @ texts[2])) < 0.6


@pytest.fixture(scope="module")
def trust_folders(flickr_dir, tmp_path_factory):
    rows = [json.loads(line) for line in (flickr_dir / "captions.jsonl").read_text().splitlines()[:20]]
    root = tmp_path_factory.mktemp("trust")
    for name, part in (("eval", rows[:8]), ("reference", rows[8:20])):
        (root / name).mkdir()
        (root / name / "captions.jsonl").write_text("\n".join(
            json.dumps({"image": str(flickr_dir / r["image"]), "captions": r["captions"]}) for r in part))
    return root


def _run(folders, tmp_path, out, **overrides):
    settings = dict(visualizers=[f"exemplar:{folders / 'reference'}"], embedders=["random-projection:1", "random-projection:2"],
                    control="random-projection:3", text_embedder="random-projection:1", test_queries=3,
                    feedback_queries=4, guides=2, trusts={"eq5": 0.2, "share": 0.2}, out=out, gallery_location=tmp_path / "g", progress=False)
    return run_trust_experiment(folders / "eval", **{**settings, **overrides})


def test_trust_is_learned_on_feedback_queries_then_frozen_for_the_test_queries(trust_folders, tmp_path, monkeypatch):
    from pictrieve.vectorstore.gallery import Gallery

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "per-query.jsonl"
    report = _run(trust_folders, tmp_path, out)
    lines = ResultsFile(out).read()
    config = lines[0]["config"]
    feedback = [line for line in lines if line["kind"] == "feedback"]
    tests = [line for line in lines if line["kind"] == "test"]
    assert [line["n"] for line in feedback] == [0, 1, 2, 3] and [line["n"] for line in tests] == [0, 1, 2]
    assert not {line["target"] for line in feedback} & {line["target"] for line in tests}

    learners, rows = plan_rows(config["embedders"], config["control"], config["trusts"])
    old_rule = next(learner for learner in learners if learner.rule == "all-but-target")
    for line in feedback:  # the earlier rule marks every shown photo but the target, so weights move
        step = line["learners"][old_rule.name]
        assert step["irrelevant"] == [id_ for id_ in step["shown"] if id_ != line["target"]]
    learned = feedback[-1]["learners"][old_rule.name]["weights"]
    assert learned != pytest.approx({name: 1 / 3 for name in learned})

    # Frozen: every test query ranks with the weights left by the last feedback query, and testing
    # writes nothing back to the gallery.
    gallery = Gallery.open(tmp_path / "g")
    table = load_trust(gallery)
    for learner in learners:
        final = feedback[-1]["learners"][learner.name]["weights"]
        assert table.weights[topic_of(config, learner.name)] == pytest.approx(final)
        assert all(line["rows"][learner.name]["weights"] == pytest.approx(final) for line in tests)
    equal = rows["2 + planted, equal weights"][0]
    assert all(line["rows"]["2 + planted, equal weights"]["weights"] == pytest.approx({e: 1 / 3 for e in equal})
               for line in tests)
    assert report["test_done"] == 3 and report["learners"][old_rule.name]["weights"] == pytest.approx(learned)
    assert {c["metric"] for c in report["comparisons"]} == {"hit@1", "hit@10", "ndcg@10", "ap"}

    # Resumable: a re-run redoes nothing; a lost test line and lost feedback lines are redone the same,
    # with the weights restored from the file (not the gallery's final ones).
    assert _run(trust_folders, tmp_path, out) == report and ResultsFile(out).read() == lines
    out.write_text("".join(json.dumps(line) + "\n" for line in lines[:3]) + '{"kind": "feedb')
    _run(trust_folders, tmp_path, out)
    redone = ResultsFile(out).read()
    strip = lambda ls: [{**l, "learners": {k: {**v, "seconds": 0} for k, v in l["learners"].items()}}
                        if l["kind"] == "feedback" else {**l, "rows": {k: {**v, "seconds": 0} for k, v in l["rows"].items()}}
                        if l["kind"] == "test" else l for l in ls]
    assert strip(redone) == strip(lines)
    again = summarise(redone)
    assert again["learners"] == report["learners"]
    assert {r: {m: v for m, v in row.items() if m != "seconds"} for r, row in again["rows"].items()} == \
        {r: {m: v for m, v in row.items() if m != "seconds"} for r, row in report["rows"].items()}
    with pytest.raises(ValueError, match="other settings"):
        _run(trust_folders, tmp_path, out, trusts={"eq5": 0.3})


def test_the_graph_learns_with_the_share_loss_when_asked(trust_folders, tmp_path, monkeypatch):
    from langgraph.types import Command

    from pictrieve.evaluation.datasets import eval_gallery
    from pictrieve.graphs.checkpoints import memory_checkpointer
    from pictrieve.graphs.needle import build_needle_graph

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    gallery = eval_gallery(trust_folders / "eval", ["random-projection:1", "random-projection:2"], location=tmp_path / "g")
    graph = build_needle_graph(gallery, visualizers=f"exemplar:{trust_folders / 'reference'}",
                               checkpointer=memory_checkpointer())
    config = {"configurable": {"thread_id": "share"}}
    context = {"k": 4, "guides": 2, "feedback": "results", "eta": 0.5, "trust_loss": "share"}
    paused = graph.invoke({"query": "a dog runs on the grass", "topic": "share"}, config, context=context)
    shown = [hit["id"] for hit in paused["__interrupt__"][0].value["hits"]]
    rankings = graph.get_state(config).values["rankings"]
    marked = shown[:1]
    out = graph.invoke(Command(resume={"irrelevant": marked}), config, context=context)
    losses = feedback_losses(rankings, marked, loss="share", shown=shown, depth=40)
    raw = {name: 0.5 * max(0.01, 1 - 0.5 * loss) for name, loss in losses.items()}
    assert out["weights"] == pytest.approx({name: w / sum(raw.values()) for name, w in raw.items()})
    assert load_trust(gallery).weights["share"] == pytest.approx(out["weights"])
