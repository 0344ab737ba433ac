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


@pytest.mark.parametrize("weight, order", [(0.0, ["a", "b", "c"]), (1.0, ["a", "c", "b"]), (3.0, ["c", "b", "a"])])
def test_weighted_rrf_one_ranking_against_another_by_hand(weight, order):
    # VisRet's fusion: a guide ranking weighs 1, the text ranking `weight` (rrf constant 1).
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "b", "a"]], k=1, weights=[1.0, weight])
    scores = dict(fused)
    assert scores["a"] == pytest.approx(1 / 2 + weight / 4)
    assert scores["b"] == pytest.approx(1 / 3 + weight / 3)
    assert scores["c"] == pytest.approx(1 / 4 + weight / 2)
    assert [item for item, _ in fused] == order  # at weight 1, a and c tie: first seen wins


def test_weights_must_match_the_rankings():
    with pytest.raises(ValueError, match="2 weights for 1 rankings"):
        reciprocal_rank_fusion([["a"]], weights=[1.0, 2.0])
