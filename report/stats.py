"""Interval estimates for few-seed results, after Agarwal et al. 2021 ("Deep Reinforcement
Learning at the Edge of the Statistical Precipice", arXiv 2108.13264).

Scores are matrices of shape (runs, tasks): one row per seed, one column per task; every
bootstrap here is stratified (runs resampled with replacement within each task, so every
task keeps its weight). The interquartile mean (`iqm`) and the probability of improvement
P(X > Y) (per task the probability that a random run of X scores above a random run of Y,
ties one half: the Mann-Whitney U statistic over all m x n pairs divided by m n, averaged
over tasks; its percentile interval from resampling the runs of X and of Y independently
within each task) are the estimators of the paper's `rliable` package (`aggregate_iqm`,
`probability_of_improvement`, `get_interval_estimates`), written out here because that
package cannot be installed next to this project's pins: rliable 1.2.0 requires
arch < 8, arch 7.2 fails on import under pandas 3.1, and arch 8 no longer accepts the
`random_state` keyword rliable passes to its bootstrap.

At 5-10 seeds the percentile bootstrap is anti-conservative: it resamples only the values
seen, so its interval is too narrow, worst for the bimodal outcomes few-seed RL gives (GRPO
on KeyDoor delay 16, seeds .38 .14 .84 .12 .23: percentile [15.6, 60.6] %, Student-t
[-2.6, 71.0] %). For the cells of a report this module therefore gives

- `mean_estimate`: the mean with a BCa bootstrap interval (Efron 1987, through
  `scipy.stats.bootstrap(method="BCa")`) and a Student-t interval beside it; the headline
  interval is the hull of the two, so it covers whenever either does (the IQM:
  `bca_interval` of `iqm_of_tasks` alone, a trimmed mean has no t-interval of this simple
  form);
- `holm`: Holm's (1979) step-down adjustment of a family of p-values;
- `difference_test`: a stratified permutation test of P(X > Y) = 1/2 (the p-value a
  "better" verdict needs), and `mean_difference` / `tost`: the Welch interval of the mean
  difference and Schuirmann's (1987) two one-sided tests of equivalence within a margin
  stated in advance (the only ground for calling two methods a tie);
- `jonckheere_terpstra`: a permutation test of a monotone trend of scores over ordered
  levels (a delay, a length), the only ground for "falls with the delay";
- `paired_test` / `paired_tost`: the same two questions for rows paired by seed (the
  decisive study's stated analysis, docs/study_plan.md): a paired t-test of the mean
  per-seed difference, and two one-sided paired t-tests of equivalence within a margin;
- for planning a study from a pilot: `seeds_for_half_width` (the seeds a paired
  difference needs for a 95 % half-width, the t-quantile iterated), `sd_upper_limit`
  (how far a pilot's SD may understate the truth), and `bca_end_error` /
  `reps_for_end_error` (the Monte-Carlo error of BCa's ends at a number of resamples,
  and the resamples that bring it under a target).

Agarwal et al. 2021 ask for these habits: interval estimates, not point estimates or bare
significance; their stratified percentile bootstrap stays as the interval of P(X > Y),
which describes a pair while the tests decide it.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import scipy.stats

from creditgym.measure.bootstrap import CONFIDENCE, percentile_interval

# Bootstrap resamples per interval: the paper's figures use 50,000; 2,000 keep a whole
# study's intervals within seconds and their ends stable to about 0.01.
BOOTSTRAP_REPS = 2000


class Interval(NamedTuple):
    """A point estimate with its confidence interval [low, high]."""

    value: float
    low: float
    high: float

    def text(self, scale: float = 1.0, digits: int = 1) -> str:
        return (
            f"{self.value * scale:.{digits}f} "
            f"[{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"
        )

    def excludes(self, value: float) -> bool:
        return not self.low <= value <= self.high


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all scores: the mean of the middle 50 % (as
    `scipy.stats.trim_mean(x, 0.25)`: floor(n / 4) values cut from each end)."""
    values = np.sort(np.ravel(scores))
    cut = len(values) // 4
    return float(np.mean(values[cut : len(values) - cut]))


def win_rate(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) of two (runs, tasks) matrices: per task the share of (x, y) run pairs
    with x > y, ties one half, then the mean over tasks."""
    per_task = [
        np.mean((x[:, k, None] > y[None, :, k]) + 0.5 * (x[:, k, None] == y[None, :, k]))
        for k in range(x.shape[1])
    ]
    return float(np.mean(per_task))


def _resample(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rows drawn with replacement within each task column (the stratified bootstrap)."""
    rows = rng.integers(0, scores.shape[0], size=scores.shape)
    return np.take_along_axis(scores, rows, axis=0)


def _interval(
    statistic: Callable[..., float],
    samples: tuple[np.ndarray, ...],
    seed: int,
    reps: int,
) -> Interval:
    rng = np.random.default_rng(seed)
    draws = [statistic(*(_resample(s, rng) for s in samples)) for _ in range(reps)]
    return Interval(statistic(*samples), *percentile_interval(draws))


def probability_of_improvement(
    x: np.ndarray, y: np.ndarray, seed: int = 0, reps: int = BOOTSTRAP_REPS
) -> Interval:
    """P(X > Y) over (runs, tasks) matrices with the same tasks, with its interval."""
    _check({"x": x, "y": y})
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"X has {x.shape[1]} tasks, Y {y.shape[1]}: they must be the same")
    return _interval(win_rate, (x, y), seed, reps)


def _check(scores: Mapping[str, np.ndarray]) -> None:
    for name, matrix in scores.items():
        if matrix.ndim != 2 or matrix.shape[0] < 1 or matrix.shape[1] < 1:
            raise ValueError(f"{name}: scores must be a (runs, tasks) matrix, got {matrix.shape}")
        if not np.all(np.isfinite(matrix)):
            raise ValueError(f"{name}: scores hold NaN or infinite values")


# ------------------------------------------------------------ intervals that hold at 5-10 seeds
# Permutation tests deal every assignment when there are at most this many (the 5 + 5 runs
# of one task: 252), and otherwise draw this many at random with a fixed seed; the Monte
# Carlo p-value (1 + b) / (1 + draws) stays valid (Phipson & Smyth 2010) and its standard
# error at p = 0.05 is about 0.0015.
PERMUTATIONS = 20_000
# Two permutation statistics closer than this are equal (the same counts summed in another
# order); the statistics here are multiples of 1 / (2 m n) at least 1e-4 apart.
STATISTIC_TOLERANCE = 1e-9


class MeanEstimate(NamedTuple):
    """The mean of a (runs, tasks) matrix with its BCa and Student-t 95 % intervals and the
    headline interval a report prints (their hull, clipped to the scores' range)."""

    headline: Interval
    bca: Interval
    t: Interval


class Trend(NamedTuple):
    """A Jonckheere-Terpstra trend test: J, its mean under no trend, two-sided p-value."""

    statistic: float
    expected: float
    p_value: float

    @property
    def direction(self) -> str:
        """ "rises" or "falls" with the level (the sign of J - E[J]), or "flat"."""
        if self.statistic > self.expected:
            return "rises"
        return "falls" if self.statistic < self.expected else "flat"


def t_interval(scores: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """Student-t interval of the mean of a (runs, tasks) matrix.

    Each row holds one run per task, so the n row means (each run's mean over the tasks)
    are n independent draws whose mean is the matrix's mean; the interval is
    mean +- t_{n-1, (1 + c) / 2} s / sqrt(n), s the standard deviation (ddof 1) of the row
    means. One run gives the point itself. It assumes a roughly normal mean, which five
    bimodal seeds do not give, but unlike the bootstrap it widens with t's heavy tails
    when n is small (Agarwal et al. 2021 report bootstrap intervals; this is the usual
    cross-check)."""
    _check({"scores": scores})
    rows = scores.mean(axis=1)
    centre = float(rows.mean())
    if len(rows) < 2:
        return Interval(centre, centre, centre)
    quantile = scipy.stats.t.ppf((1 + confidence) / 2, len(rows) - 1)
    half = float(quantile * rows.std(ddof=1) / math.sqrt(len(rows)))
    return Interval(centre, centre - half, centre + half)


def paired_difference(x: np.ndarray, y: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """Student-t interval of mean(X - Y) over two (runs, tasks) matrices whose rows are
    matched: row i of each is one seed, whose runs share that seed's random streams
    (common random numbers). The n per-seed differences are the draws (`t_interval` of
    X - Y, n - 1 degrees of freedom); where the two methods' runs at a seed move together,
    the interval is narrower than Welch's (`mean_difference`), where they do not, wider
    (fewer degrees of freedom)."""
    if x.shape != y.shape:
        raise ValueError(f"paired matrices must have one shape, got {x.shape} and {y.shape}")
    return t_interval(x - y, confidence)


def row_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of matched rows' means (each seed's mean over the tasks) of
    two (runs, tasks) matrices; NaN below 3 rows or where either has no spread."""
    rx, ry = x.mean(axis=1), y.mean(axis=1)
    if len(rx) < 3 or rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def mean_of_tasks(*columns: np.ndarray, axis: int = -1) -> np.ndarray:
    """The mean over tasks of each task's mean: columns are (..., runs) arrays, one per
    task, reduced along `axis` (the signature `scipy.stats.bootstrap` calls)."""
    return np.mean([np.mean(column, axis=axis) for column in columns], axis=0)


def iqm_of_tasks(*columns: np.ndarray, axis: int = -1) -> np.ndarray:
    """`iqm` of all the columns' scores together, reduced along `axis` (as `mean_of_tasks`)."""
    values = np.sort(np.concatenate([np.moveaxis(c, axis, -1) for c in columns], axis=-1))
    cut = values.shape[-1] // 4
    return np.mean(values[..., cut : values.shape[-1] - cut], axis=-1)


def bca_interval(
    statistic: Callable[..., np.ndarray],
    scores: np.ndarray,
    seed: int = 0,
    reps: int = BOOTSTRAP_REPS,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Bias-corrected and accelerated bootstrap interval (Efron 1987) of a statistic of a
    (runs, tasks) matrix, stratified: each task's column is a sample of its own, resampled
    on its own (`scipy.stats.bootstrap(method="BCa")`).

    `statistic(*columns, axis=-1)`: `mean_of_tasks` or `iqm_of_tasks`. BCa moves the
    percentile ends by the bias (the share of resamples below the estimate) and the
    skewness (the jackknife's acceleration), which keeps its coverage closer to nominal
    than the plain percentile interval at 5-10 runs. Scores with no spread give the point
    itself: there is nothing to resample. Where the jackknife does not move although the
    scores do (the IQM of 0, 0, 0, 0, 0.016 is 0 with any one score left out) the
    acceleration is 0 / 0 and scipy returns NaN; it is then taken as 0, which is Efron's
    bias-corrected (BC) interval from the same resamples."""
    _check({"scores": scores})
    columns = tuple(scores.T)
    value = float(statistic(*columns))
    if scores.shape[0] < 2 or np.ptp(scores) == 0:
        return Interval(value, value, value)
    with warnings.catch_warnings():
        # The 0 / 0 acceleration warns before its NaN is handled below.
        warnings.simplefilter("ignore", (RuntimeWarning, scipy.stats.DegenerateDataWarning))
        result = scipy.stats.bootstrap(
            columns,
            statistic,
            n_resamples=reps,
            method="BCa",
            confidence_level=confidence,
            rng=seed,
        )
    low, high = result.confidence_interval
    if np.isnan(low) or np.isnan(high):
        draws = result.bootstrap_distribution
        # scipy's share of resamples below the estimate: ties count one half.
        below = (np.sum(draws < value) + np.sum(draws <= value)) / (2 * len(draws))
        z0 = scipy.stats.norm.ppf(below)
        tails = scipy.stats.norm.ppf([(1 - confidence) / 2, (1 + confidence) / 2])
        low, high = np.percentile(draws, 100 * scipy.stats.norm.cdf(2 * z0 + tails))
    if not (np.isfinite(low) and np.isfinite(high)):
        raise ValueError(f"BCa interval undefined for scores {scores.tolist()}")
    return Interval(value, float(low), float(high))


def mean_estimate(
    scores: np.ndarray,
    seed: int = 0,
    reps: int = BOOTSTRAP_REPS,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> MeanEstimate:
    """The mean of a (runs, tasks) matrix with its BCa and t intervals and the headline one.

    Headline: the hull [min of the lows, max of the highs], clipped to `bounds`, the range
    the scores can take (0-1 for a success rate; clipping loses no coverage, the true mean
    lies inside it). The hull covers whenever either interval does, so its coverage is at
    least the better of the two; taking the wider one instead would keep BCa's skewed
    side only when it happens to be longer. At five bimodal seeds the t-interval is mostly
    the wider, and BCa reaches further on a long tail (GRPO at delay 16, .38 .14 .84 .12
    .23: BCa [17.6, 65.6] %, t [-2.6, 71.0] %, headline [0, 71.0] %)."""
    bca = bca_interval(mean_of_tasks, scores, seed, reps)
    t = t_interval(scores)
    low = float(max(bounds[0], min(bca.low, t.low)))
    high = float(min(bounds[1], max(bca.high, t.high)))
    return MeanEstimate(Interval(bca.value, low, high), bca, t)


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's (1979) step-down adjusted p-values of a family of m tests, shape (m,) in the
    input's order.

    With p_(1) <= ... <= p_(m) sorted, the adjusted p_(i) = max over j <= i of
    min(1, (m - j + 1) p_(j)). Rejecting every hypothesis whose adjusted value is below
    alpha keeps the chance of any false rejection in the family at alpha, whatever the
    dependence between the tests; it rejects all that Bonferroni does, and more."""
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"p-values must be a list of numbers in [0, 1], got {p_values}")
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (len(p) - np.arange(len(p))) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def _deals(positions: tuple[int, ...], sizes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every way to deal `positions` into groups of `sizes`, each as the positions in
    group order: len(positions)! / prod(size!) of them."""
    if not sizes:
        return [()]
    return [
        first + rest
        for first in itertools.combinations(positions, sizes[0])
        for rest in _deals(tuple(p for p in positions if p not in first), sizes[1:])
    ]


def _assignments(
    strata: Sequence[tuple[int, ...]], seed: int, reps: int
) -> tuple[list[np.ndarray], bool]:
    """Per stratum (its group sizes) an (R, N_s) array of position orders, row r being the
    r-th reassignment of its values to the groups; every assignment (exact = True) when
    there are at most `reps`, else `reps` drawn at random."""
    count = math.prod(
        math.factorial(sum(sizes)) // math.prod(math.factorial(n) for n in sizes)
        for sizes in strata
    )
    if count <= reps:
        every = itertools.product(*(_deals(tuple(range(sum(s))), s) for s in strata))
        rows = list(every)
        return [np.array([row[k] for row in rows]) for k in range(len(strata))], True
    rng = np.random.default_rng(seed)
    return [rng.permuted(np.tile(np.arange(sum(s)), (reps, 1)), axis=1) for s in strata], False


def _two_sided_p(observed: float, null: np.ndarray, centre: float, exact: bool) -> float:
    """Share of reassignments whose statistic lies at least as far from `centre` as the
    observed one; over random draws (1 + b) / (1 + draws) (Phipson & Smyth 2010)."""
    extreme = int(np.sum(np.abs(null - centre) >= abs(observed - centre) - STATISTIC_TOLERANCE))
    return extreme / len(null) if exact else (1 + extreme) / (1 + len(null))


def _pairs_won(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row of (R, m) and (R, n): the pairs with a < b, ties one half, shape (R,)."""
    return np.sum((a[:, :, None] < b[:, None, :]) + 0.5 * (a[:, :, None] == b[:, None, :]), (1, 2))


def difference_test(x: np.ndarray, y: np.ndarray, seed: int = 0, reps: int = PERMUTATIONS) -> float:
    """Two-sided p-value of P(X > Y) = 1/2 by a stratified permutation test.

    x (m, tasks) and y (n, tasks) share their tasks. Within each task the m + n runs are
    pooled and dealt again into m and n; the statistic is `win_rate` (per task the
    Mann-Whitney U / (m n), averaged over tasks). Exact at 5 + 5 runs of one task (252
    deals, smallest p 2 / 252); beyond `reps` deals, `reps` random ones with a fixed seed.
    The verdict "X better" needs this p, Holm-adjusted within its family."""
    _check({"x": x, "y": y})
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"X has {x.shape[1]} tasks, Y {y.shape[1]}: they must be the same")
    m, n = x.shape[0], y.shape[0]
    orders, exact = _assignments([(m, n)] * x.shape[1], seed, reps)
    per_task = [np.concatenate([x[:, k], y[:, k]])[order] for k, order in enumerate(orders)]
    null = np.mean([_pairs_won(p[:, m:], p[:, :m]) / (m * n) for p in per_task], axis=0)
    return _two_sided_p(win_rate(x, y), null, 0.5, exact)


def _welch(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Mean difference of two (runs, tasks) matrices' row means, its standard error and
    Welch-Satterthwaite degrees of freedom (infinite when neither sample varies)."""
    _check({"x": x, "y": y})
    if min(x.shape[0], y.shape[0]) < 2:
        raise ValueError("a difference test needs at least 2 runs of each method")
    rx, ry = x.mean(axis=1), y.mean(axis=1)
    vx, vy = rx.var(ddof=1) / len(rx), ry.var(ddof=1) / len(ry)
    difference, se = float(rx.mean() - ry.mean()), math.sqrt(vx + vy)
    if se == 0:
        return difference, 0.0, math.inf
    return difference, se, (vx + vy) ** 2 / (vx**2 / (len(rx) - 1) + vy**2 / (len(ry) - 1))


def mean_difference(x: np.ndarray, y: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """Welch interval of mean(X) - mean(Y) over (runs, tasks) matrices with the same tasks
    (row means as in `t_interval`): d +- t_{df, (1 + c) / 2} se."""
    difference, se, df = _welch(x, y)
    half = float(scipy.stats.t.ppf((1 + confidence) / 2, df) * se) if se else 0.0
    return Interval(difference, difference - half, difference + half)


def tost(x: np.ndarray, y: np.ndarray, margin: float) -> float:
    """p-value of Schuirmann's (1987) two one-sided tests that mean(X) - mean(Y) lies
    within (-margin, margin), over (runs, tasks) matrices (Welch, as `mean_difference`).

    The larger of the p-values of H0: d <= -margin (t = (d + margin) / se, upper tail) and
    H0: d >= margin (t = (d - margin) / se, lower tail); below alpha, equivalence within
    the margin is shown (the 1 - 2 alpha interval lies inside it). A tie may be called
    only so, with the margin stated before looking: a difference test that fails to
    reject says nothing about equality. With no spread in either sample the difference is
    known exactly: p is 0 inside the margin, 1 outside."""
    return _tost_p(*_welch(x, y), margin)


def _tost_p(difference: float, se: float, df: float, margin: float) -> float:
    """The TOST p-value of an estimated difference with its standard error and degrees of
    freedom: max of P(t > (d + margin) / se) and P(t < (d - margin) / se)."""
    if not margin > 0:
        raise ValueError(f"the equivalence margin must be positive, got {margin}")
    if se == 0:
        return 0.0 if abs(difference) < margin else 1.0
    above_low = scipy.stats.t.sf((difference + margin) / se, df)
    below_high = scipy.stats.t.cdf((difference - margin) / se, df)
    return float(max(above_low, below_high))


def jonckheere_terpstra(
    groups: Sequence[np.ndarray], seed: int = 0, reps: int = PERMUTATIONS
) -> Trend:
    """Jonckheere-Terpstra test (Terpstra 1952, Jonckheere 1954) of a monotone trend of
    scores over ordered levels, with a two-sided permutation p-value.

    groups: 1-D score arrays (one per level, e.g. the seeds at delay 1, 4, 16) in level
    order. J = sum over level pairs i < j of the (x_i, x_j) pairs with x_i < x_j, ties one
    half; with no trend E[J] = sum_{i<j} n_i n_j / 2, J above it: scores rise with the
    level. p: the share of reassignments of all scores to the levels with |J - E[J]| at
    least the observed (exact up to `reps` assignments, else `reps` random ones). Chosen
    over a regression slope's t-test because it needs neither a linear effect of the
    level (the delays 1, 4, 16 are geometric) nor normal errors (five seeds of success
    rates are often bimodal), and over pairwise tests of the ends because it uses every
    level at once."""
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if len(arrays) < 2 or any(a.ndim != 1 or len(a) == 0 for a in arrays):
        raise ValueError("a trend test needs at least 2 levels, each a non-empty 1-D array")
    if not all(np.all(np.isfinite(a)) for a in arrays):
        raise ValueError("trend scores hold NaN or infinite values")
    sizes = tuple(len(a) for a in arrays)
    starts = np.cumsum((0, *sizes))
    expected = sum(sizes[i] * sizes[j] for i in range(len(sizes)) for j in range(i)) / 2

    def statistic(values: np.ndarray) -> np.ndarray:
        parts = [values[:, starts[i] : starts[i + 1]] for i in range(len(sizes))]
        return sum(
            _pairs_won(parts[i], parts[j])
            for i in range(len(parts))
            for j in range(i + 1, len(parts))
        )

    pooled = np.concatenate(arrays)
    (order,), exact = _assignments([sizes], seed, reps)
    observed = float(statistic(pooled[None, :])[0])
    p_value = _two_sided_p(observed, statistic(pooled[order]), expected, exact)
    return Trend(observed, expected, p_value)


def seeds_for_half_width(
    sd: float, half_width: float, confidence: float = CONFIDENCE, minimum: int = 2
) -> int:
    """The fewest seeds n (at least `minimum`, at least 2) whose Student-t interval of a
    mean has half-width t_{n-1, (1 + c) / 2} sd / sqrt(n) <= `half_width`.

    `sd`: the standard deviation of the per-seed values (for a difference paired by seed,
    of the per-seed differences: sqrt(sd_x^2 + sd_y^2 - 2 r sd_x sd_y)). Starts from the
    normal approximation n = (z sd / h)^2, which t's heavier tails can only raise, and
    steps n up until the t-quantile at n - 1 degrees of freedom meets the bound: the
    iteration n <- (t_{n-1} sd / h)^2 to its fixed point, exactly. sd = 0: `minimum`."""
    if not (math.isfinite(sd) and sd >= 0 and half_width > 0):
        raise ValueError(f"need sd >= 0 and half_width > 0, got {sd} and {half_width}")
    quantile = (1 + confidence) / 2
    n = max(minimum, 2, math.ceil((scipy.stats.norm.ppf(quantile) * sd / half_width) ** 2))
    while scipy.stats.t.ppf(quantile, n - 1) * sd / math.sqrt(n) > half_width:
        n += 1
    return n


def sd_upper_limit(sd: float, n: int, confidence: float = 0.8) -> float:
    """One-sided upper confidence limit of a normal SD estimated from n values:
    sd sqrt((n - 1) / chi2_{1 - c, n - 1}). A pilot of 10 seeds may understate the SD,
    and a plan from the point estimate then falls short of its half-width about half of
    the time; planning from this limit makes that 1 - c (Browne 1995)."""
    if n < 2:
        raise ValueError(f"an SD needs at least 2 values, got {n}")
    return float(sd * math.sqrt((n - 1) / scipy.stats.chi2.ppf(1 - confidence, n - 1)))


def bca_end_error(
    statistic: Callable[..., np.ndarray],
    scores: np.ndarray,
    reps: int,
    repeats: int = 8,
    confidence: float = CONFIDENCE,
) -> float:
    """Monte-Carlo error of `bca_interval`'s ends at `reps` resamples: the larger of the
    standard deviations (ddof 1) of the low and of the high end over `repeats` bootstrap
    seeds (0 .. repeats - 1). What the same interval would move by with another seed; it
    falls as 1 / sqrt(reps)."""
    if repeats < 2:
        raise ValueError(f"a Monte-Carlo error needs at least 2 repeats, got {repeats}")
    ends = np.array(
        [bca_interval(statistic, scores, seed, reps, confidence)[1:] for seed in range(repeats)]
    )
    return float(ends.std(axis=0, ddof=1).max())


def reps_for_end_error(error: float, reps: int, target: float) -> int:
    """Resamples that bring a Monte-Carlo error `error`, measured at `reps`, to `target`
    (error ~ 1 / sqrt(reps)): reps (error / target)^2 rounded up, never fewer than reps."""
    if not (error >= 0 and reps > 0 and target > 0):
        raise ValueError(f"need error >= 0, reps > 0, target > 0; got {error}, {reps}, {target}")
    return max(reps, math.ceil(reps * (error / target) ** 2))


def _paired(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """Mean and standard error of the per-seed differences of matched (runs, tasks)
    matrices (row means, as `paired_difference`), and their degrees of freedom."""
    if x.shape != y.shape or x.shape[0] < 2:
        raise ValueError(
            f"paired matrices need one shape and 2 rows or more, got {x.shape}, {y.shape}"
        )
    differences = (x - y).mean(axis=1)
    n = len(differences)
    return float(differences.mean()), float(differences.std(ddof=1) / math.sqrt(n)), n - 1


def paired_test(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of the paired t-test of mean(X - Y) = 0, rows matched by seed:
    t = mean(d) / (sd(d) / sqrt(n)) on n - 1 degrees of freedom (Student 1908). With no
    spread in the differences: 1 if they are all 0, else 0."""
    difference, se, df = _paired(x, y)
    if se == 0:
        return 1.0 if difference == 0 else 0.0
    return float(2 * scipy.stats.t.sf(abs(difference) / se, df))


def paired_tost(x: np.ndarray, y: np.ndarray, margin: float) -> float:
    """p-value of two one-sided paired t-tests (Schuirmann 1987) that mean(X - Y) lies
    within (-margin, margin), rows matched by seed: the larger of the p-values of
    H0: d <= -margin and H0: d >= margin on n - 1 degrees of freedom (as `tost`, paired)."""
    return _tost_p(*_paired(x, y), margin)
