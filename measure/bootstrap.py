"""The bootstrap errors every measurement of credit reports with.

- `percentile_interval`: the central `confidence` interval of bootstrap draws (Efron and
  Tibshirani 1993, ch. 13), what the ablation's intervals and the leaderboard's
  stratified interval of P(X > Y) (`report.stats`) both take;
- `bootstrap_interval`: that interval for a statistic of resampled item indices, the
  resamples drawn once and shared by every row, so the rows' intervals are paired;
- `block_bootstrap_se`: the standard error of a statistic over resamples of whole blocks
  (a pool's groups, whose rollouts share a task and the env's draws, so they are not
  independent items).

A statistic that is not finite on a resample (a correlation of constant values) is left
out of the draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

# The intervals are 95 % unless a caller asks otherwise.
CONFIDENCE = 0.95


def percentile_interval(
    draws: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """(low, high) percentiles of `draws` leaving (1 - confidence) / 2 in each tail."""
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def finite_draws(
    statistic: Callable[[np.ndarray], float], resamples: Iterable[np.ndarray]
) -> np.ndarray:
    """`statistic(indices)` of each resample of indices, the non-finite values dropped.

    `resamples` may be a generator drawing each resample as it is asked for, so a
    statistic and its draws interleave exactly as a loop would.
    """
    values = np.array([statistic(indices) for indices in resamples], dtype=np.float64)
    return values[np.isfinite(values)]


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float],
    count: int,
    resamples: np.ndarray,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile interval of `statistic(indices)` over bootstrap resamples of `count` items.

    Args:
        statistic: resampled indices [count] -> value (NaN values are dropped).
        resamples: [R, >= count] non-negative integers, each row one resample, reduced
            modulo `count` (the same for every row of a table, so intervals are paired).
    Returns:
        (low, high); NaN both when there are no items or no finite value.
    """
    if count == 0:
        return math.nan, math.nan
    values = finite_draws(statistic, resamples[:, :count] % count)
    if values.size == 0:
        return math.nan, math.nan
    return percentile_interval(values, confidence)


def block_bootstrap_se(
    blocks: Sequence[Sequence[int]],
    statistic: Callable[[np.ndarray], float],
    resamples: int,
    rng: np.random.Generator,
) -> float:
    """Standard deviation of `statistic(indices)` over resamples of whole blocks.

    Args:
        blocks: index lists (the groups); a resample draws len(blocks) of them with
            replacement and passes their indices, concatenated, to `statistic`.
    Returns:
        the standard error; NaN when fewer than two resamples give a finite value.
    """

    def resampled() -> Iterable[np.ndarray]:
        for _ in range(resamples):
            chosen = rng.integers(0, len(blocks), size=len(blocks))
            yield np.concatenate([np.asarray(blocks[k], dtype=np.int64) for k in chosen])

    values = finite_draws(statistic, resampled())
    return float(np.std(values, ddof=1)) if len(values) >= 2 else float("nan")
