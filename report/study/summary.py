"""The statistics of one method's seeds on one task: the table `STATISTICS`.

`task_summary` computes every entry per (task, method) of runs.csv (`rows.runs_table`), and
study.md's per-task table prints the columns the entries show, in the table's order. A new
statistic is one entry: what it computes from the method's rows on a task (ascending seed)
and the columns it shows; a pure function of scores it needs goes in report/stats.py, with
a test by hand in tests/test_stats.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import pandas as pd

from creditgym.report import stats

# The range of the report's scores (success rates and normalised curve areas): intervals
# of their means are clipped to it.
SCORE_RANGE = (0.0, 1.0)
# Fewest bootstrap resamples: a 95 % interval's ends are 2.5 % tail quantiles, which need a
# few resamples beyond them to be estimated at all.
MIN_REPS = 100


class Column(NamedTuple):
    """One column of study.md's per-task table."""

    header: str
    text: Callable[[Any], str]  # a row of `task_summary` (a named tuple) -> the cell


@dataclass(frozen=True)
class Statistic:
    """One statistic of a method's seeds on a task."""

    name: str
    compute: Callable[[pd.DataFrame, int], dict[str, Any]]
    """(the method's runs.csv rows on one task, ascending seed; bootstrap resamples) -> the
    columns of `task_summary` it fills."""
    shown: tuple[Column, ...] = ()
    """Its columns in study.md's per-task table; none: computed for the figures and
    calibration.md only."""


def value_text(value: Any, digits: int = 0) -> str:
    """A number with `digits` decimals; "–" for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def mean_of(column: str) -> Callable[[pd.DataFrame, int], dict[str, Any]]:
    """`{column}_mean`: the headline interval of `stats.mean_estimate` (the hull of BCa and
    t, clipped to `SCORE_RANGE`), with `{column}_bca` and `{column}_t` beside it."""

    def compute(rows: pd.DataFrame, reps: int) -> dict[str, Any]:
        matrix = rows[[column]].to_numpy(dtype=float)
        mean = stats.mean_estimate(matrix, reps=reps, bounds=SCORE_RANGE)
        return {f"{column}_mean": mean.headline, f"{column}_bca": mean.bca, f"{column}_t": mean.t}

    return compute


def iqm_of(column: str) -> Callable[[pd.DataFrame, int], dict[str, Any]]:
    """`{column}_iqm`: the interquartile mean with its BCa interval."""

    def compute(rows: pd.DataFrame, reps: int) -> dict[str, Any]:
        matrix = rows[[column]].to_numpy(dtype=float)
        return {f"{column}_iqm": stats.bca_interval(stats.iqm_of_tasks, matrix, reps=reps)}

    return compute


def reaching(percent: int) -> Callable[[pd.DataFrame, int], dict[str, Any]]:
    """`reached_{percent}` ("3/5": the runs that reached the threshold) and the median
    rollouts and training seconds to it over all seeds, not reaching counted as infinitely
    slow: defined only when at least half the seeds reached it."""

    def compute(rows: pd.DataFrame, reps: int) -> dict[str, Any]:
        reached = rows[f"rollouts_to_{percent}"].dropna()
        return {
            f"reached_{percent}": f"{len(reached)}/{len(rows)}",
            f"median_rollouts_to_{percent}": _median_with_misses(rows[f"rollouts_to_{percent}"]),
            f"median_seconds_to_{percent}": _median_with_misses(rows[f"seconds_to_{percent}"]),
        }

    return compute


def _median_with_misses(values: pd.Series) -> float | None:
    ordered = sorted(math.inf if pd.isna(v) else float(v) for v in values)
    if not ordered:
        return None
    middle = ordered[(len(ordered) - 1) // 2] if len(ordered) % 2 else None
    if middle is None:
        low, high = ordered[len(ordered) // 2 - 1], ordered[len(ordered) // 2]
        middle = (low + high) / 2
    return None if math.isinf(middle) else middle


def _bca_and_t(row: Any) -> str:
    return " / ".join(
        f"[{100 * i.low:.1f}, {100 * i.high:.1f}]"
        for i in (row.final_success_bca, row.final_success_t)
    )


# Every statistic of a method's seeds on a task, in study.md's column order.
STATISTICS = (
    Statistic(
        "mean final success",
        mean_of("final_success"),
        (
            Column(
                "final success % (mean [95 % CI])", lambda row: row.final_success_mean.text(100)
            ),
            Column("BCa / t", _bca_and_t),
        ),
    ),
    Statistic(
        "IQM of final success",
        iqm_of("final_success"),
        (Column("IQM %", lambda row: row.final_success_iqm.text(100)),),
    ),
    Statistic("mean AUC", mean_of("auc"), (Column("AUC %", lambda row: row.auc_mean.text(100)),)),
    Statistic("IQM of AUC", iqm_of("auc")),
    Statistic(
        "reaching 50 %",
        reaching(50),
        (
            Column("reached 50 %", lambda row: row.reached_50),
            Column("median rollouts to 50 %", lambda row: value_text(row.median_rollouts_to_50)),
        ),
    ),
    Statistic(
        "reaching 80 %",
        reaching(80),
        (
            Column("reached 80 %", lambda row: row.reached_80),
            Column("median rollouts to 80 %", lambda row: value_text(row.median_rollouts_to_80)),
            Column("median train s to 80 %", lambda row: value_text(row.median_seconds_to_80)),
        ),
    ),
)


def task_summary(frame: pd.DataFrame, reps: int) -> pd.DataFrame:
    """Per (task, method) of runs.csv: the seeds and every entry of `STATISTICS`."""
    lines = []
    for task, by_task in frame.groupby("task", sort=False):
        for method, rows in by_task.groupby("method", sort=False):
            line = {"task": task, "method": method, "seeds": len(rows)}
            by_seed = rows.sort_values("seed")
            for statistic in STATISTICS:
                line.update(statistic.compute(by_seed, reps))
            lines.append(line)
    return pd.DataFrame(lines)
