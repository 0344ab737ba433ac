"""BRI and per-round metrics against the worked examples of the PlugIR paper (Appendix B)."""

import math

import numpy as np
import pytest

from pictrieve.evaluation.bri import best_ranks, bri, bri_per_query, hits_at_k, recall_at_k


@pytest.mark.parametrize(
    "ranks_a, ranks_b, bri_a, bri_b",
    [
        ([100, 100, 100], [100, 10, 100], 4.6, 2.9),  # Tables 6-7: user satisfaction
        ([100, 100, 10], [100, 10, 10], 4.0, 2.9),  # Tables 8-9: efficiency
        ([100, 10], [100, 5], 3.5, 3.1),  # Tables 10-11: ranking improvement significance
    ],
)
def test_bri_matches_paper_examples(ranks_a, ranks_b, bri_a, bri_b):
    assert round(bri(np.array([ranks_a])), 1) == bri_a
    assert round(bri(np.array([ranks_b])), 1) == bri_b
    assert bri(np.array([ranks_b])) < bri(np.array([ranks_a]))


def test_bri_exact_value_and_best_rank():
    # pi = 100, 10, 10 -> (log 100 + log 10) / 4 + log 10 / 2
    expected = (math.log(100) + math.log(10)) / 4 + math.log(10) / 2
    assert bri(np.array([[100, 10, 100]])) == pytest.approx(expected)
    np.testing.assert_array_equal(best_ranks([[100, 10, 100]]), [[100, 10, 10]])


def test_bri_averages_queries_and_rank_one_everywhere_is_zero():
    ranks = np.array([[1, 1, 1, 1], [8, 4, 2, 1]])
    per_query = bri_per_query(ranks)
    assert per_query[0] == 0.0
    assert bri(ranks) == pytest.approx(per_query.mean())


def test_hits_and_recall_differ_when_rank_regresses():
    ranks = np.array([[100, 10, 100], [5, 5, 50]])
    np.testing.assert_allclose(recall_at_k(ranks, 10), [0.5, 1.0, 0.0])
    np.testing.assert_allclose(hits_at_k(ranks, 10), [0.5, 1.0, 1.0])


def test_bad_input_is_rejected():
    with pytest.raises(ValueError):
        bri(np.array([[3]]))  # no round after round 0
    with pytest.raises(ValueError):
        bri(np.array([[0, 1]]))  # ranks are 1-based


def test_hits_and_recall_agree_at_round_zero_with_ties():
    """A target tied with 9 others just past 5 better images: each is a 50% chance of the top 10."""
    from pictrieve.evaluation.bri import hits_at_k, recall_at_k

    greater = np.array([[5, 0, 20], [0, 12, 12]])
    ties = np.array([[9, 0, 0], [0, 0, 0]])
    ranks = 1 + greater + ties / 2
    assert recall_at_k(ranks, 10, greater=greater, ties=ties).tolist() == [0.75, 0.5, 0.0]
    hits = hits_at_k(ranks, 10, greater=greater, ties=ties)
    assert hits[0] == 0.75  # the same as Recall@10 at round 0
    assert hits.tolist() == [0.75, 1.0, 1.0]  # best round so far


def test_nan_or_zero_ranks_are_refused():
    """A NaN rank (a target missing from a ranking) must not turn into a silent BRI of NaN."""
    with pytest.raises(ValueError, match="1-based"):
        bri(np.array([[3.0, np.nan, 2.0]]))
    with pytest.raises(ValueError, match="1-based"):
        hits_at_k(np.array([[0.0, 1.0]]))
