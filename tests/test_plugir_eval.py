"""The interactive evaluation loop on a hand-made gallery with a scripted chat model.

Checks bookkeeping only (same targets in every arm, ranks per round, metric shapes, timing
split); retrieval quality is measured by `pictrieve eval interactive` on real photos.
"""

from pathlib import Path

import numpy as np
import pytest

from helpers.plugir_fakes import ScriptedChatModel, make_gallery

from pictrieve.evaluation.bri import bri
from pictrieve.evaluation.interactive import NODES, plot_interactive, run_ablation


def test_run_ablation_bookkeeping(tmp_path):
    gallery = make_gallery()
    captions = {id_: (Path(f"/photos/{id_}.jpg"), [c, c.replace("running", "playing")])
                for id_, c in zip(gallery.ids(), gallery.captions)}
    llm = ScriptedChatModel(questions=["What color is the dog?", "Where is the dog?"])
    heard = []

    def factory(path, visible):
        return lambda question, state: heard.append((path, tuple(visible))) or "brown"

    results = run_ablation(gallery, captions, llm, targets=3, rounds=2, arms=["zs", "cr+rce+f"],
                           answerer_factory=factory, settings={"top_n": 20, "clusters": 4},
                           progress=False)
    zs, full = results["dialogues"]["zs"], results["dialogues"]["cr+rce+f"]
    assert [d["target"] for d in zs] == [d["target"] for d in full]
    assert [d["description"] for d in zs] == [d["description"] for d in full]
    for dialogue in zs:  # the simulated user never sees the description it started from
        assert dialogue["description"] not in dialogue["visible_captions"]
        assert len(dialogue["ranks"]) == 3 and all(r >= 1 for r in dialogue["ranks"])
    metrics = results["arms"]["cr+rce+f"]
    # ranks recomputed here, independently of the evaluation's ranker: each round's query against
    # every image vector, the target's rank = 1 + images scoring higher + half of those tied
    vectors = gallery.embeddings()
    column = {id_: i for i, id_ in enumerate(gallery.ids())}
    by_path = {str(path): id_ for id_, (path, _) in captions.items()}
    expected = []
    for dialogue in full:
        scores = gallery.embedder.embed_texts(dialogue["queries"]) @ vectors.T
        target = scores[:, column[by_path[dialogue["target"]]]][:, None]
        expected.append(1 + (scores > target).sum(axis=1) + ((scores == target).sum(axis=1) - 1) / 2)
    ranks = np.array([d["ranks"] for d in full])
    np.testing.assert_allclose(ranks, np.array(expected))
    assert metrics["bri"] == pytest.approx(bri(np.array(expected)))
    assert len(metrics["hits@10"]) == len(metrics["recall@10"]) == 3
    assert set(metrics["node_seconds_per_round"]) == set(NODES)
    assert metrics["seconds_per_round"] > 0 and all(v >= 0 for v in metrics["node_seconds_per_round"].values())
    assert len(heard) == 2 * 3 * 2  # arms x targets x rounds
    png = plot_interactive(results, tmp_path / "plot.png")
    assert png.stat().st_size > 1000


def test_unknown_arm_is_rejected():
    gallery = make_gallery()
    with pytest.raises(ValueError, match="unknown arms"):
        run_ablation(gallery, {}, ScriptedChatModel(), arms=["bogus"], progress=False)


def test_the_evaluation_ranks_what_the_graph_shows():
    """The offline arm re-ranks by the answers (a denial lowers images holding the denied thing), so
    re-embedding the query text would measure something the person never saw: the evaluation reads
    the target's rank from the graph's own ranking each round."""
    from pictrieve.agents.plugir.simulated_user import CaptionUser

    gallery = make_gallery()  # "a <colour> dog running in the <place>"
    # each target is described by its colour or its place; the user knows the other
    captions = {id_: (Path(f"/photos/{id_}.jpg"), [" ".join(c.split()[:3]), "a dog in the " + c.split()[-1]])
                for id_, c in zip(gallery.ids(), gallery.captions)}
    seen_by_user = []

    def factory(path, visible):
        user = CaptionUser(visible)
        target = path.stem

        def answer(question, state):
            ranking = state["ranking"]  # what the graph shows this round, best first
            assert len(ranking) == gallery.count()  # the evaluation has the graph rank everything
            seen_by_user.append(1 + [id_ for id_, _ in ranking].index(target))
            return user(question, state)
        return answer

    results = run_ablation(gallery, captions, None, targets=4, rounds=3, arms=["offline"],
                           answerer_factory=factory, settings={"deny_weight": 0.5}, progress=False)
    dialogues = results["dialogues"]["offline"]
    measured = [d["ranks"][:3] for d in dialogues]  # rounds 0-2 are the ones the user answered in
    assert np.array(measured).ravel().tolist() == seen_by_user
    # and that differs from ranking the query text alone, which ignores the denials
    vectors = gallery.embeddings()
    column = {id_: i for i, id_ in enumerate(gallery.ids())}
    by_text = []
    for dialogue in dialogues:
        scores = gallery.embedder.embed_texts(dialogue["queries"]) @ vectors.T
        target = column[Path(dialogue["target"]).stem]
        by_text.append((1 + (scores > scores[:, [target]]).sum(axis=1)).tolist())
    assert [d["ranks"] for d in dialogues] != by_text
