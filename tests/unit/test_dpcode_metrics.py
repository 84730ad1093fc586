"""F-score (Def. 3) and relative error (Def. 4) on hand-made cases."""

import math

import pytest

from privacy.dpcode.metrics import f_score, relative_error


def test_f_score_hand_cases() -> None:
    truth = [(1,), (2,), (1, 2), (3,)]
    assert f_score(truth, truth) == 1.0
    assert f_score(truth, [(2, 1), (3,)]) == pytest.approx(2 * 1 * 0.5 / 1.5)
    # top-k sizes equal: F = precision = recall
    assert f_score(truth, [(1,), (2,), (4,), (5,)]) == 0.5
    assert f_score(truth, [(9,)]) == 0.0
    assert f_score(truth, []) == 0.0
    with pytest.raises(ValueError, match="truth is empty"):
        f_score([], [(1,)])


def test_relative_error_hand_cases() -> None:
    # |110 - 100| / 100 = 0.1, |40 - 50| / 50 = 0.2, |5 - 0| / max(0, 1) = 5
    assert relative_error([110.0, 40.0, 5.0], [100, 50, 0]) == pytest.approx(0.2)
    assert relative_error([90.0, 110.0], [100, 100]) == pytest.approx(0.1)
    assert math.isnan(relative_error([], []))
    with pytest.raises(ValueError, match="equal lengths"):
        relative_error([1.0], [1, 2])
