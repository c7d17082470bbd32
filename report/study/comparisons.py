"""Methods compared on the runs.csv frame (`rows.runs_table`): every pair per env with
its verdict, the oracles against the baseline, the exact-hindsight formulas against each
other, and the trend of final success over each instrument's horizon.

For every pair per env: the probability of improvement P(X > Y) (Agarwal et al. 2021,
arXiv 2108.13264), the mean difference, a permutation test and a TOST equivalence test at
`EQUIVALENCE_MARGIN`, Holm-adjusted within the confirmatory family (`confirmatory`), the
rest marked exploratory; a Jonckheere-Terpstra test of a trend over the horizon
(report/stats.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from creditgym.credit import REGISTRY
from creditgym.credit.exact_source import EXACT_CLASSES
from creditgym.report import stats
from creditgym.report.study.rows import HORIZON_OPTIONS

# Fewer seeds than this per method and task give a bootstrap too coarse for a verdict
# (with one seed its interval is a single point).
MIN_SEEDS_FOR_VERDICT = 3

# The level of every test in the report; within a Holm family, of the whole family.
ALPHA = 0.05

# Two methods "tie" only when TOST shows their mean final success within this many
# (fractions of) success of each other, a margin stated before the re-run:
# 10 percentage points. A run's final success is measured on 64 held-out episodes, whose
# binomial standard error alone reaches 6.25 points; a smaller gap is within what one
# run's evaluation cannot resolve, and not one a reader would choose a method by.
EQUIVALENCE_MARGIN = 0.10

# The confirmatory family: every credit module in its default form (a registered name:
# no options, convention or trainer in the row name) against this baseline, per env.
BASELINE = "grpo"


def score_matrix(frame: pd.DataFrame, tasks: Sequence[str], column: str) -> np.ndarray | None:
    """(seeds, tasks) scores of one method; None unless every task has the same seed count.

    Rows are seeds in ascending order per task, so a stratified bootstrap resamples
    within each task's column."""
    columns = [frame[frame.task == task].sort_values("seed")[column].to_numpy() for task in tasks]
    if not columns or len({len(c) for c in columns}) != 1 or len(columns[0]) == 0:
        return None
    return np.stack(columns, axis=1).astype(float)


def confirmatory(x: str, y: str) -> bool:
    """Whether the pair (x, y) belongs to the confirmatory family: a credit module in its
    default form against `BASELINE` (the claims "X beats GRPO" the study exists for).
    Every other pair (variants, diagnosis rows, SFT, two challengers) is exploratory."""
    return BASELINE in (x, y) and x in REGISTRY and y in REGISTRY


def compare_pair(
    by_env: pd.DataFrame,
    x: str,
    y: str,
    column: str,
    reps: int,
    is_confirmatory: bool,
    label: str | None = None,
) -> dict[str, Any] | None:
    """The tests of X against Y on one env (its tasks as strata), over the seeds both ran
    on each task (a sweep part-way through leaves rows at unequal seeds), on the tasks
    where they share some, or None when they share none: P(X > Y) with its
    interval, the mean difference X - Y and its Welch interval, the permutation p-value of
    P(X > Y) = 1/2 and the TOST p-value at `EQUIVALENCE_MARGIN` (the last three only from
    `MIN_SEEDS_FOR_VERDICT` seeds on). `label` names the rows' scope (default: the env)."""
    pair = by_env[by_env.method.isin((x, y))]
    both = pair.groupby(["task", "seed"]).method.transform("nunique") == 2
    matched = pair[both]
    shared = list(dict.fromkeys(matched.task))
    mx = score_matrix(matched[matched.method == x], shared, column)
    my = score_matrix(matched[matched.method == y], shared, column)
    if mx is None or my is None:
        return None
    testable = mx.shape[0] >= MIN_SEEDS_FOR_VERDICT
    return {
        "env": label or by_env.env.iloc[0],
        "x": x,
        "y": y,
        "tasks": len(shared),
        "seeds": mx.shape[0],
        "p_x_beats_y": stats.probability_of_improvement(mx, my, reps=reps),
        "difference": stats.mean_difference(mx, my) if testable else None,
        "p_difference": stats.difference_test(mx, my) if testable else math.nan,
        "p_equivalence": stats.tost(mx, my, EQUIVALENCE_MARGIN) if testable else math.nan,
        # Seed by seed (rows of mx and my are the same seeds, ascending): exploratory.
        "paired": stats.paired_difference(mx, my) if testable else None,
        "seed_correlation": stats.row_correlation(mx, my),
        "confirmatory": is_confirmatory,
    }


def improvement_pairs(frame: pd.DataFrame, column: str, reps: int) -> pd.DataFrame:
    """`compare_pair` for every ordered pair of methods trained on one reward channel
    (oracles left out), per env, with the verdict each earns (`verdicts`)."""
    lines = []
    for _, by_env in frame.groupby("env", sort=False):
        methods = sorted(set(by_env.method[~by_env.oracle]))
        channel = dict(zip(by_env.method, by_env.channel, strict=True))
        form = dict(zip(by_env.method, by_env.form, strict=True))
        for i, x in enumerate(methods):
            for y in methods[i + 1 :]:
                if channel[x] == channel[y]:
                    is_confirmatory = confirmatory(form[x], form[y])
                    lines.append(compare_pair(by_env, x, y, column, reps, is_confirmatory))
    return verdicts(pd.DataFrame([line for line in lines if line is not None]))


def ceiling_pairs(frame: pd.DataFrame, column: str, reps: int) -> pd.DataFrame:
    """Each oracle row (credit that reads the exact MDP: the exact advantage, exact
    hindsight) against `BASELINE` on its own reward channel, per env (`compare_pair`):
    what perfect credit, or a hindsight formula fed perfect hindsight, buys over GRPO at
    the same rollouts. Never part of the ranking: every verdict is exploratory. Per env
    over its tasks, then per task of an env with several (whether the gap changes with
    the horizon)."""
    lines = []
    for _, by_env in frame.groupby("env", sort=False):
        channel = dict(zip(by_env.method, by_env.channel, strict=True))
        form = dict(zip(by_env.method, by_env.form, strict=True))
        # GRPO's row per channel: `grpo` on the return, `grpo on outcome`.
        baseline = {channel[m]: m for m in set(by_env.method) if form[m] == BASELINE}
        tasks = list(dict.fromkeys(by_env.task))
        scopes = [(None, by_env)] + [
            (task, by_env[by_env.task == task]) for task in tasks if len(tasks) > 1
        ]
        for x in sorted(set(by_env.method[by_env.oracle])):
            y = baseline.get(channel[x])
            if y is not None:
                lines += [
                    compare_pair(rows, x, y, column, reps, False, label) for label, rows in scopes
                ]
    return verdicts(pd.DataFrame([line for line in lines if line is not None]))


# The rows of the exact-hindsight classes (`credit.exact_source`), by their form.
EXACT_FORMS = frozenset(cls.name for cls in EXACT_CLASSES.values())


def exact_pairs(frame: pd.DataFrame, column: str, reps: int) -> pd.DataFrame:
    """Every pair of exact-hindsight rows (`EXACT_FORMS`, with whatever options:
    `hp_rlvr_exact [divergence_tol=1e-12]` against `hcapo_exact`) trained on one channel,
    per env over its tasks and per task of an env with several (`compare_pair`): the
    formulas against each other when both read perfect hindsight. Oracles both: every
    verdict is exploratory."""
    exact = frame[frame.form.str.split(" ", n=1).str[0].isin(EXACT_FORMS)]
    lines = []
    for _, by_env in exact.groupby("env", sort=False):
        tasks = list(dict.fromkeys(by_env.task))
        scopes = [(None, by_env)] + [
            (task, by_env[by_env.task == task]) for task in tasks if len(tasks) > 1
        ]
        channel = dict(zip(by_env.method, by_env.channel, strict=True))
        methods = sorted(set(by_env.method))
        for i, x in enumerate(methods):
            for y in methods[i + 1 :]:
                if channel[x] == channel[y]:
                    lines += [
                        compare_pair(rows, x, y, column, reps, False, label)
                        for label, rows in scopes
                    ]
    return verdicts(pd.DataFrame([line for line in lines if line is not None]))


def verdicts(pairs: pd.DataFrame) -> pd.DataFrame:
    """Adds each pair's verdict; the p-values of the confirmatory family's pairs become
    Holm-adjusted ones (differences and equivalences each a family of their own).

    "X better" when the difference test rejects at `ALPHA`; else "tie" when TOST shows
    equivalence within `EQUIVALENCE_MARGIN`; else "inconclusive" (a failed difference test
    is no evidence of equality). Exploratory pairs keep their unadjusted p-values and
    say so in the verdict."""
    if pairs.empty:
        return pairs
    pairs = pairs.copy()
    family = pairs.confirmatory & pairs.p_difference.notna()
    for column in ("p_difference", "p_equivalence"):
        pairs.loc[family, column] = stats.holm(pairs.loc[family, column].tolist())
    lines = []
    for row in pairs.itertuples(index=False):
        if math.isnan(row.p_difference):
            lines.append(f"cannot tell (fewer than {MIN_SEEDS_FOR_VERDICT} seeds)")
            continue
        if row.p_difference < ALPHA:
            verdict = f"{row.x if row.p_x_beats_y.value > 0.5 else row.y} better"
        elif row.p_equivalence < ALPHA:
            verdict = f"tie (within ±{100 * EQUIVALENCE_MARGIN:.0f} points)"
        else:
            verdict = "inconclusive"
        lines.append(verdict if row.confirmatory else f"exploratory: {verdict}")
    pairs["verdict"] = lines
    return pairs


def horizon_trends(frame: pd.DataFrame) -> pd.DataFrame:
    """Per instrument in `HORIZON_OPTIONS` and method run at two horizons or more: the
    Jonckheere-Terpstra test of a monotone trend of final success over the horizon, the
    p-values Holm-adjusted over all of the table's tests, and the verdict "falls" /
    "rises" (adjusted p < `ALPHA`) or "no trend shown"."""
    lines = []
    for (env, method), rows in frame[frame.env.isin(list(HORIZON_OPTIONS))].groupby(
        ["env", "method"], sort=True
    ):
        levels = sorted(set(rows.horizon))
        groups = [rows[rows.horizon == h].final_success.to_numpy(float) for h in levels]
        if len(levels) < 2 or min(len(g) for g in groups) < MIN_SEEDS_FOR_VERDICT:
            continue
        lines.append(
            {
                "env": env,
                "method": method,
                "levels": levels,
                "means": [float(g.mean()) for g in groups],
                "seeds": [len(g) for g in groups],
                "trend": stats.jonckheere_terpstra(groups),
            }
        )
    trends = pd.DataFrame(lines)
    if trends.empty:
        return trends
    trends["p_holm"] = stats.holm([t.p_value for t in trends.trend])
    trends["verdict"] = [
        t.direction if p < ALPHA else "no trend shown"
        for t, p in zip(trends.trend, trends.p_holm, strict=True)
    ]
    return trends
