"""`pictrieve eval quality` end to end on a tiny captioned folder (random weights: plumbing only)."""

from __future__ import annotations

import json

import numpy as np

import pytest

pytest.importorskip("torch")

from helpers import make_photo  # noqa: E402
from helpers.qc2_fakes import one_thread  # noqa: E402,F401  (autouse)

from pictrieve.agents.qc2.levels import AxisLevels  # noqa: E402
from pictrieve.agents.qc2.training import QC2TrainConfig  # noqa: E402
from pictrieve.evaluation.quality import (  # noqa: E402
    evaluate_quality_control,
    frequent_noun_queries,
    load_queries,
    monotonicity,
)


def test_frequent_noun_queries_and_query_file(tmp_path):
    captions = ["A dog runs .", "a black dog jumps", "An apple on a table", "a dog and a cat", "a cat"]
    assert frequent_noun_queries(captions, 3) == ["a dog", "a cat", "an apple"]
    path = tmp_path / "q.txt"
    path.write_text("# comment\na dog\n\n an owl  # trailing\n")
    assert load_queries(path) == ["a dog", "an owl"]


def test_monotonicity_summary():
    axes = [AxisLevels.fit("Relevance", [1, 2, 3]), AxisLevels.fit("Quality", [1, 2, 3], higher_is_better=False)]
    results = {"m": {}}
    for i, r in enumerate(axes[0].levels):
        for j, q in enumerate(axes[1].levels):
            results["m"][f"Relevance={r}, Quality={q}"] = {"top5": {"relevance": float(i), "quality": float(-j)}}
    summary = monotonicity(results, axes)["m"]
    assert summary["Relevance"]["mean"] == [0, 1, 2] and summary["Relevance"]["increasing"]
    # lower raw quality is better: -0, -1, -2 is the right order for Low, Medium, High
    assert summary["Quality"]["increasing"]


def test_evaluation_runs_every_method_and_condition(tmp_path, tiny_clip_name, tiny_checkpoint):
    from click.testing import CliRunner

    from pictrieve.cli.eval_quality import format_report, quality_eval

    folder = tmp_path / "data"
    lines = []
    for i, caption in enumerate(["a dog on grass", "a dog in snow", "a man on a bike", "a man and a dog",
                                 "a boat on a lake", "a dog with a ball"]):
        make_photo(folder / "images" / f"{i}.png", seed=i, size=(64, 48))
        lines.append(json.dumps({"image": f"images/{i}.png", "captions": [caption, caption + " outside"]}))
    (folder / "captions.jsonl").write_text("\n".join(lines))
    report = evaluate_quality_control(
        folder, queries=["a dog", "a man"], embedder=tiny_clip_name, gallery_location=tmp_path / "g",
        scorer="brisque", base_model=tiny_checkpoint,
        train_config=QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1), samples=2, progress=False,
    )
    assert set(report["methods"]) == {"prefix", "pt", "ft_random", "qc2"}
    assert all(len(v) == 9 for v in report["methods"].values())
    prefix = list(report["methods"]["prefix"].values())
    assert all(p == prefix[0] for p in prefix)  # the short query ignores the condition
    for method in ("pt", "ft_random", "qc2"):
        for texts in report["examples"][method].values():
            assert texts and all(t.startswith(("a dog", "a man")) for t in texts)
    assert set(report["rerank"]) == {"k=1", "k=5", "k=10"}
    assert report["training"]["ft_random"]["random_levels"] is True
    assert "| qc2 | Relevance=High, Quality=Low |" in format_report(report)
    # a re-run reuses the saved models instead of training again
    again = evaluate_quality_control(
        folder, queries=["a dog"], embedder=tiny_clip_name, gallery_location=tmp_path / "g", scorer="brisque",
        base_model=tiny_checkpoint, train_config=QC2TrainConfig(epochs=1, batch_size=4, lora_rank=4, train_layers=1),
        methods=["qc2"], progress=False,
    )
    assert again["training"]["qc2"]["reused"] is True and list(again["methods"]) == ["qc2"]
    out = CliRunner().invoke(quality_eval, [str(folder), "--embedder", tiny_clip_name, "--gallery", str(tmp_path / "g"),
                                            "--base-model", tiny_checkpoint, "--method", "prefix", "--json"])
    assert out.exit_code == 0, out.output
    assert set(json.loads(out.stdout)["methods"]) == {"prefix"}


def test_monotonicity_says_when_the_order_is_wrong():
    axes = [AxisLevels.fit("Relevance", [1, 2, 3]), AxisLevels.fit("Quality", [1, 2, 3])]
    results = {"m": {}}
    for i, r in enumerate(axes[0].levels):
        for j, q in enumerate(axes[1].levels):
            # relevance falls with the requested level; quality peaks in the middle
            results["m"][f"Relevance={r}, Quality={q}"] = {"top5": {"relevance": float(-i), "quality": float(j == 1)}}
    summary = monotonicity(results, axes)["m"]
    assert summary["Relevance"]["mean"] == [0, -1, -2] and not summary["Relevance"]["increasing"]
    assert not summary["Quality"]["increasing"]


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_rerank_keeps_the_best_quality_image_of_the_top_k(higher_is_better):
    """Rerank (paper Table 6): retrieve by the short query, keep the best-quality image of the top k."""
    import numpy as np

    from pictrieve.evaluation.quality import _ScoredGallery

    scored = _ScoredGallery.__new__(_ScoredGallery)
    order = np.array([[3, 1, 4, 0, 2, 5, 6, 7, 8, 9, 10, 11]])  # the retrieval order for the one query
    scored.top = lambda texts, k: order[:, :k]
    scored.quality = np.array([5.0, 9.0, 1.0, 2.0, 7.0, 3.0, 0.0, 8.0, 4.0, 6.0, 10.0, 11.0])
    scored.relevance = np.arange(12, dtype=float)
    scored.captions = [["a dog"]] * 12
    scored.higher_is_better = higher_is_better
    result = scored.rerank(["a dog"])
    # top-1 is image 3 whatever the quality; top-5 = {3, 1, 4, 0, 2}: best is 1 (9.0) or 2 (1.0)
    assert result["k=1"]["quality"] == 2.0
    assert result["k=5"]["quality"] == (9.0 if higher_is_better else 1.0)
    assert result["k=10"]["quality"] == (9.0 if higher_is_better else 0.0)


def test_random_levels_carry_no_information_but_keep_the_level_set():
    from types import SimpleNamespace

    from pictrieve.agents.qc2.annotation import build_training_data, metadata_key

    items = [SimpleNamespace(captions=[f"photo {i}"], metadata={metadata_key("relevance"): [i / 60],
                                                                metadata_key("brisque"): float(i)}) for i in range(60)]
    true, axes = build_training_data(items, ["brisque"])
    shuffled, same_axes = build_training_data(items, ["brisque"], random_levels=True, seed=1)
    assert [e.caption for e in shuffled] == [e.caption for e in true]
    assert [a.thresholds for a in same_axes] == [a.thresholds for a in axes]
    agreement = np.mean([a.levels == b.levels for a, b in zip(true, shuffled)])
    assert agreement < 0.5  # true levels would agree on every caption; uniform ones on about 1 in 9
    assert {e.levels[1] for e in shuffled} == set(axes[1].levels)
