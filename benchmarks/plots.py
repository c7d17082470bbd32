"""Leaderboard plots (matplotlib, Agg backend, PNG), drawn only from run folders.

- success rate of the training rollouts against optimiser steps and against wall-clock
  time, one line per method (mean over seeds), one panel per env;
- zero-gradient fraction per method (share of optimiser steps whose gradient norm was
  exactly zero, HP-RLVR's measure of GRPO's uniform groups);
- a credit heat map of one sample trajectory: steps down, credit modules across, the
  action text on each row, so a reader sees which steps each module credited.
"""

from __future__ import annotations

import statistics
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on CI or GPU hosts
import matplotlib.pyplot as plt
import numpy as np

from benchmarks import records

SUCCESS_METRIC = "rollout/success_rate"
ZERO_GRAD_METRIC = "charts/grad_norm_is_zero"


def method_name(run: records.RunData) -> str:
    return records.method_label(run.method)


def curves(
    runs: Sequence[records.RunData],
) -> dict[str, dict[str, list[tuple[float, float, float]]]]:
    """env -> method -> [(step, wall seconds, success)] averaged over seeds per step."""
    points: dict[tuple[str, str, int], list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        for record, wall in zip(run.metrics, records.training_clock(run.metrics), strict=True):
            if SUCCESS_METRIC in record:
                key = (run.env, method_name(run), int(record["step"]))
                points[key].append((wall, float(record[SUCCESS_METRIC])))
    result: dict[str, dict[str, list[tuple[float, float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for (env, method, step), values in sorted(points.items()):
        wall = statistics.fmean(v[0] for v in values)
        success = statistics.fmean(v[1] for v in values)
        result[env][method].append((float(step), wall, success))
    return result


def plot_success(runs: Sequence[records.RunData], path: Path, x_index: int, x_label: str) -> bool:
    """Training success against steps (x_index 0) or wall-clock (1); False if no data."""
    data = curves(runs)
    if not data:
        return False
    figure, axes = plt.subplots(1, len(data), figsize=(6 * len(data), 4), squeeze=False)
    for axis, (env, methods) in zip(axes[0], sorted(data.items()), strict=True):
        for method, series in sorted(methods.items()):
            axis.plot([p[x_index] for p in series], [p[2] for p in series], label=method)
        axis.set_title(env)
        axis.set_xlabel(x_label)
        axis.set_ylabel("training rollout success rate")
        axis.set_ylim(-0.02, 1.02)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def plot_zero_grad(runs: Sequence[records.RunData], path: Path) -> bool:
    """Bar per method: fraction of optimiser steps with an exactly-zero gradient norm."""
    flags: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for record in run.metrics:
            if ZERO_GRAD_METRIC in record:
                flags[f"{run.env}: {method_name(run)}"].append(float(record[ZERO_GRAD_METRIC]))
    if not flags:
        return False
    names = sorted(flags)
    figure, axis = plt.subplots(figsize=(8, 0.4 * len(names) + 1.5))
    axis.barh(names, [statistics.fmean(flags[n]) for n in names])
    axis.set_xlabel("zero-gradient fraction of optimiser steps")
    axis.set_xlim(0, 1)
    axis.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def pick_sample(
    runs: Sequence[records.RunData],
) -> tuple[records.RunData, Mapping[str, Any]] | None:
    """The sample with the most credit modules; ties: successful, then longest."""
    best: tuple[tuple[int, bool, int], records.RunData, Mapping[str, Any]] | None = None
    for run in runs:
        for sample in records.iter_jsonl(run.run_dir / records.SAMPLES_FILE):
            steps = len(sample["trajectory"]["steps"])
            rank = (len(sample["credit"]), bool(sample["trajectory"]["success"]), steps)
            if steps and (best is None or rank > best[0]):
                best = (rank, run, sample)
    return None if best is None else (best[1], best[2])


def plot_credit_heatmap(runs: Sequence[records.RunData], path: Path) -> bool:
    """Heat map of per-step credit of one trajectory, every module a column."""
    picked = pick_sample(runs)
    if picked is None:
        return False
    run, sample = picked
    modules = sorted(sample["credit"])
    steps = sample["trajectory"]["steps"]
    values = np.array([sample["credit"][m] for m in modules], dtype=float).T  # [T, modules]
    limit = float(np.abs(values).max()) or 1.0
    figure, axis = plt.subplots(figsize=(3 + 1.2 * len(modules), 1 + 0.35 * len(steps)))
    image = axis.imshow(values, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    axis.set_xticks(range(len(modules)), modules, rotation=30, ha="right")
    row_labels = [
        f"{t}{'*' if step['info'].get('key_step') else ' '} {textwrap.shorten(step['action'], 48)}"
        for t, step in enumerate(steps)
    ]
    axis.set_yticks(range(len(steps)), row_labels, fontsize=7, family="monospace")
    for t in range(values.shape[0]):
        for m in range(values.shape[1]):
            axis.text(m, t, f"{values[t, m]:.2f}", ha="center", va="center", fontsize=6)
    outcome = "success" if sample["trajectory"]["success"] else "failure"
    axis.set_title(
        f"{run.env} {sample['trajectory']['task_id']} ({outcome}); * = key step", fontsize=9
    )
    figure.colorbar(image, ax=axis, label="step credit (advantage)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def make_all(runs: Sequence[records.RunData], folder: Path) -> dict[str, Path]:
    """Draw every plot there is data for into `folder`; title -> PNG path."""
    folder.mkdir(parents=True, exist_ok=True)
    drawn: dict[str, Path] = {}
    jobs = {
        "Training success vs optimiser steps": (
            "success_vs_steps.png",
            lambda p: plot_success(runs, p, 0, "optimiser step"),
        ),
        "Training success vs wall-clock time": (
            "success_vs_wallclock.png",
            lambda p: plot_success(runs, p, 1, "training wall-clock seconds"),
        ),
        "Zero-gradient fraction per method": (
            "zero_grad_fraction.png",
            lambda p: plot_zero_grad(runs, p),
        ),
        "Credit heat map of one trajectory": (
            "credit_heatmap.png",
            lambda p: plot_credit_heatmap(runs, p),
        ),
    }
    for title, (filename, draw) in jobs.items():
        path = folder / filename
        if draw(path):
            drawn[title] = path
        else:
            path.unlink(missing_ok=True)  # a stale plot from older runs would mislead
    return drawn
