"""report/stats.py's few-seed statistics against values worked out by hand: the
Student-t interval, BCa from the exact bootstrap distribution, Holm's adjustment, TOST,
the permutation tests, and the coverage of the headline interval at 5 seeds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats

from creditgym.report import stats

# GRPO on KeyDoor delay 16, final success of seeds 0-4 (rounded): the example.
FIVE_SEEDS = np.array([[0.38], [0.14], [0.84], [0.12], [0.23]])


def test_t_interval_is_the_formula_worked_by_hand():
    # mean 1.71 / 5 = 0.342; deviations .038 -.202 .498 -.222 -.112, squares sum 0.35208,
    # s^2 = 0.35208 / 4 = 0.08802; half-width t_{4, .975} * s / sqrt(5).
    half = scipy.stats.t.ppf(0.975, 4) * math.sqrt(0.08802) / math.sqrt(5)
    interval = stats.t_interval(FIVE_SEEDS)
    assert interval.value == pytest.approx(0.342)
    assert (interval.low, interval.high) == (
        pytest.approx(0.342 - half),
        pytest.approx(0.342 + half),
    )
    # The "about [-3, 71]".
    assert interval.text(100) == "34.2 [-2.6, 71.0]"
    # Two tasks: the interval of the 5 row means (each run's mean over its tasks).
    two_tasks = np.hstack([FIVE_SEEDS, FIVE_SEEDS + 0.1])
    shifted = stats.t_interval(two_tasks)
    assert (shifted.low, shifted.high) == (
        pytest.approx(0.392 - half),
        pytest.approx(0.392 + half),
    )


def test_bca_matches_efrons_formula_on_the_exact_bootstrap_distribution():
    values = FIVE_SEEDS[:, 0]
    # Every one of the 5^5 equally likely resamples, and their means.
    means = np.array([values[list(r)].mean() for r in itertools.product(range(5), repeat=5)])
    estimate = values.mean()
    # Bias correction: the share of resamples below the estimate (ties one half).
    z0 = scipy.stats.norm.ppf(np.mean(means < estimate) + 0.5 * np.mean(means == estimate))
    # Acceleration from the jackknife: leave-one-out means, a = sum d^3 / (6 (sum d^2)^1.5).
    jack = np.array([np.delete(values, i).mean() for i in range(5)])
    d = jack.mean() - jack
    a = np.sum(d**3) / (6 * np.sum(d**2) ** 1.5)
    ends = []
    for z in scipy.stats.norm.ppf([0.025, 0.975]):
        level = scipy.stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))
        ends.append(np.percentile(means, 100 * level))
    interval = stats.bca_interval(stats.mean_of_tasks, FIVE_SEEDS, reps=20_000)
    assert interval.value == pytest.approx(0.342)
    # 20,000 resamples against the exact distribution: Monte Carlo error well under 0.015.
    assert interval.low == pytest.approx(ends[0], abs=0.015)
    assert interval.high == pytest.approx(ends[1], abs=0.015)
    # The long right tail (0.84) pushes the upper end further out than the lower.
    assert interval.high - interval.value > interval.value - interval.low


def test_bca_without_a_moving_jackknife_is_the_bias_corrected_interval():
    # The IQM of 0, 0, 0, 0, 1/64 is 0, and 0 with any one score left out: the acceleration
    # is 0 / 0, so a = 0 and the ends are the Phi(2 z0 + z) quantiles (Efron's BC).
    scores = np.array([[0.0], [1 / 64], [0.0], [0.0], [0.0]])
    values = scores[:, 0]
    iqms = np.array([stats.iqm(values[list(r)]) for r in itertools.product(range(5), repeat=5)])
    z0 = scipy.stats.norm.ppf(np.mean(iqms < 0) + 0.5 * np.mean(iqms == 0))
    levels = scipy.stats.norm.cdf(2 * z0 + scipy.stats.norm.ppf([0.025, 0.975]))
    low, high = np.percentile(iqms, 100 * levels)
    interval = stats.bca_interval(stats.iqm_of_tasks, scores, reps=20_000)
    assert interval.value == 0.0 and interval.low == low == 0.0
    assert interval.high == pytest.approx(high, abs=1 / 640)
    assert 0 < interval.high < 1 / 64


def test_the_headline_interval_is_the_hull_clipped_to_the_range():
    estimate = stats.mean_estimate(FIVE_SEEDS, bounds=(0.0, 1.0))
    assert estimate.bca.low > estimate.t.low and estimate.bca.high < estimate.t.high
    # t reaches below 0 (-0.026): a success rate's mean cannot, so the headline stops at 0.
    assert estimate.headline == (pytest.approx(0.342), 0.0, pytest.approx(estimate.t.high))
    unclipped = stats.mean_estimate(FIVE_SEEDS)
    assert unclipped.headline.low == pytest.approx(estimate.t.low)
    # No spread: every interval is the point itself.
    flat = stats.mean_estimate(np.full((5, 1), 1.0))
    assert flat.headline == flat.bca == flat.t == (1.0, 1.0, 1.0)


def test_iqm_of_tasks_is_the_iqm_of_all_scores():
    matrix = np.array([[0.0, 100.0], [1.0, 2.0], [3.0, 4.0], [-50.0, 5.0]])
    assert stats.iqm_of_tasks(*matrix.T) == stats.iqm(matrix) == 2.5
    assert stats.mean_of_tasks(*matrix.T) == pytest.approx(matrix.mean())
    # Along a batch axis, as scipy.stats.bootstrap calls it.
    batch = np.stack([matrix.T, matrix.T + 1])  # (2 resamples, tasks, runs)
    assert stats.iqm_of_tasks(*batch.transpose(1, 0, 2)).tolist() == [2.5, 3.5]


def test_holm_on_a_hand_list():
    # Sorted: .005 x 4 = .02, .01 x 3 = .03, .03 x 2 = .06, .04 x 1 = .04 -> kept at .06
    # (step-down: never below an earlier adjusted value).
    adjusted = stats.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # Two of four rejected at 0.05; Bonferroni (x 4) would reject only .005 (0.02) and
    # .01 (0.04) as well, but Holm never rejects fewer.
    assert (adjusted < 0.05).sum() == 2
    assert stats.holm([0.5, 0.9]).tolist() == [1.0, 1.0]
    assert stats.holm([]).tolist() == []
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        stats.holm([0.2, 1.5])


def test_welch_difference_and_degrees_of_freedom_by_hand():
    x = np.array([[0.4], [0.5], [0.6]])  # mean .5, variance .01
    y = np.array([[0.1], [0.3], [0.5]])  # mean .3, variance .04
    # se^2 = .01 / 3 + .04 / 3; df = (.05 / 3)^2 / ((.01 / 3)^2 / 2 + (.04 / 3)^2 / 2) = 2.941.
    se, df = math.sqrt(0.05 / 3), 0.0025 / 0.00085
    half = scipy.stats.t.ppf(0.975, df) * se
    interval = stats.mean_difference(x, y)
    assert interval.value == pytest.approx(0.2)
    assert (interval.low, interval.high) == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))


def test_a_paired_difference_reads_seed_by_seed_differences_by_hand():
    # Seeds move together: per-seed differences .1, .2, .0 (mean .1, sd .1, n 3), while
    # each row spreads .3: the paired interval is t_{2} * .1 / sqrt(3) wide, Welch's far
    # wider.
    x = np.array([[0.3], [0.7], [0.9]])
    y = np.array([[0.2], [0.5], [0.9]])
    paired = stats.paired_difference(x, y)
    half = scipy.stats.t.ppf(0.975, 2) * 0.1 / math.sqrt(3)
    assert paired.value == pytest.approx(0.1)
    assert (paired.low, paired.high) == (pytest.approx(0.1 - half), pytest.approx(0.1 + half))
    welch = stats.mean_difference(x, y)
    assert welch.high - welch.low > 2 * (paired.high - paired.low)
    assert stats.row_correlation(x, y) == pytest.approx(
        np.corrcoef([0.3, 0.7, 0.9], [0.2, 0.5, 0.9])[0, 1]
    )
    # Rows moving against each other: the correlation says so.
    assert stats.row_correlation(x, y[::-1]) < 0
    assert math.isnan(stats.row_correlation(x[:2], y[:2]))  # two seeds: no correlation
    with pytest.raises(ValueError, match="one shape"):
        stats.paired_difference(x, y[:2])


def test_tost_calls_a_tie_only_inside_the_margin():
    # d = .05, se = sqrt(2 * .01 / 3) = .08165, df = 4: the upper one-sided test has
    # t = (.05 - .1) / .08165 = -.612, p = .287: not shown equivalent within 10 points.
    se = math.sqrt(2 * 0.01 / 3)
    wide = stats.tost(np.array([[0.5], [0.6], [0.7]]), np.array([[0.45], [0.55], [0.65]]), 0.1)
    assert wide == pytest.approx(scipy.stats.t.cdf((0.05 - 0.1) / se, 4))
    assert wide > 0.05
    # Spread ten times smaller: t = (.01 - .1) / .008165 = -11.0, p = 1.9e-4: a tie.
    tight = stats.tost(np.array([[0.50], [0.51], [0.52]]), np.array([[0.49], [0.50], [0.51]]), 0.1)
    assert tight == pytest.approx(scipy.stats.t.cdf((0.01 - 0.1) / (se / 10), 4))
    assert tight < 0.001
    # No spread: the difference is known; inside the margin p = 0, outside 1.
    assert stats.tost(np.ones((5, 1)), np.ones((5, 1)), 0.1) == 0.0
    assert stats.tost(np.ones((5, 1)), np.zeros((5, 1)), 0.1) == 1.0
    with pytest.raises(ValueError, match="margin"):
        stats.tost(np.ones((5, 1)), np.ones((5, 1)), 0.0)


def test_difference_test_is_exact_on_small_cases():
    # 4 runs dealt 2 + 2 six ways; P(X > Y) of the deals: 1, 0, .25, .75, .5, .5. Observed
    # 1: as far from 1/2 are 1 and 0, p = 2 / 6.
    assert stats.difference_test(np.array([[3.0], [4.0]]), np.array([[1.0], [2.0]])) == 1 / 3
    # 5 + 5 fully separated: 2 of the C(10, 5) = 252 deals.
    assert stats.difference_test(np.ones((5, 1)), np.zeros((5, 1))) == 2 / 252
    # Equal scores: every deal is as extreme.
    assert stats.difference_test(np.ones((5, 1)), np.ones((5, 1))) == 1.0


def test_difference_test_draws_at_random_beyond_the_exact_limit():
    # Three tasks of 5 + 5: 252^3 deals, so 20,000 random ones; fully separated on every
    # task, a draw as extreme comes 2 / 252^3 of the time: p = (1 + 0) / (1 + 20,000).
    p = stats.difference_test(np.ones((5, 3)), np.zeros((5, 3)))
    assert p == 1 / (1 + stats.PERMUTATIONS)
    with pytest.raises(ValueError, match="tasks"):
        stats.difference_test(np.ones((5, 3)), np.zeros((5, 2)))


def test_jonckheere_terpstra_by_hand():
    rising = stats.jonckheere_terpstra([np.array([1.0, 2.0]), np.array([3.0, 4.0])])
    # J: all 4 cross pairs ascend; E[J] = 2 * 2 / 2; of the 6 deals only this one and its
    # mirror (J = 0) are as far from 2.
    assert rising == (4.0, 2.0, pytest.approx(1 / 3)) and rising.direction == "rises"
    # Three levels of one score each, falling: J = 0, E[J] = 1.5; over the 6 orders J is
    # 0, 1, 1, 2, 2, 3, so p = 2 / 6.
    falling = stats.jonckheere_terpstra([np.array([3.0]), np.array([2.0]), np.array([1.0])])
    assert falling == (0.0, 1.5, pytest.approx(1 / 3)) and falling.direction == "falls"
    # Ties count one half: pairs (1, 1) .5, (1, 2) 1, (2, 1) 0, (2, 2) .5: J = 2 = E[J].
    flat = stats.jonckheere_terpstra([np.array([1.0, 2.0]), np.array([1.0, 2.0])])
    assert (flat.statistic, flat.expected, flat.direction) == (2.0, 2.0, "flat")


def test_jonckheere_terpstra_finds_a_five_seed_fall_over_three_delays():
    # Success at delays 1, 4, 16 without overlap: J = 0 of E[J] = 37.5; 15! / 5!^3 =
    # 756,756 deals, so 20,000 random ones, none as extreme with this seed.
    groups = [np.array([0.7, 0.8, 0.75, 0.9, 0.85]), np.array([0.4, 0.5, 0.45, 0.6, 0.55])]
    groups.append(np.array([0.1, 0.2, 0.15, 0.3, 0.25]))
    trend = stats.jonckheere_terpstra(groups)
    assert trend.statistic == 0.0 and trend.expected == 37.5 and trend.direction == "falls"
    assert trend.p_value == 1 / (1 + stats.PERMUTATIONS)
    with pytest.raises(ValueError, match="2 levels"):
        stats.jonckheere_terpstra([np.array([1.0])])


def test_the_headline_interval_covers_a_bimodal_mean_more_often_than_the_percentile():
    # 2,000 five-seed samples of a two-mode success rate (30 % of seeds learn, near 0.8;
    # the rest near 0.17), the shape of the study's KeyDoor cells.
    rng = np.random.default_rng(0)
    learned = rng.random((2000, 5)) < 0.3
    samples = np.where(learned, rng.beta(8, 2, (2000, 5)), rng.beta(2, 10, (2000, 5)))
    truth = 0.3 * 0.8 + 0.7 * 2 / 12
    # The percentile bootstrap the study's report used before, vectorised.
    draws = samples[np.arange(2000)[:, None, None], rng.integers(0, 5, (2000, 1000, 5))]
    low, high = np.percentile(draws.mean(axis=2), [2.5, 97.5], axis=1)
    percentile = np.mean((low <= truth) & (truth <= high))
    estimates = [stats.mean_estimate(s[:, None], seed=k, reps=1000) for k, s in enumerate(samples)]
    headline = np.mean([e.headline.low <= truth <= e.headline.high for e in estimates])
    bca = np.mean([e.bca.low <= truth <= e.bca.high for e in estimates])
    # Measured: percentile 0.810, BCa 0.828, t 0.856, headline 0.856 (nominal 0.95: none
    # reaches it at five bimodal seeds, which is why the study wants 10).
    assert bca >= percentile
    assert headline >= percentile + 0.03


def test_seeds_for_half_width_iterates_the_t_quantile_to_hand_values():
    # sd 0.2, h 0.1: z gives (1.96 * 2)^2 = 15.4 -> 16; t_{15} = 2.1314: 2.1314 * 0.2 / 4
    # = 0.1066 > 0.1; n = 17: 2.1199 * 0.2 / 4.1231 = 0.1028 > 0.1; n = 18: 2.1098 * 0.2 /
    # 4.2426 = 0.0995 <= 0.1.
    assert stats.seeds_for_half_width(0.2, 0.1) == 18
    # h 0.05: (1.96 * 4)^2 = 61.5 -> 62: 2.0003 * 0.2 / 7.874 = 0.0508; 63: 0.0504;
    # 64: 1.9983 * 0.2 / 8 = 0.04996.
    assert stats.seeds_for_half_width(0.2, 0.05) == 64
    # No spread: the floor; a floor above the answer is kept.
    assert stats.seeds_for_half_width(0.0, 0.1) == 2
    assert stats.seeds_for_half_width(0.2, 0.1, minimum=20) == 20
    with pytest.raises(ValueError):
        stats.seeds_for_half_width(0.2, 0.0)


def test_sd_upper_limit_matches_the_chi_square_hand_value():
    # n = 10: chi2_{0.2, 9} = 5.3801, sqrt(9 / 5.3801) = 1.2934.
    assert stats.sd_upper_limit(1.0, 10) == pytest.approx(1.2934, abs=1e-4)
    assert stats.sd_upper_limit(0.3, 10) == pytest.approx(0.3 * 1.2934, abs=1e-4)


def test_bca_end_error_is_the_spread_of_the_ends_over_bootstrap_seeds():
    scores = np.array([[0.38], [0.14], [0.84], [0.12], [0.23], [0.9], [0.05], [0.5]])
    ends = np.array(
        [stats.bca_interval(stats.mean_of_tasks, scores, seed, 500)[1:] for seed in range(4)]
    )
    expected = ends.std(axis=0, ddof=1).max()
    assert stats.bca_end_error(stats.mean_of_tasks, scores, 500, repeats=4) == expected
    assert expected > 0
    # Scores with no spread have nothing to resample: no error.
    assert stats.bca_end_error(stats.mean_of_tasks, np.ones((5, 1)), 500) == 0.0


def test_reps_for_end_error_scales_with_the_square_of_the_error():
    # 0.002 at 2,000 resamples -> 0.001 needs 4x: 8,000.
    assert stats.reps_for_end_error(0.002, 2000, 0.001) == 8000
    assert stats.reps_for_end_error(0.0005, 2000, 0.001) == 2000


def test_paired_test_and_tost_match_hand_values():
    x = np.array([[0.6], [0.5], [1.1], [0.4]])
    y = np.array([[0.5], [0.2], [0.9], [0.4]])
    # d = 0.1 0.3 0.2 0.0: mean 0.15, sd 0.1291, se 0.06455, t = 2.3238 on 3 df:
    # two-sided p = 0.1027.
    assert stats.paired_test(x, y) == pytest.approx(0.10273, abs=1e-5)
    # TOST at 0.1: (0.15 + 0.1) / se = 3.873, upper tail 0.0152; (0.15 - 0.1) / se =
    # 0.7746, lower tail 0.7525: p = 0.7525 (no equivalence: d is above the margin).
    assert stats.paired_tost(x, y, 0.1) == pytest.approx(0.75249, abs=1e-5)
    # At 0.5 both one-sided tests reject: (0.15 - 0.5) / se = -5.42, p = 0.0062.
    assert stats.paired_tost(x, y, 0.5) < 0.01
    # No spread in the differences: known exactly.
    exact = np.array([[0.5], [0.25], [1.0], [0.75]])  # sums without rounding
    assert stats.paired_test(exact, exact) == 1.0
    assert stats.paired_test(exact + 0.125, exact) == 0.0
    assert stats.paired_tost(exact + 0.0625, exact, 0.1) == 0.0
    with pytest.raises(ValueError):
        stats.paired_test(x, y[:3])
