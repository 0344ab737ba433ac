"""Reciprocal Rank Fusion against hand-computed scores."""

import pytest

from pictrieve.vectorstore.fusion import reciprocal_rank_fusion


def test_rrf_scores_and_order_by_hand():
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "c"], ["c", "a"]], k=60)
    scores = dict(fused)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 62 + 1 / 61)
    # c appears in all three rankings and wins; a and b tie and keep first-seen order.
    assert [item for item, _ in fused] == ["c", "a", "b"]


def test_rrf_k_zero_and_duplicates_count_once():
    fused = reciprocal_rank_fusion([["x", "x", "y"]], k=0)
    assert fused == [("x", 1.0), ("y", pytest.approx(1 / 3))]


def test_rrf_empty_and_invalid_k():
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], k=-1)
