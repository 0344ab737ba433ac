"""QC2 percentile discretisation (Eq. 4-5) against hand-computed values."""

import numpy as np
import pytest

from pictrieve.agents.qc2.levels import AxisLevels, normalize_level, percentile


def test_percentile_linear_interpolation_by_hand():
    scores = [10, 1, 9, 2, 8, 3, 7, 4, 6, 5]  # unsorted on purpose
    # xi = 0.33 * 9 = 2.97 -> 3 + 0.97 * (4 - 3)
    assert percentile(scores, 33) == pytest.approx(3.97)
    # xi = 0.66 * 9 = 5.94 -> 6 + 0.94 * (7 - 6)
    assert percentile(scores, 66) == pytest.approx(6.94)
    assert percentile(scores, 0) == 1 and percentile(scores, 100) == 10
    assert percentile([4.2], 66) == 4.2


def test_three_levels_by_hand():
    axis = AxisLevels.fit("Relevance", list(range(1, 11)))
    assert axis.thresholds == pytest.approx((3.97, 6.94))
    assert axis.assign(range(1, 11)) == ["Low"] * 3 + ["Medium"] * 3 + ["High"] * 4


def test_ties_fall_on_the_low_side_of_a_threshold():
    scores = [1, 1, 1, 1, 2, 2, 3, 3, 3, 9]
    axis = AxisLevels.fit("Aesthetic", scores)
    # perc33: xi = 2.97 between two 1s -> 1.0 ; perc66: xi = 5.94 -> 2 + 0.94 * (3 - 2)
    assert axis.thresholds == pytest.approx((1.0, 2.94))
    # a score equal to the 33rd percentile is Low (<=), not Medium
    assert axis.assign(scores) == ["Low"] * 4 + ["Medium"] * 2 + ["High"] * 4


def test_five_levels_by_hand():
    axis = AxisLevels.fit("Aesthetic", [0, 10, 20, 30, 40], n_levels=5)
    # xi = 0.8, 1.6, 2.4, 3.2 -> 8, 16, 24, 32
    assert axis.thresholds == pytest.approx((8, 16, 24, 32))
    assert axis.assign([0, 10, 20, 30, 40]) == ["Very Low", "Low", "Medium", "High", "Very High"]
    assert axis.assign([8, 8.01, 32, 32.5]) == ["Very Low", "Low", "High", "Very High"]


def test_lower_is_better_scores_are_negated():
    axis = AxisLevels.fit("Quality", [10, 20, 30], higher_is_better=False, score_key="brisque")
    # oriented [-30, -20, -10]: perc33 = -30 + 0.66 * 10, perc66 = -20 + 0.32 * 10
    assert axis.thresholds == pytest.approx((-23.4, -16.8))
    assert axis.assign([10, 20, 30]) == ["High", "Medium", "Low"]


def test_round_trip_and_level_spellings():
    axis = AxisLevels.fit("Relevance", np.linspace(0, 1, 7), n_levels=5)
    assert AxisLevels.from_dict(axis.to_dict()) == axis
    assert normalize_level("HIGH") == "High"
    assert normalize_level("very-high", axis.levels) == "Very High"
    assert normalize_level("median") == "Medium"
    with pytest.raises(ValueError, match="Low, Medium, High"):
        normalize_level("very high")  # not a 3-level name
    with pytest.raises(ValueError):
        AxisLevels.fit("Relevance", [1.0, float("nan")])
    with pytest.raises(ValueError):
        AxisLevels.fit("Relevance", [1.0, 2.0], n_levels=4)
