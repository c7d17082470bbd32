"""measure.bootstrap: the one percentile interval and the paired resamples, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from creditgym.measure.bootstrap import bootstrap_interval, finite_draws, percentile_interval


def test_the_percentile_interval_leaves_two_and_a_half_percent_in_each_tail():
    assert percentile_interval(np.arange(101.0)) == pytest.approx((2.5, 97.5))
    assert percentile_interval(np.arange(101.0), confidence=0.5) == pytest.approx((25.0, 75.0))


def test_resamples_are_reduced_modulo_the_item_count_and_nan_draws_are_dropped():
    values = np.array([1.0, 3.0])
    # Rows [0, 0], [1, 1] and [0, 1] after the modulo; a third item would be NaN.
    resamples = np.array([[0, 2, 9], [1, 3, 9], [2, 5, 9]])
    low, high = bootstrap_interval(lambda i: float(values[i].mean()), 2, resamples, 0.0)
    assert (low, high) == (2.0, 2.0)  # the median draw of 1, 3 and 2
    draws = finite_draws(lambda i: math.nan if i[0] else 1.0, iter([[0], [1], [0]]))
    assert draws.tolist() == [1.0, 1.0]


def test_an_interval_of_nothing_is_nan():
    resamples = np.zeros((4, 3), dtype=np.int64)
    assert all(math.isnan(v) for v in bootstrap_interval(lambda i: 1.0, 0, resamples))
    assert all(math.isnan(v) for v in bootstrap_interval(lambda i: math.nan, 3, resamples))
