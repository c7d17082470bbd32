"""Leaderboard plots (matplotlib, Agg backend, PNG), drawn only from run folders.

- success rate of the training rollouts against optimiser steps and against training
  wall-clock time: one panel per task and budget (a group of rows of the leaderboard that
  differ only in the credit module), one line per credit module with the mean over seeds
  and a band of +- one standard error; a one-step run is a marker with an error bar;
- zero-gradient fraction (share of optimiser steps whose gradient norm was exactly zero,
  HP-RLVR's measure of GRPO's uniform groups), the same panels, one bar per module;
- a credit heat map of one sample trajectory: steps down, credit modules across, the
  action text on each row, and the model that scored the hindsight credit.

Every plot gives a credit module the same colour.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on CI or GPU hosts
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from creditgym.report import records

SUCCESS_METRIC = "rollout/success_rate"
ZERO_GRAD_METRIC = "charts/grad_norm_is_zero"
# Settings that tell the lines of one panel apart: the credit module, and the group size
# HP-RLVR's single-rollout method brings with it (it gets G times the tasks instead).
LINE_FIELDS = ("credit", "group_size")
# Scoring models with random weights: their hindsight credit shows the pipeline working,
# not a judgement (models/registry.py builds `tiny` from a seed, untrained).
RANDOM_WEIGHT_MODELS = frozenset({"tiny"})
PANELS_PER_ROW = 3
DPI = 120


def method_colours(names: Sequence[str]) -> dict[str, Any]:
    """Credit module -> colour, from the sorted names: the same module, the same colour, in
    every plot of one leaderboard."""
    palette = plt.get_cmap("tab10").colors
    return {name: palette[i % len(palette)] for i, name in enumerate(sorted(set(names)))}


def method_dashes(names: Sequence[str]) -> dict[str, str]:
    """Credit module -> line style, so that modules with equal curves (GiGPO is GRPO on
    one-step episodes) still show each line."""
    styles = ("-", "--", "-.", ":")
    return {name: styles[i % len(styles)] for i, name in enumerate(sorted(set(names)))}


def panel_of(run: records.RunData) -> tuple[str, str]:
    """(task, the run's settings less LINE_FIELDS as JSON): one panel of the training plots."""
    rest = {k: v for k, v in run.method_config.items() if k not in LINE_FIELDS}
    return run.env, json.dumps(rest, sort_keys=True)


def panel_titles(panels: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """A title per panel: the task, model and steps, and every setting panels differ in."""
    settings = {panel: json.loads(panel[1]) for panel in panels}
    keys = sorted({k for s in settings.values() for k in s} - {"model", "steps", "trainer"})
    differing = [k for k in keys if len({json.dumps(s.get(k)) for s in settings.values()}) > 1]
    titles = {}
    for panel, values in settings.items():
        # Panels are trained runs: a setting missing from one is at its default (a field
        # the run identity leaves out at its default), not one that does not apply.
        shown = [records.setting_text(values, k) if k in values else "default" for k in differing]
        extra = "".join(f", {k}={text}" for k, text in zip(differing, shown, strict=True))
        steps = records.plural(values["steps"], "step")
        titles[panel] = f"{panel[0]}\n" + textwrap.fill(f"{values['model']}, {steps}{extra}", 56)
    return titles


def curve_frame(runs: Sequence[records.RunData]) -> pd.DataFrame:
    """One line per (run, optimiser step) with a training success rate."""
    lines = [
        {
            "panel": panel_of(run),
            "credit": run.method_config["credit"],
            "run": run.run_dir.name,
            "step": int(record["step"]),
            "wall": wall,
            "success": float(record[SUCCESS_METRIC]),
        }
        for run in runs
        for record, wall in zip(run.metrics, records.training_clock(run.metrics), strict=True)
        if SUCCESS_METRIC in record
    ]
    return pd.DataFrame(lines, columns=["panel", "credit", "run", "step", "wall", "success"])


def curves(runs: Sequence[records.RunData]) -> pd.DataFrame:
    """Per panel, credit and step: mean and standard error over seeds, seeds n, mean wall
    seconds."""
    frame = curve_frame(runs)
    grouped = frame.groupby(["panel", "credit", "step"], as_index=False)
    return grouped.agg(
        success=("success", "mean"),
        se=("success", "sem"),
        n=("success", "count"),
        wall=("wall", "mean"),
    )


def panel_grid(count: int, height: float) -> tuple[plt.Figure, list[plt.Axes]]:
    """A figure with `count` panels, at most PANELS_PER_ROW a row; unused axes hidden."""
    columns = min(count, PANELS_PER_ROW)
    rows = -(-count // columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(5.6 * columns, height * rows), squeeze=False
    )
    flat = list(axes.flat)
    for axis in flat[count:]:
        axis.set_visible(False)
    return figure, flat[:count]


def plot_success(
    runs: Sequence[records.RunData], path: Path, colours: Mapping[str, Any], x: str
) -> bool:
    """Training success against optimiser steps (x="step") or wall seconds (x="wall");
    False if no run has training metrics."""
    data = curves(runs)
    if data.empty:
        return False
    panels = sorted(data["panel"].unique())
    titles = panel_titles(panels)
    dashes = method_dashes(list(colours))
    figure, axes = panel_grid(len(panels), 4.4)
    for axis, panel in zip(axes, panels, strict=True):
        in_panel = data[data["panel"] == panel]
        credits = sorted(in_panel["credit"].unique())
        single = [c for c in credits if (in_panel["credit"] == c).sum() == 1]
        for credit in credits:
            series = in_panel[in_panel["credit"] == credit].sort_values("step")
            xs = series[x].to_numpy(dtype=float)
            mean = series["success"].to_numpy()
            se = series["se"].fillna(0.0).to_numpy()
            label = f"{credit} ({records.plural(int(series['n'].max()), 'seed')})"
            colour = colours[credit]
            if len(series) == 1:
                if x == "step":  # side by side, so that equal points do not hide each other
                    xs = xs + 0.06 * (single.index(credit) - (len(single) - 1) / 2)
                axis.errorbar(xs, mean, yerr=se, fmt="o", color=colour, capsize=4, label=label)
                continue
            axis.plot(xs, mean, color=colour, linestyle=dashes[credit], label=label, linewidth=1.6)
            axis.fill_between(xs, mean - se, mean + se, color=colour, alpha=0.15, linewidth=0)
        axis.set_title(titles[panel], fontsize=10)
        axis.set_xlabel("optimiser step" if x == "step" else "training wall-clock seconds")
        axis.set_ylabel("training rollout success rate")
        axis.set_ylim(-0.03, 1.03)
        if x == "step":
            steps = sorted(in_panel["step"].unique())
            if len(steps) == 1:  # one optimiser step: a tick there, not a fractional axis
                axis.set_xticks(steps)
                axis.set_xlim(steps[0] - 0.5, steps[0] + 0.5)
            else:
                axis.xaxis.get_major_locator().set_params(integer=True)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="best")
    figure.suptitle("Training rollouts: mean over seeds, band ± 1 standard error", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return True


def zero_grad_frame(runs: Sequence[records.RunData]) -> pd.DataFrame:
    """Per panel and credit: zero-gradient fraction over all optimiser steps of all seeds,
    the steps counted and the seeds."""
    lines = [
        {
            "panel": panel_of(run),
            "credit": run.method_config["credit"],
            "run": run.run_dir.name,
            "flag": float(record[ZERO_GRAD_METRIC]),
        }
        for run in runs
        for record in run.metrics
        if ZERO_GRAD_METRIC in record
    ]
    frame = pd.DataFrame(lines, columns=["panel", "credit", "run", "flag"])
    return frame.groupby(["panel", "credit"], as_index=False).agg(
        fraction=("flag", "mean"), steps=("flag", "count"), seeds=("run", "nunique")
    )


def plot_zero_grad(runs: Sequence[records.RunData], path: Path, colours: Mapping[str, Any]) -> bool:
    """Per panel, one bar per credit module: share of optimiser steps whose gradient norm
    was exactly zero, labelled with its value and the steps it counts."""
    data = zero_grad_frame(runs)
    if data.empty:
        return False
    panels = sorted(data["panel"].unique())
    titles = panel_titles(panels)
    figure, axes = panel_grid(len(panels), 4.0)
    top = max(0.2, 1.3 * float(data["fraction"].max()))
    for axis, panel in zip(axes, panels, strict=True):
        in_panel = data[data["panel"] == panel].sort_values("credit")
        positions = np.arange(len(in_panel))
        axis.bar(
            positions,
            in_panel["fraction"],
            color=[colours[c] for c in in_panel["credit"]],
            width=0.6,
        )
        for position, (_, row) in zip(positions, in_panel.iterrows(), strict=True):
            axis.text(
                position,
                row["fraction"] + top * 0.02,
                f"{row['fraction']:.2f}\n({records.plural(row['steps'], 'step')})",
                ha="center",
                va="bottom",
                fontsize=8,
            )
        axis.set_xticks(positions, in_panel["credit"], fontsize=9)
        axis.set_ylim(0, top)
        axis.set_ylabel("zero-gradient fraction")
        axis.set_title(titles[panel], fontsize=10)
        axis.grid(axis="y", alpha=0.3)
    figure.suptitle(
        "Share of optimiser steps whose gradient norm was exactly 0, over all seeds", fontsize=11
    )
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return True


def samples_of(runs: Sequence[records.RunData]) -> list[tuple[records.RunData, dict[str, Any]]]:
    return [
        (run, sample)
        for run in runs
        for sample in records.read_samples(run.run_dir)
        if sample["trajectory"]["steps"]
    ]


def pick_sample(
    samples: Sequence[tuple[records.RunData, Mapping[str, Any]]],
) -> tuple[records.RunData, Mapping[str, Any]] | None:
    """The sample with the most credit modules; ties: successful, then longest."""
    if not samples:
        return None

    def rank(pair: tuple[records.RunData, Mapping[str, Any]]) -> tuple[int, bool, int]:
        trajectory = pair[1]["trajectory"]
        return len(pair[1]["credit"]), bool(trajectory["success"]), len(trajectory["steps"])

    return max(samples, key=rank)


def scorer_text(model: str) -> str:
    if model in RANDOM_WEIGHT_MODELS:
        return f"{model}, a model with random weights (shows the pipeline, not a judgement)"
    return model


def plot_credit_heatmap(
    picked: tuple[records.RunData, Mapping[str, Any]] | None,
    path: Path,
    colours: Mapping[str, Any],
) -> bool:
    """Heat map of per-step credit of one trajectory, every module a column; False if no
    run has a sample."""
    if picked is None:
        return False
    run, sample = picked
    modules = sorted(sample["credit"])
    steps = sample["trajectory"]["steps"]
    values = np.array([sample["credit"][m] for m in modules], dtype=float).T  # [T, modules]
    limit = float(np.abs(values).max()) or 1.0
    figure, axis = plt.subplots(figsize=(4 + 1.2 * len(modules), 2.2 + 0.38 * len(steps)))
    image = axis.imshow(values, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    axis.set_xticks(range(len(modules)), modules, rotation=30, ha="right")
    for label, module in zip(axis.get_xticklabels(), modules, strict=True):
        label.set_color(colours.get(module, "black"))
    row_labels = [
        f"{t}{'*' if step['info'].get('key_step') else ' '} {textwrap.shorten(step['action'], 48)}"
        for t, step in enumerate(steps)
    ]
    axis.set_yticks(range(len(steps)), row_labels, fontsize=8, family="monospace")
    for t in range(values.shape[0]):
        for m in range(values.shape[1]):
            shade = "white" if abs(values[t, m]) > 0.6 * limit else "black"
            axis.text(m, t, f"{values[t, m]:.2f}", ha="center", va="center", fontsize=7,
                      color=shade)  # fmt: skip
    trajectory = sample["trajectory"]
    outcome = "success" if trajectory["success"] else "failure"
    axis.set_title(
        f"{run.env} {textwrap.shorten(trajectory['task_id'], 90)} ({outcome}); * = key step\n"
        f"acted by {records.method_label(run.method_config)}; "
        f"model-scored credit from {scorer_text(sample['credit_model'])}",
        fontsize=9,
    )
    figure.colorbar(image, ax=axis, label="step credit (advantage)")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return True


def make_all(runs: Sequence[records.RunData], folder: Path) -> dict[str, Path]:
    """Draw every plot there is data for into `folder`; title -> PNG path."""
    folder.mkdir(parents=True, exist_ok=True)
    samples = samples_of(runs)
    picked = pick_sample(samples)
    names = [run.method_config["credit"] for run in runs if run.metrics]  # the trained ones
    colours = method_colours([*names, *(picked[1]["credit"] if picked else ())])
    jobs: dict[str, tuple[str, Any]] = {
        "Training success vs optimiser steps": (
            "success_vs_steps.png",
            lambda p: plot_success(runs, p, colours, "step"),
        ),
        "Training success vs wall-clock time": (
            "success_vs_wallclock.png",
            lambda p: plot_success(runs, p, colours, "wall"),
        ),
        "Zero-gradient fraction per method": (
            "zero_grad_fraction.png",
            lambda p: plot_zero_grad(runs, p, colours),
        ),
        "Credit heat map of one trajectory": (
            "credit_heatmap.png",
            lambda p: plot_credit_heatmap(picked, p, colours),
        ),
    }
    drawn: dict[str, Path] = {}
    for title, (filename, draw) in jobs.items():
        path = folder / filename
        if draw(path):
            drawn[title] = path
        else:
            path.unlink(missing_ok=True)  # a stale plot from older runs would mislead
    return drawn
