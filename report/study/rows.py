"""The reference study's report: `creditgym study`.

Reads the run folders of a study's sweep (`--runs`, default `results/study/runs/` of
`benchmarks/configs/study.toml`; `--config` names the sweep config in the header) and
writes, next to them (`results/study/`):

- `runs.csv`: one line per trained run: task, method, seed, final success, area under the
  learning curve, rollouts and training seconds to reach 50 % / 80 % success, the
  zero-gradient fraction and the zero-variance-group fraction with its p^G + (1 - p)^G
  prediction;
- `study.md`: per task the mean and interquartile mean (IQM) of final success and of the
  curve's area over seeds with 95 % intervals (the mean: the hull of a BCa bootstrap and
  a Student-t interval, both printed; the IQM: BCa), the speed table and the SFT rows;
  for every pair of methods per env the probability of improvement P(X > Y) (Agarwal et
  al. 2021, arXiv 2108.13264), the mean difference, a permutation test and a TOST
  equivalence test at `EQUIVALENCE_MARGIN`, Holm-adjusted within the confirmatory family
  (`confirmatory`), the rest marked exploratory; and a Jonckheere-Terpstra test of a
  trend of final success over each instrument's horizon (`benchmarks/stats.py`);
- figures: `credit_vs_horizon.png` (final success and curve area against KeyDoor's delay
  and Umbrella's length per method: the classic credit-assignment plot),
  `learning_curves.png` (success against rollouts) and `learning_curves_wallclock.png`
  (against training seconds), `zero_variance_groups.png` (each run's observed fraction of
  zero-variance groups against the prediction from its own success rate).

With `--calibration` it writes `calibration.md` instead of `study.md` (and runs.csv):
per setting the oracle's final success with its interval against `CALIBRATION_BAR`,
success per task type (Umbrella's forecast), and GRPO on the same channel beside it
(`calibration_table`; docs/instruments.md, "Calibration").

Area under the curve: the trapezoid area of held-out success over rollouts used,
divided by the rollouts of the last point, so 1.0 is a policy at 100 % from the start.
Rollouts to a threshold: those used before the first curve point at or above it (None:
never reached; such runs count as not reaching it, never as fast).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from creditgym import credit
from creditgym.agents.trajectory import DEFAULT_REWARD_CHANNEL
from creditgym.benchmarks import common, records, stats
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, parse_arguments, prog_of
from creditgym.benchmarks.plots import method_colours
from creditgym.credit import REGISTRY
from creditgym.credit.base import is_oracle
from creditgym.credit.exact_source import EXACT_CLASSES
from creditgym.envs import ENVS

THRESHOLDS = (0.5, 0.8)
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
# Fewest bootstrap resamples: a 95 % interval's ends are 2.5 % tail quantiles, which need a
# few resamples beyond them to be estimated at all.
MIN_REPS = 100
# The range of the report's scores (success rates and normalised curve areas): intervals
# of their means are clipped to it.
SCORE_RANGE = (0.0, 1.0)
# The row above a task's oracles (credit.base.is_oracle): listed apart, never compared.
ORACLE_HEADING = "*oracles (read ground truth; never ranked):*"
# An instrument setting is calibrated when the oracle (credit/oracle.py: the exact advantage
# of the current policy) reaches this final success within the study's budget: below it,
# the setting measures what the policy and budget cannot learn, not credit assignment.
CALIBRATION_BAR = 0.8
# The option that sets each instrument's horizon (`EnvInfo.horizon_option`), by the env's
# name as run records give it (`KeyDoor-v0`), in registration order.
HORIZON_OPTIONS = {
    info.id.split("/")[-1]: info.horizon_option for info in ENVS.values() if info.horizon_option
}
# Scatter markers of the instruments, in HORIZON_OPTIONS order; other envs get "^".
INSTRUMENT_MARKERS = ("o", "s", "D", "v", "P")


@dataclass(frozen=True)
class StudyArgs:
    """Tables and figures of the reference study from its run folders."""

    runs: Path = Path("results/study/runs")
    """Folder of the study's run folders (benchmarks/configs/study.toml's `out`)."""
    out: Path = Path("results/study")
    """Folder that receives runs.csv, study.md and the figures."""
    reps: int = stats.BOOTSTRAP_REPS
    """Bootstrap resamples per interval (at least 100)."""
    config: Path | None = None
    """The sweep config the run folders came from, named in the report's header."""
    calibration: bool = False
    """Write calibration.md (each oracle row against the 80 % bar, GRPO beside it) instead
    of study.md and its figures."""
    plan: bool = False
    """Print a study's plan from a pilot (--pilot) instead of writing a report: per
    confirmatory pair the seeds for a 95 % half-width of 10 and of 5 points, and the BCa
    resamples whose ends are stable to 0.1 point (docs/study_plan.md); writes nothing."""
    pilot: Path = Path("results/study_fair/runs")
    """The pilot's run folders that --plan reads (the committed fair study's)."""


def option(config: Mapping[str, Any], key: str) -> Any:
    """One `--env-options` value of a run (None when unset)."""
    for text in config.get("env_options", ()):
        name, _, value = text.partition("=")
        if name == key:
            return json.loads(value) if value.lstrip("-").isdigit() else value
    return None


def method_name(config: Mapping[str, Any]) -> str:
    """The study's row name: `method_form`, and the reward channel it trained on when not
    the default (`grpo on outcome`)."""
    channel = config.get("reward_channel", DEFAULT_REWARD_CHANNEL)
    name = method_form(config)
    return name if channel == DEFAULT_REWARD_CHANNEL else f"{name} on {channel}"


def method_form(config: Mapping[str, Any]) -> str:
    """Credit module, its convention when not creditgym's, the credit options it names,
    and the trainer when not policy gradient (`gigpo (verl-agent)`, `hcapo
    [do_no_harm=false]`, `sft+grpo`)."""
    name = config["credit"]
    if ":" in name:  # a module named by path is shown by its own name (`hcapo_exact`)
        name = credit.resolve(name).name
    if config.get("credit_convention", "creditgym") != "creditgym":
        name += f" ({config['credit_convention']})"
    if config.get("credit_options"):
        name += f" [{' '.join(sorted(config['credit_options']))}]"
    if config["trainer"] != "policy_gradient":
        name = f"{config['trainer']}+{name}"
    return name


def area_under_curve(points: Sequence[records.CurvePoint]) -> float:
    """Trapezoid area of success over rollouts, normalised by the last point's rollouts."""
    if len(points) < 2 or points[-1].rollouts == 0:
        return float("nan")
    x = np.array([p.rollouts for p in points], dtype=float)
    y = np.array([p.success_rate for p in points])
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / x[-1])


def first_reaching(
    points: Sequence[records.CurvePoint], threshold: float
) -> records.CurvePoint | None:
    return next((p for p in points if p.success_rate >= threshold), None)


def run_row(run: records.RunData) -> dict[str, Any]:
    """One trained run's line of runs.csv."""
    config = run.config
    env = str(config["env_id"]).split("/")[-1]
    points = records.curve_points(run)
    test = [e for e in run.episodes if e.index < config["eval_episodes"]]
    iterations = {}
    for record in run.metrics:  # one value per iteration (repeated on its optimiser steps)
        iterations[record["iteration"]] = record
    group = int(config["method_group_size"])
    success = np.array([r["rollout/success_rate"] for r in iterations.values()])
    zero_std = [r.get("credit/frac_reward_zero_std") for r in iterations.values()]
    row = {
        "run": run.run_dir.name,
        "task": run.env,
        "env": env,
        "horizon": option(config, HORIZON_OPTIONS[env]) if env in HORIZON_OPTIONS else None,
        "method": method_name(config),
        "form": method_form(config),
        # Rows are compared only on one channel, and oracles (credit.base.is_oracle) never.
        "channel": config.get("reward_channel", DEFAULT_REWARD_CHANNEL),
        "oracle": is_oracle(credit.resolve(config["credit"])),
        "seed": run.seed,
        "steps": int(config["steps"]),
        "learning_rate": config.get("learning_rate"),
        # The arithmetic the policy computed in, resolved (`float32`, `bfloat16-products`;
        # benchmarks/common.py resolve_dtype): `dtype = "fast"` resolves per processor.
        "precision": config.get("method_config", {}).get("dtype"),
        "group_size": group,
        "final_success": float(np.mean([e.success for e in test])),
        "eval_episodes": len(test),
        "auc": area_under_curve(points),
        "curve_points": len(points),
        "rollouts": records.rollouts_used(run.metrics),
        "train_seconds": records.training_clock(run.metrics)[-1] if run.metrics else 0.0,
        "zero_grad_fraction": float(np.mean([r["charts/grad_norm_is_zero"] for r in run.metrics])),
        # Groups whose rewards are all equal, measured, and predicted from the iteration's
        # success rate as if the reward were success alone: p^G + (1 - p)^G.
        "zero_std_groups": float(np.mean(zero_std)) if None not in zero_std else float("nan"),
        "predicted_zero_std": float(np.mean(success**group + (1 - success) ** group))
        if group > 1
        else float("nan"),
    }
    for threshold in THRESHOLDS:
        reached = first_reaching(points, threshold)
        percent = round(threshold * 100)
        row[f"rollouts_to_{percent}"] = reached.rollouts if reached else None
        row[f"seconds_to_{percent}"] = reached.train_seconds if reached else None
    return row


def runs_table(runs: Sequence[records.RunData]) -> pd.DataFrame:
    """runs.csv: trained runs with a learning curve (evaluation-only runs are baselines)."""
    rows = [run_row(run) for run in runs if run.training is not None and run.curve]
    if not rows:
        raise UsageError("no finished training run with a learning curve there yet")
    frame = name_budgets(pd.DataFrame(rows))
    twins = frame[frame.duplicated(["task", "method", "seed"], keep=False)]
    if not twins.empty:
        raise UsageError(f"two runs with the same task, method and seed: {twins.iloc[0].to_dict()}")
    return frame.sort_values(["env", "horizon", "task", "method", "seed"], na_position="first")


def name_budgets(frame: pd.DataFrame) -> pd.DataFrame:
    """Where one task's runs differ in iterations or learning rate (a calibration trying a
    larger budget), each row's name carries its own: `grpo (60 iterations) on outcome`;
    likewise where they differ in precision (a sweep continued on a processor where
    `dtype = "fast"` resolves otherwise), so that no row mixes arithmetic across its seeds:
    `grpo (float32)`. Rows of a task run at one budget and precision keep their plain names."""
    frame = frame.copy()
    names = []
    for row in frame.itertuples(index=False):
        same_task = frame[frame.task == row.task]
        budget = []
        if same_task.steps.nunique() > 1:
            budget.append(f"{row.steps} iterations")
        if same_task.learning_rate.nunique(dropna=False) > 1:
            budget.append(f"lr {row.learning_rate:g}")
        if same_task.precision.nunique(dropna=False) > 1:
            budget.append(str(row.precision))
        name = row.form + (f" ({', '.join(budget)})" if budget else "")
        names.append(name if row.channel == DEFAULT_REWARD_CHANNEL else f"{name} on {row.channel}")
    frame["method"] = names
    return frame


def baselines(runs: Sequence[records.RunData]) -> dict[str, float]:
    """Task -> the untrained policy's final success (its evaluation-only run)."""
    return {
        run.env: float(np.mean([e.success for e in run.episodes]))
        for run in runs
        if run.training is None and run.config["credit"] == "none"
    }


def score_matrix(frame: pd.DataFrame, tasks: Sequence[str], column: str) -> np.ndarray | None:
    """(seeds, tasks) scores of one method; None unless every task has the same seed count.

    Rows are seeds in ascending order per task, so a stratified bootstrap resamples
    within each task's column."""
    columns = [frame[frame.task == task].sort_values("seed")[column].to_numpy() for task in tasks]
    if not columns or len({len(c) for c in columns}) != 1 or len(columns[0]) == 0:
        return None
    return np.stack(columns, axis=1).astype(float)


def task_summary(frame: pd.DataFrame, reps: int) -> pd.DataFrame:
    """Per (task, method): seeds, mean and IQM of final success and of the curve's area
    with 95 % intervals, how many runs reached 50 / 80 %, median rollouts and seconds.

    `{column}_mean`: the headline interval of `stats.mean_estimate` (the hull of BCa and
    t, clipped to `SCORE_RANGE`), with `{column}_bca` and `{column}_t` beside it;
    `{column}_iqm`: the IQM with its BCa interval."""
    lines = []
    for task, by_task in frame.groupby("task", sort=False):
        for method, rows in by_task.groupby("method", sort=False):
            line = {"task": task, "method": method, "seeds": len(rows)}
            for column in ("final_success", "auc"):
                matrix = rows.sort_values("seed")[[column]].to_numpy(dtype=float)
                mean = stats.mean_estimate(matrix, reps=reps, bounds=SCORE_RANGE)
                line[f"{column}_mean"] = mean.headline
                line[f"{column}_bca"], line[f"{column}_t"] = mean.bca, mean.t
                line[f"{column}_iqm"] = stats.bca_interval(stats.iqm_of_tasks, matrix, reps=reps)
            for percent in (50, 80):
                reached = rows[f"rollouts_to_{percent}"].dropna()
                line[f"reached_{percent}"] = f"{len(reached)}/{len(rows)}"
                # The median over all seeds, not reaching counted as infinitely slow: only
                # defined when at least half the seeds reached it.
                line[f"median_rollouts_to_{percent}"] = _median_with_misses(
                    rows[f"rollouts_to_{percent}"]
                )
                line[f"median_seconds_to_{percent}"] = _median_with_misses(
                    rows[f"seconds_to_{percent}"]
                )
            lines.append(line)
    return pd.DataFrame(lines)


def _median_with_misses(values: pd.Series) -> float | None:
    ordered = sorted(math.inf if pd.isna(v) else float(v) for v in values)
    if not ordered:
        return None
    middle = ordered[(len(ordered) - 1) // 2] if len(ordered) % 2 else None
    if middle is None:
        low, high = ordered[len(ordered) // 2 - 1], ordered[len(ordered) // 2]
        middle = (low + high) / 2
    return None if math.isinf(middle) else middle


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


# ------------------------------------------------------------------------------ figures
def horizon_figure(frame: pd.DataFrame, summary: pd.DataFrame, path: Path) -> bool:
    """Final success and curve area against each instrument's horizon, per method."""
    envs = [env for env in HORIZON_OPTIONS if env in set(frame.env)]
    if not envs:
        return False
    trained = frame[~frame.method.str.contains(r"\+")]
    colours = method_colours(sorted(set(trained.method)))
    figure, axes = plt.subplots(2, len(envs), figsize=(5.5 * len(envs), 7), squeeze=False)
    for col, env in enumerate(envs):
        rows = trained[trained.env == env]
        for row_index, (column, label) in enumerate(
            (("final_success", "final held-out success"), ("auc", "area under the curve"))
        ):
            axis = axes[row_index][col]
            methods = sorted(set(rows.method))
            for rank, method in enumerate(methods):
                # Each method a little apart along the log axis, so equal points stay visible.
                nudge = 2 ** (0.05 * (rank - (len(methods) - 1) / 2))
                cells = summary[summary.method == method].set_index("task")
                points = (
                    rows[rows.method == method][["horizon", "task"]]
                    .drop_duplicates()
                    .sort_values("horizon")
                )
                xs, ys, lows, highs = [], [], [], []
                for horizon, task in points.itertuples(index=False):
                    mean = cells.loc[task, f"{column}_mean"]
                    xs.append(horizon * nudge)
                    ys.append(mean.value)
                    lows.append(mean.value - mean.low)
                    highs.append(mean.high - mean.value)
                axis.errorbar(
                    xs,
                    ys,
                    yerr=[lows, highs],
                    marker="o",
                    capsize=3,
                    label=method,
                    color=colours[method],
                )
            axis.set_xscale("log", base=2)
            # Ticks at the horizons run (5, 10, 20 are not powers of two), in plain numbers.
            horizons = sorted(set(rows.horizon))
            axis.set_xticks(horizons, [f"{h:g}" for h in horizons])
            axis.minorticks_off()
            axis.set_xlabel(HORIZON_OPTIONS[env])
            axis.set_ylabel(label)
            axis.set_ylim(-0.05, 1.05)
            axis.set_title(f"{env}: {label} (mean, 95 % CI)")
            axis.grid(alpha=0.3)
    shared_legend(figure, axes)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def shared_legend(figure: plt.Figure, axes: np.ndarray) -> None:
    """One legend under the panels naming every method drawn in any of them (a method
    run on some tasks only, such as a diagnosis row, is missing from the first panel)."""
    entries: dict[str, Any] = {}
    for axis in axes.flat:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    columns = min(4, max(1, len(entries)))
    figure.legend(
        list(entries.values()), list(entries), loc="lower center", ncol=columns, fontsize=8
    )
    rows = math.ceil(len(entries) / columns)
    figure.tight_layout(rect=(0, 0.035 * rows + 0.01, 1, 1))


def curve_figure(runs: Sequence[records.RunData], frame: pd.DataFrame, x: str, path: Path) -> None:
    """Held-out success against rollouts (`x="rollouts"`) or training seconds per task:
    the mean over seeds per method, shaded +- one standard error."""
    tasks = list(dict.fromkeys(frame.task))
    colours = method_colours(sorted(set(frame.method)))
    columns = min(3, len(tasks))
    rows_n = math.ceil(len(tasks) / columns)
    figure, axes = plt.subplots(rows_n, columns, figsize=(5 * columns, 3.6 * rows_n), squeeze=False)
    curves: dict[tuple[str, str], list[list[records.CurvePoint]]] = {}
    method_of = dict(zip(frame.run, frame.method, strict=True))
    for run in runs:
        if run.run_dir.name in method_of:
            key = (run.env, method_of[run.run_dir.name])
            curves.setdefault(key, []).append(records.curve_points(run))
    for index, task in enumerate(tasks):
        axis = axes[index // columns][index % columns]
        for method in sorted(set(frame[frame.task == task].method)):
            seeds = curves.get((task, method), [])
            length = min(len(points) for points in seeds)
            xs = np.array([[getattr(p, x) for p in points[:length]] for points in seeds])
            ys = np.array([[p.success_rate for p in points[:length]] for points in seeds])
            mean, se = (
                ys.mean(axis=0),
                ys.std(axis=0, ddof=1) / math.sqrt(len(ys)) if len(ys) > 1 else 0,
            )
            axis.plot(xs.mean(axis=0), mean, marker=".", color=colours[method], label=method)
            axis.fill_between(
                xs.mean(axis=0), mean - se, mean + se, color=colours[method], alpha=0.15
            )
        axis.set_title(task, fontsize=9)
        axis.set_xlabel("training rollouts" if x == "rollouts" else "training seconds")
        axis.set_ylabel("held-out success")
        axis.set_ylim(-0.05, 1.05)
        axis.grid(alpha=0.3)
    for index in range(len(tasks), rows_n * columns):
        axes[index // columns][index % columns].axis("off")
    shared_legend(figure, axes)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def zero_variance_figure(frame: pd.DataFrame, path: Path) -> None:
    """Observed fraction of zero-variance groups against p^G + (1 - p)^G, one dot per run."""
    rows = frame.dropna(subset=["zero_std_groups", "predicted_zero_std"])
    colours = method_colours(sorted(set(rows.method)))
    figure, axis = plt.subplots(figsize=(5.5, 5))
    for (env, method), group in rows.groupby(["env", "method"]):
        axis.scatter(
            group.predicted_zero_std,
            group.zero_std_groups,
            color=colours[method],
            marker=dict(zip(HORIZON_OPTIONS, INSTRUMENT_MARKERS, strict=False)).get(env, "^"),
            alpha=0.7,
            label=f"{method} · {env}",
        )
    axis.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    axis.set_xlabel("predicted from success rate: p^G + (1 - p)^G")
    axis.set_ylabel("observed zero-variance groups")
    axis.set_xlim(-0.02, 1.02)
    axis.set_ylim(-0.02, 1.02)
    axis.legend(fontsize=6)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ------------------------------------------------------------------------------ tables
def _value(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _p(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.2g}" if value < 0.01 else f"{value:.2f}"


def provenance(source: Path, out: Path, config: Path | None, calibration: bool = False) -> str:
    """The report's first sentence: the command that built it and where its runs came from."""
    command = f"creditgym study --runs {source} --out {out}"
    if config is not None:
        command += f" --config {config}"
    if calibration:
        command += " --calibration"
    origin = f"the sweep `{config}`" if config is not None else f"`{source}`"
    return f"Built by `{command}` from the run folders of {origin}; do not edit by hand."


def precision_sentence(frame: pd.DataFrame) -> str:
    """The arithmetic the runs of `frame` computed in (its `precision` column), said once:
    one precision for all, or each with its count where they differ (`name_budgets` then
    names the rows apart)."""
    counts = frame.precision.fillna("unrecorded").value_counts().sort_index()
    if len(counts) == 1:
        return f"Every run computed in {counts.index[0]} (`--dtype`, resolved)."
    spelled = ", ".join(f"{precision} ({count} runs)" for precision, count in counts.items())
    return (
        f"Runs computed in {spelled} (`--dtype`, resolved): rows of different precision are "
        "named apart and never pooled."
    )


def type_success(runs: Sequence[records.RunData], frame: pd.DataFrame) -> pd.DataFrame:
    """Final success per task type (Umbrella's forecast, SysDiag's fault family): one line
    per run of `frame` (its row names) and type; empty for envs whose episodes carry no
    type."""
    method_of = dict(zip(frame.run, frame.method, strict=True))
    lines = []
    for run in runs:
        if run.run_dir.name not in method_of:
            continue
        test = [e for e in run.episodes if e.index < run.config["eval_episodes"] and e.task_type]
        for kind in sorted({e.task_type for e in test}):
            lines.append(
                {
                    "task": run.env,
                    "method": method_of[run.run_dir.name],
                    "seed": run.seed,
                    "type": kind,
                    "success": float(np.mean([e.success for e in test if e.task_type == kind])),
                }
            )
    return pd.DataFrame(lines, columns=["task", "method", "seed", "type", "success"])


def type_lines(by_type: pd.DataFrame) -> list[str]:
    """A task's final success per task type and method, mean over seeds (none without
    types): a policy stuck on one action (always take the umbrella) wins every episode of
    one type and none of the other, which the overall rate hides."""
    if by_type.empty:
        return []
    table = by_type.groupby(["method", "type"]).success.mean().unstack("type")
    lines = [
        "Final success per task type, % (mean over seeds):",
        "",
        "| method | " + " | ".join(table.columns) + " |",
        "|---|" + "---|" * len(table.columns),
    ]
    for method, row in table.iterrows():
        lines.append(f"| {method} | " + " | ".join(_value(100 * v, 1) for v in row) + " |")
    return [*lines, ""]


def calibration_table(
    frame: pd.DataFrame, summary: pd.DataFrame, by_type: pd.DataFrame
) -> pd.DataFrame:
    """Per task and oracle row (credit.base.is_oracle): its final success with the headline
    interval, the verdict against `CALIBRATION_BAR`, its success per task type, and GRPO on
    the same reward channel (None where the folder has no such row).

    Verdict: "passes" when the interval's low end is at or above the bar; "passes on the
    mean" when only the mean is (few seeds: the interval reaches below); "fails" when the
    interval's high end is below it; else "below on the mean". One seed has no interval:
    its verdict is the mean's."""
    lines = []
    cells = summary.set_index(["task", "method"])
    oracle_rows = frame[frame.oracle][["task", "method", "channel", "steps", "learning_rate"]]
    for task, method, channel, steps, rate in oracle_rows.drop_duplicates().itertuples(index=False):
        mean = cells.loc[(task, method), "final_success_mean"]
        seeds = int(cells.loc[(task, method), "seeds"])
        if seeds > 1 and mean.low >= CALIBRATION_BAR:
            verdict = "passes"
        elif mean.value >= CALIBRATION_BAR:
            verdict = "passes on the mean"
        elif seeds > 1 and mean.high < CALIBRATION_BAR:
            verdict = "fails"
        else:
            verdict = "below on the mean"
        # GRPO on the same task, channel and budget.
        same = frame[
            (frame.task == task)
            & (frame.form == BASELINE)
            & (frame.channel == channel)
            & (frame.steps == steps)
            & ((frame.learning_rate == rate) | (frame.learning_rate.isna() & pd.isna(rate)))
        ]
        grpo = same.method.iloc[0] if not same.empty else None
        types = by_type[(by_type.task == task) & (by_type.method == method)]
        lines.append(
            {
                "task": task,
                "method": method,
                "seeds": seeds,
                "final_success": mean,
                "verdict": verdict,
                "by_type": types.groupby("type").success.mean().to_dict(),
                "baseline": cells.loc[(task, grpo), "final_success_mean"]
                if (task, grpo) in cells.index
                else None,
                "baseline_seeds": int(cells.loc[(task, grpo), "seeds"])
                if (task, grpo) in cells.index
                else 0,
            }
        )
    return pd.DataFrame(lines)


def _score(mean: stats.Interval, seeds: int) -> str:
    """A mean success in percent with its interval; one seed has none."""
    return mean.text(100) if seeds > 1 else f"{100 * mean.value:.1f} (one seed)"


def calibration_markdown(table: pd.DataFrame, header: str) -> str:
    """calibration.md: one line per setting and oracle row."""
    bar = f"{100 * CALIBRATION_BAR:.0f}"
    lines = [
        "# Calibration of the instruments",
        "",
        f"{header} A setting is calibrated when its oracle (credit that reads ground truth: "
        "`oracle`, the exact advantage of the current policy on the run's channel; on "
        "SysDiag, which has no exact MDP, `rule_based`, which reads the key-step labels) "
        f"reaches {bar} % final success within the study's budget. Final success: held-out "
        "evaluation after training, mean over seeds with the 95 % interval of "
        "`benchmarks/study.py` (the hull of BCa and Student-t, clipped to [0, 100]; at two "
        'seeds it is wide). Verdict: "passes" when the interval\'s low end is at or above '
        f'{bar} %, "passes on the mean" when only the mean is, "fails" when the '
        'interval\'s high end is below it, else "below on the mean". By type: final success '
        "per task type "
        "(Umbrella's forecast), mean over seeds. GRPO: the same setting, channel and budget.",
        "",
        f"| setting | oracle row | seeds | final success % (mean [95 % CI]) | ≥ {bar} %? | "
        "by type % | grpo seeds | grpo final success % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table.itertuples(index=False):
        types = " / ".join(f"{kind} {100 * value:.0f}" for kind, value in row.by_type.items())
        baseline = _score(row.baseline, row.baseline_seeds) if row.baseline is not None else "–"
        lines.append(
            f"| {row.task} | {row.method} | {row.seeds} | "
            f"{_score(row.final_success, row.seeds)} | "
            f"{row.verdict} | {types or '–'} | {row.baseline_seeds or '–'} | {baseline} |"
        )
    lines.append("")
    return "\n".join(lines)


def pair_table(pairs: pd.DataFrame, scope: str = "env") -> list[str]:
    """The markdown table of compared pairs (`compare_pair` rows with their verdicts);
    `scope` heads the first column."""
    margin = f"{100 * EQUIVALENCE_MARGIN:.0f}"
    lines = [
        f"| {scope} | X | Y | tasks | seeds | P(X > Y) [95 % CI] | X - Y, points [95 % CI] | "
        f"p diff | p equiv (±{margin}) | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in pairs.itertuples(index=False):
        difference = row.difference.text(100) if row.difference is not None else "–"
        lines.append(
            f"| {row.env} | {row.x} | {row.y} | {row.tasks} | {row.seeds} | "
            f"{row.p_x_beats_y.text(digits=2)} | {difference} | {_p(row.p_difference)} | "
            f"{_p(row.p_equivalence)} | {row.verdict} |"
        )
    return lines


def paired_table(pairs: pd.DataFrame) -> list[str]:
    """The markdown table of `compare_pair`'s seed-by-seed readings."""
    lines = [
        "| env | X | Y | seeds | X - Y seed by seed, points [95 % CI] | r over seeds |",
        "|---|---|---|---|---|---|",
    ]
    for row in pairs.itertuples(index=False):
        paired = row.paired.text(100) if row.paired is not None else "–"
        r = "–" if math.isnan(row.seed_correlation) else f"{row.seed_correlation:.2f}"
        lines.append(f"| {row.env} | {row.x} | {row.y} | {row.seeds} | {paired} | {r} |")
    return lines


def markdown(
    frame: pd.DataFrame,
    summary: pd.DataFrame,
    pairs: pd.DataFrame,
    ceilings: pd.DataFrame,
    formulas: pd.DataFrame,
    trends: pd.DataFrame,
    untrained: Mapping[str, float],
    header: str,
    by_type: pd.DataFrame,
) -> str:
    """study.md."""
    lines = [
        "# The reference study",
        "",
        f"{header} Final success: held-out "
        "evaluation after training; AUC: area under the held-out learning curve over rollouts "
        "(1.0 = perfect from the start). Intervals of a mean: 95 % over seeds, the hull of a "
        "BCa bootstrap interval (Efron 1987) and a Student-t interval, clipped to [0, 100] "
        "(each printed in the BCa / t column: at 5 seeds the percentile bootstrap is too "
        "narrow); of the IQM: BCa (Agarwal et al. 2021, arXiv 2108.13264; "
        "`benchmarks/stats.py`). Rows train on the env's return unless named `on outcome` "
        "(`--reward-channel`); pairs are compared on one channel only, and oracles (credit "
        'that reads ground truth) are listed apart and never ranked (the section "Oracles '
        f'against {BASELINE}" sets each against {BASELINE}, as an exploratory ceiling).',
        "",
    ]
    for task, rows in summary.groupby("task", sort=False):
        baseline = untrained.get(task)
        lines += [
            f"## {task}",
            "",
            *(
                [f"Untrained policy: {100 * baseline:.1f} % success.", ""]
                if baseline is not None
                else []
            ),
            "| method | seeds | final success % (mean [95 % CI]) | BCa / t | IQM % | AUC % | "
            "reached 50 % | median rollouts to 50 % | reached 80 % | median rollouts to 80 % | "
            "median train s to 80 % |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        # Oracles read ground truth: listed after the rest, under their own heading row.
        oracle = rows.method.isin(set(frame.method[frame.oracle]))
        for heading, group in ((None, rows[~oracle]), (ORACLE_HEADING, rows[oracle])):
            if heading is not None and not group.empty:
                lines.append(f"| {heading} |" + " |" * 10)
            for row in group.itertuples(index=False):
                both = " / ".join(
                    f"[{100 * i.low:.1f}, {100 * i.high:.1f}]"
                    for i in (row.final_success_bca, row.final_success_t)
                )
                lines.append(
                    f"| {row.method} | {row.seeds} | {row.final_success_mean.text(100)} | "
                    f"{both} | {row.final_success_iqm.text(100)} | {row.auc_mean.text(100)} | "
                    f"{row.reached_50} | {_value(row.median_rollouts_to_50)} | "
                    f"{row.reached_80} | {_value(row.median_rollouts_to_80)} | "
                    f"{_value(row.median_seconds_to_80)} |"
                )
        lines.append("")
        lines += type_lines(by_type[by_type.task == task])
    if not pairs.empty:
        family = int(pairs.confirmatory.sum())
        margin = f"{100 * EQUIVALENCE_MARGIN:.0f}"
        lines += [
            "## Pairwise comparisons (final success), per env over its tasks",
            "",
            "P(X > Y): the chance that a run of X ends with higher held-out success than a "
            "run of Y on the same task, with its stratified percentile-bootstrap 95 % interval "
            "(descriptive: the tests decide). X - Y: the difference of mean final success in "
            "points with its Welch 95 % interval. p diff: a stratified permutation test of "
            "P(X > Y) = 1/2; p equiv: TOST (Schuirmann 1987) that |X - Y| < "
            f"{margin} points, the equivalence margin stated before the re-run. Verdict: "
            f'"better" when p diff < {ALPHA}; else "tie" when p equiv < {ALPHA}; else '
            '"inconclusive" (a difference not shown is not a tie). The confirmatory family, '
            f"every credit module in its default form against {BASELINE} per env ({family} "
            "pairs), carries Holm-adjusted p-values (Holm 1979; differences and equivalences "
            "each a family); every other pair is exploratory: unadjusted, a lead for the next "
            "study, not a finding.",
            "",
            *pair_table(pairs.sort_values("confirmatory", ascending=False, kind="stable")),
            "",
            "### Seed by seed (exploratory)",
            "",
            "The runs of one seed share its random streams (methods of one group size train "
            "on the same tasks), so a pair can also be read seed by seed: X - Y as the mean "
            "of the per-seed differences with its Student-t 95 % interval over the seeds "
            "(n - 1 degrees of freedom), and r, the correlation of the two rows over the "
            "seeds. Where r is high the paired interval is narrower than the Welch interval "
            "above; where it is not, wider. Not part of the verdicts: the analysis above is "
            "the one stated before the runs; this is a lead for a study that states a paired "
            "analysis first.",
            "",
            *paired_table(pairs),
            "",
        ]
    if not ceilings.empty:
        lines += [
            f"## Oracles against {BASELINE}: what credit read off the exact MDP buys",
            "",
            f"Each oracle row against {BASELINE} on the channel both trained on, with the "
            "tests above: the exact advantage shows what perfect credit reaches at the same "
            "rollouts; a hindsight formula fed exact hindsight (`*_exact`, `hca`) shows what "
            "the formula does when the model's read of the outcome is perfect. Exploratory "
            "(unadjusted): a ceiling, not a ranking.",
            "",
            *pair_table(ceilings, scope="env or task"),
            "",
        ]
    if not formulas.empty:
        lines += [
            "## Exact hindsight, formula against formula",
            "",
            "The exact-hindsight rows against each other on the channel both trained on, "
            "with the tests above: HP-RLVR's divergence weights against HCAPO's ratio when "
            "both read the exact hindsight distribution. Exploratory (unadjusted): oracles "
            "both.",
            "",
            *pair_table(formulas, scope="env or task"),
            "",
        ]
    if not trends.empty:
        lines += [
            "## Trend of final success over the horizon",
            "",
            "Jonckheere-Terpstra test (permutation p-value, two-sided) of a monotone trend of "
            "each method's final success over KeyDoor's delay or Umbrella's length; J counts "
            "the (shorter, longer) seed pairs where the longer horizon scored higher (ties one "
            "half), E[J] its mean under no trend. p: Holm-adjusted over the "
            f'{len(trends)} tests of this table. A method "falls with the horizon" only '
            f"where the verdict says so (adjusted p < {ALPHA}).",
            "",
            "| env | method | horizons | seeds | final success % per horizon | J (E[J]) | "
            "p | p (Holm) | verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in trends.itertuples(index=False):
            lines.append(
                f"| {row.env} | {row.method} | {', '.join(f'{h:g}' for h in row.levels)} | "
                f"{', '.join(map(str, row.seeds))} | "
                f"{' → '.join(f'{100 * m:.1f}' for m in row.means)} | "
                f"{row.trend.statistic:g} ({row.trend.expected:g}) | {_p(row.trend.p_value)} | "
                f"{_p(row.p_holm)} | "
                f"{row.verdict} |"
            )
        lines.append("")
    zero = frame.dropna(subset=["zero_std_groups", "predicted_zero_std"])
    if not zero.empty:
        lines += [
            "## Zero-variance groups: observed against p^G + (1 - p)^G",
            "",
            "| env | method | runs | observed (mean) | predicted (mean) | zero-gradient steps |",
            "|---|---|---|---|---|---|",
        ]
        for (env, method), rows in zero.groupby(["env", "method"]):
            lines.append(
                f"| {env} | {method} | {len(rows)} | {rows.zero_std_groups.mean():.3f} | "
                f"{rows.predicted_zero_std.mean():.3f} | {rows.zero_grad_fraction.mean():.3f} |"
            )
        lines.append("")
    return "\n".join(lines)


# The half-widths a plan sizes seeds for: the equivalence margin, and half of it.
PLAN_HALF_WIDTHS = (EQUIVALENCE_MARGIN, EQUIVALENCE_MARGIN / 2)
# The endpoints a plan sizes seeds for (runs.csv's columns).
PLAN_ENDPOINTS = {"final_success": "final", "auc": "AUC"}
# BCa ends must move by at most this between bootstrap seeds (0.1 point), and the
# resamples at which the plan measures how much they do (and the seeds it measures over).
BCA_END_TARGET = 0.001
BCA_PILOT_REPS = 2000
BCA_REPEATS = 8


def plan_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """Per confirmatory pair of a pilot (a registered module in its default form against
    `BASELINE` on one task and channel, over the seeds both ran) and endpoint: the SD of
    the per-seed differences, the rows' correlation over the seeds, and the seeds a 95 %
    Student-t half-width of each of `PLAN_HALF_WIDTHS` needs, from the SD and from its
    80 % upper confidence limit (`stats.seeds_for_half_width`, `stats.sd_upper_limit`)."""
    trained = frame[~frame.oracle]
    lines = []
    for (task, channel), rows in trained.groupby(["task", "channel"], sort=False):
        forms = set(rows.form)
        if BASELINE not in forms:
            continue
        base = rows[rows.form == BASELINE].set_index("seed")
        for form in sorted(forms - {BASELINE}):
            if not confirmatory(form, BASELINE):
                continue
            other = rows[rows.form == form].set_index("seed")
            seeds = sorted(set(base.index) & set(other.index))
            if len(seeds) < MIN_SEEDS_FOR_VERDICT:
                continue
            for column, endpoint in PLAN_ENDPOINTS.items():
                x = other.loc[seeds, column].to_numpy(float)
                y = base.loc[seeds, column].to_numpy(float)
                sd = float(np.std(x - y, ddof=1))
                upper = stats.sd_upper_limit(sd, len(seeds))
                line = {
                    "env": rows.env.iloc[0],
                    "task": task,
                    "channel": channel,
                    "x": form,
                    "endpoint": endpoint,
                    "pilot_seeds": len(seeds),
                    "difference": float(np.mean(x - y)),
                    "sd_difference": sd,
                    "correlation": stats.row_correlation(x[:, None], y[:, None]),
                }
                for width in PLAN_HALF_WIDTHS:
                    points = round(100 * width)
                    line[f"seeds_{points}"] = stats.seeds_for_half_width(sd, width)
                    line[f"seeds_{points}_upper"] = stats.seeds_for_half_width(upper, width)
                lines.append(line)
    return pd.DataFrame(lines)


def plan_costs(frame: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per task and channel: the seeds the plan needs (the most any of its pairs needs
    over both endpoints, for each half-width, and never fewer than the pilot ran: a pilot
    SD of 0 at a ceiling sizes nothing) and what they cost, the pilot's median training
    seconds per run of each row (the baseline and the compared modules) times the seeds,
    in run-hours."""
    lines = []
    for (task, channel), group in pairs.groupby(["task", "channel"], sort=False):
        rows = frame[(frame.task == task) & (frame.channel == channel) & ~frame.oracle]
        forms = [BASELINE, *sorted(set(group.x))]
        seconds = sum(float(rows[rows.form == form].train_seconds.median()) for form in forms)
        line = {"task": task, "channel": channel, "rows": len(forms)}
        for width in PLAN_HALF_WIDTHS:
            points = round(100 * width)
            seeds = int(max(group[f"seeds_{points}"].max(), group.pilot_seeds.max()))
            line[f"seeds_{points}"] = seeds
            line[f"hours_{points}"] = seeds * seconds / 3600
        lines.append(line)
    return pd.DataFrame(lines)


def bca_stability(frame: pd.DataFrame) -> dict[str, Any]:
    """The Monte-Carlo error of BCa's ends (`stats.bca_end_error`) at `BCA_PILOT_REPS`
    resamples on every trained cell of the pilot (task x method, each endpoint), its
    largest, the resamples that bring that to `BCA_END_TARGET`
    (`stats.reps_for_end_error`), and the largest error measured again at them."""
    cells = [
        (column, rows[column].to_numpy(float)[:, None])
        for (_task, _method), rows in frame[~frame.oracle].groupby(["task", "method"])
        for column in PLAN_ENDPOINTS
        if len(rows) >= MIN_SEEDS_FOR_VERDICT
    ]
    errors = [
        stats.bca_end_error(stats.mean_of_tasks, scores, BCA_PILOT_REPS, BCA_REPEATS)
        for _, scores in cells
    ]
    worst = int(np.argmax(errors))
    reps = stats.reps_for_end_error(errors[worst], BCA_PILOT_REPS, BCA_END_TARGET)
    checked = stats.bca_end_error(stats.mean_of_tasks, cells[worst][1], reps, BCA_REPEATS)
    return {"cells": len(cells), "error": errors[worst], "reps": reps, "checked": checked}


def plan_markdown(pairs: pd.DataFrame, costs: pd.DataFrame, bca: Mapping[str, Any]) -> str:
    """The plan's tables (docs/study_plan.md quotes them)."""
    widths = [round(100 * w) for w in PLAN_HALF_WIDTHS]
    header = ["env", "task", "channel", "X vs grpo", "endpoint", "seeds", "mean X − grpo"]
    header += ["SD of differences", "r"]
    header += [f"seeds ±{w} (SD's 80 % UCL)" for w in widths]
    body = [
        [
            row.env,
            row.task,
            row.channel,
            row.x,
            row.endpoint,
            str(row.pilot_seeds),
            f"{100 * row.difference:+.1f}",
            f"{100 * row.sd_difference:.1f}",
            _value(row.correlation, 2) if math.isfinite(row.correlation) else "–",
            *(f"{getattr(row, f'seeds_{w}')} ({getattr(row, f'seeds_{w}_upper')})" for w in widths),
        ]
        for row in pairs.itertuples(index=False)
    ]
    cost_header = ["task", "channel", "rows"]
    cost_header += [c for w in widths for c in (f"seeds ±{w}", f"run-hours ±{w}")]
    cost_body = [
        [
            row.task,
            row.channel,
            str(row.rows),
            *(
                c
                for w in widths
                for c in (str(getattr(row, f"seeds_{w}")), f"{getattr(row, f'hours_{w}'):.1f}")
            ),
        ]
        for row in costs.itertuples(index=False)
    ]
    total = {w: costs[f"hours_{w}"].sum() for w in widths}
    return "\n".join(
        [
            "Per confirmatory pair and endpoint (differences and SD in points; seeds for a "
            "95 % Student-t half-width of the paired mean difference, from the SD and, in "
            "brackets, from its 80 % upper confidence limit):",
            "",
            common.markdown_table(header, body),
            "",
            "Per setting, the seeds the plan needs (the most over its pairs and both "
            "endpoints, at least the pilot's) and their cost at the pilot's median training "
            "seconds per run (one run at a time, the engine the pilot ran):",
            "",
            common.markdown_table(cost_header, cost_body),
            "",
            *(f"Total at ±{w} points: {total[w]:.1f} run-hours." for w in widths),
            "",
            f"BCa: over the pilot's {bca['cells']} cells (task x row x endpoint) the ends "
            f"move by at most {100 * bca['error']:.2f} points between bootstrap seeds at "
            f"{BCA_PILOT_REPS} resamples; {bca['reps']} resamples bring that to "
            f"{100 * BCA_END_TARGET:.1f} point (measured again there: "
            f"{100 * bca['checked']:.2f}).",
        ]
    )


def build(args: StudyArgs) -> pd.DataFrame:
    runs = records.load_runs(args.runs)
    frame = runs_table(runs)
    summary = task_summary(frame, args.reps)
    header = provenance(args.runs, args.out, args.config, args.calibration)
    header += " " + precision_sentence(frame)
    if args.calibration:
        table = calibration_table(frame, summary, type_success(runs, frame))
        if table.empty:
            raise UsageError(f"no oracle run in {args.runs}: nothing to calibrate against")
        args.out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(args.out / "runs.csv", index=False)
        (args.out / "calibration.md").write_text(
            calibration_markdown(table, header), encoding="utf-8"
        )
        return frame
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "runs.csv", index=False)
    pairs = improvement_pairs(frame, "final_success", args.reps)
    ceilings = ceiling_pairs(frame, "final_success", args.reps)
    formulas = exact_pairs(frame, "final_success", args.reps)
    trends = horizon_trends(frame)
    report = markdown(
        frame,
        summary,
        pairs,
        ceilings,
        formulas,
        trends,
        baselines(runs),
        header,
        type_success(runs, frame),
    )
    (args.out / "study.md").write_text(report, encoding="utf-8")
    horizon_figure(frame, summary, args.out / "credit_vs_horizon.png")
    curve_figure(runs, frame, "rollouts", args.out / "learning_curves.png")
    curve_figure(runs, frame, "train_seconds", args.out / "learning_curves_wallclock.png")
    zero_variance_figure(frame, args.out / "zero_variance_groups.png")
    return frame


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(StudyArgs, argv, prog_of("study"))
    if args.plan:
        if not args.pilot.is_dir():
            raise UsageError(f"no pilot run folder {args.pilot}")
        frame = runs_table(records.load_runs(args.pilot))
        pairs = plan_pairs(frame)
        if pairs.empty:
            raise UsageError(
                f"no confirmatory pair with {MIN_SEEDS_FOR_VERDICT} seeds in {args.pilot}"
            )
        print(plan_markdown(pairs, plan_costs(frame, pairs), bca_stability(frame)))
        return 0
    if args.reps < MIN_REPS:
        raise UsageError(f"--reps must be at least {MIN_REPS}, got {args.reps}")
    if not args.runs.is_dir():
        raise UsageError(f"no run folder {args.runs}: run the study's sweep first")
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"no sweep config {args.config}")
    frame = build(args)
    report = "calibration.md" if args.calibration else "study.md"
    print(f"{len(frame)} runs over {frame.task.nunique()} tasks -> {args.out}/{report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
