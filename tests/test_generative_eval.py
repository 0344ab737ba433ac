"""Metrics of generation-augmented retrieval against the worked numbers in the implementation notes,
and `pictrieve eval visret|needle` end to end on a few real photos."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pictrieve.evaluation.generative import (
    average_precision,
    hit_at_k,
    ndcg_at_k,
    recall_at_k,
    visret_ndcg_at_k,
)

RANKED = [f"i{r}" for r in range(1, 11)]


@pytest.mark.parametrize("hits, expected", [
    ({"i1"}, 1.0), ({"i4"}, 0.394), ({"i7"}, 0.394), ({"i2", "i3"}, 0.723), ({"i2", "i3", "i4"}, 0.828), (set(), 0.0),
])
def test_visret_ndcg_matches_the_papers_numbers(hits, expected):
    assert visret_ndcg_at_k(RANKED, hits, 10) == pytest.approx(expected, abs=5e-4)


def test_visret_ndcg_at_1_is_hit_at_1_and_standard_ndcg_counts_missing_positives():
    assert visret_ndcg_at_k(RANKED, {"i1"}, 1) == hit_at_k(RANKED, {"i1"}, 1) == 1.0
    assert visret_ndcg_at_k(RANKED, {"i2"}, 1) == 0.0
    # One hit at rank 1 with 14 positives in the pool: the standard nDCG is low (notes: 0.220).
    pool = {"i1"} | {f"x{n}" for n in range(13)}
    assert ndcg_at_k(RANKED, pool, 10) == pytest.approx(0.220, abs=5e-4)
    assert recall_at_k(RANKED, pool, 10) == pytest.approx(1 / 14)


def test_needle_average_precision_is_truncated_to_r_hits():
    assert average_precision(["a", "x", "b"], {"a", "b"}) == pytest.approx((1 / 1 + 2 / 3) / 2)  # notes: 0.833
    assert average_precision(["x", "a"], {"a"}) == pytest.approx(0.5)
    assert average_precision(["x"] * 60 + ["a"], {"a"}) == 0.0  # beyond k = 60
    many = {f"r{n}" for n in range(20)}
    assert average_precision([f"r{n}" for n in range(20)], many) == pytest.approx(1.0)  # R = 10, not 20


@pytest.fixture(scope="module")
def small_folders(flickr_dir, tmp_path_factory):
    rows = [json.loads(line) for line in (flickr_dir / "captions.jsonl").read_text().splitlines()[:16]]
    root = tmp_path_factory.mktemp("geneval")
    for name, part in (("eval", rows[:8]), ("reference", rows[:8] + rows[8:16])):
        (root / name).mkdir()
        (root / name / "captions.jsonl").write_text("\n".join(
            json.dumps({"image": str(flickr_dir / r["image"]), "captions": r["captions"]}) for r in part))
    return root


def test_eval_visret_and_needle_commands_report_every_row(small_folders, tmp_path, monkeypatch):
    from pictrieve.cli.main import cli

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    reference = f"exemplar:{small_folders / 'reference'}"
    out = CliRunner().invoke(cli, ["eval", "visret", str(small_folders / "eval"), "--visualizer", reference,
                                   "-e", "offline", "-e", "efficientnet-lite0", "--text-weight", "2", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert set(report["rows"]) == {"text only", "visret guides=1", "visret guides=3", "visret guides=3 + text w=2"}
    assert report["generates"] == [False] and report["images"] == 8
    # The reference holds each evaluated photo with its own captions: its exemplar is the photo itself
    # (guides only, one guide), and the report says that this measures nothing.
    assert report["rows"]["visret guides=1"]["hit@1"] == 1.0
    assert report["reference_overlap"] == 8
    assert set(report["rows"]["visret guides=3"]["seconds_by_node"]) == {"rewrite", "visualize", "retrieve"}
    out = CliRunner().invoke(cli, ["eval", "needle", str(small_folders / "eval"), "--visualizer", reference,
                                   "-e", "efficientnet-lite0", "-e", "offline", "--guides", "2", "--queries", "4",
                                   "--feedback-queries", "2", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert list(report["rows"]) == ["text only", "1 embedder", "2 embedders",
                                    "all, no screening", "1 embedder +trust", "2 embedders +trust",
                                    "all, no screening +trust"]
    weights = report["rows"]["2 embedders +trust"]["weights"]
    assert set(weights) == {"efficientnet-lite0", "offline"} and sum(weights.values()) == pytest.approx(1.0)
    assert report["feedback_queries"] == 2 and report["rows"]["1 embedder"]["queries"] == 4
