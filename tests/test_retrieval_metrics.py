"""Tie-aware Recall@K and median rank (pictrieve.evaluation.retrieval)."""

import numpy as np
import pytest

from pictrieve.evaluation.retrieval import (
    median_rank,
    rank_statistics,
    recall_at,
    retrieval_metrics,
)


def test_distinct_scores_give_ordinary_ranks():
    sims = np.array(
        [
            [0.9, 0.1, 0.5],  # target 0 is best -> rank 1
            [0.9, 0.1, 0.5],  # target 2 is second -> rank 2
            [0.9, 0.1, 0.5],  # target 1 is last -> rank 3
        ]
    )
    stats = rank_statistics(sims, np.array([0, 2, 1]))
    np.testing.assert_array_equal(stats["ranks"], [1.0, 2.0, 3.0])
    assert recall_at(stats, 1) == pytest.approx(1 / 3)
    assert recall_at(stats, 2) == pytest.approx(2 / 3)
    assert median_rank(stats) == 2.0


def test_ties_count_as_expected_value_not_in_the_targets_favour():
    # Every item has the same score: the target is equally likely anywhere in 1..4.
    sims = np.zeros((1, 4))
    stats = rank_statistics(sims, np.array([3]))
    assert stats["greater"][0] == 0 and stats["ties"][0] == 3
    assert stats["ranks"][0] == pytest.approx(2.5)
    assert recall_at(stats, 1) == pytest.approx(0.25)
    assert recall_at(stats, 2) == pytest.approx(0.5)
    assert recall_at(stats, 4) == pytest.approx(1.0)


def test_ties_behind_strictly_better_items():
    # One item is better, two others tie with the target: rank is 2, 3 or 4 with equal chance.
    sims = np.array([[0.9, 0.5, 0.5, 0.5, 0.1]])
    stats = rank_statistics(sims, np.array([2]))
    assert stats["ranks"][0] == pytest.approx(3.0)
    assert recall_at(stats, 1) == 0.0
    assert recall_at(stats, 2) == pytest.approx(1 / 3)
    assert recall_at(stats, 3) == pytest.approx(2 / 3)
    assert recall_at(stats, 10) == 1.0


def test_retrieval_metrics_summary_and_plain_ranks():
    sims = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    metrics = retrieval_metrics(sims, np.array([0, 1, 0]), ks=(1, 2))
    assert metrics["queries"] == 3
    assert metrics["recall@1"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert metrics["recall@2"] == pytest.approx(1.0)
    assert metrics["median_rank"] == pytest.approx(1.5)
    assert recall_at(np.array([1, 3, 7]), 5) == pytest.approx(2 / 3)


def test_bad_input_is_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="targets"):
        rank_statistics(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(ValueError, match="n_queries"):
        rank_statistics(np.zeros((2, 3)), np.array([0]))
    with pytest.raises(ValueError, match="NaN"):
        rank_statistics(np.array([[np.nan, 1.0]]), np.array([0]))
