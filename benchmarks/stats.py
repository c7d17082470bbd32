"""Interval estimates for few-seed results, after Agarwal et al. 2021 ("Deep Reinforcement
Learning at the Edge of the Statistical Precipice", arXiv 2108.13264).

Scores are matrices of shape (runs, tasks): one row per seed, one column per task. An
aggregate (mean, interquartile mean) is reported with a stratified bootstrap 95 %
percentile interval: seeds are resampled with replacement within each task, so every task
keeps its weight. The probability of improvement P(X > Y) is, per task, the probability
that a random run of X scores above a random run of Y (ties count one half: the
Mann-Whitney U statistic over all m x n pairs, divided by m n), averaged over tasks; its
interval comes from resampling the runs of X and of Y independently within each task.

These are the estimators of the paper's `rliable` package (`aggregate_iqm`,
`probability_of_improvement`, `get_interval_estimates`), written out here because that
package cannot be installed next to this project's pins: rliable 1.2.0 requires
arch < 8, arch 7.2 fails on import under pandas 3.1, and arch 8 no longer accepts the
`random_state` keyword rliable passes to its bootstrap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

# Bootstrap resamples per interval: the paper's figures use 50,000; 2,000 keep a whole
# study's intervals within seconds and their ends stable to about 0.01.
BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95


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
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(statistic(*samples), float(low), float(high))


def mean_and_iqm(
    scores: Mapping[str, np.ndarray], seed: int = 0, reps: int = BOOTSTRAP_REPS
) -> dict[str, tuple[Interval, Interval]]:
    """Per method: (mean, IQM) of its (runs, tasks) score matrix with stratified
    bootstrap intervals."""
    _check(scores)
    return {
        name: (
            _interval(lambda s: float(np.mean(s)), (matrix,), seed, reps),
            _interval(iqm, (matrix,), seed, reps),
        )
        for name, matrix in scores.items()
    }


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
