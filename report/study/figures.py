"""The study's figures: `credit_vs_horizon.png` (final success and curve area against
KeyDoor's delay and Umbrella's length per method: the classic credit-assignment plot),
`learning_curves.png` (success against rollouts) and `learning_curves_wallclock.png`
(against training seconds), `zero_variance_groups.png` (each run's observed fraction of
zero-variance groups against the prediction from its own success rate)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from creditgym.report import records
from creditgym.report.plots import method_colours
from creditgym.report.study.rows import HORIZON_OPTIONS

# Scatter markers of the instruments, in HORIZON_OPTIONS order; other envs get "^".
INSTRUMENT_MARKERS = ("o", "s", "D", "v", "P")


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
