"""`pictrieve eval quality` end to end on a tiny captioned folder (random weights: plumbing only)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from conftest import make_photo  # noqa: E402
from test_qc2_model import one_thread, tiny_checkpoint  # noqa: E402,F401

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
