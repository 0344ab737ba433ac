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
