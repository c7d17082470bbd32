"""Leaderboard from run folders: `python -m benchmarks.leaderboard`.

Reads only `results/runs/*/` (config.json, episodes.jsonl, metrics.jsonl,
training.json) and writes `results/leaderboard.md`, `.csv` and a static, sortable
`.html` page (inline JavaScript, works offline) plus the plots of `benchmarks.plots`.
Never edit those files by hand: rerun this command.

Rows are methods (model + trainer + credit + group size G + optimiser steps); columns
are env x split, and in a second table env x split x task type (ALFWorld task type,
SysDiag fault family). A cell is the success rate in percent as
mean +- standard error over seeds (one run per seed), with n the number of seeds; the
per-run rate is over that run's evaluation episodes (BALROG reports the same way).
"""

from __future__ import annotations

import csv
import html
import io
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tyro

from benchmarks import plots, records
from benchmarks.cli import UsageError, exit_on_usage_error

# Two means closer than this many combined standard errors are reported as a tie.
DISTINGUISHABLE_SE = 2.0


@dataclass(frozen=True)
class Cell:
    """Success % over seeds: mean, standard error (None for one seed), seeds n."""

    mean: float
    se: float | None
    n: int

    def text(self) -> str:
        spread = f" ± {self.se:.1f}" if self.se is not None else ""
        return f"{self.mean:.1f}{spread} (n={self.n})"


def cell(values: Sequence[float]) -> Cell:
    """Mean and standard error of per-seed values (s.e. = sample std / sqrt(n))."""
    n = len(values)
    se = statistics.stdev(values) / math.sqrt(n) if n > 1 else None
    return Cell(statistics.fmean(values), se, n)


def success_rate(episodes: Sequence[records.EpisodeRecord]) -> float:
    return 100.0 * sum(e.success for e in episodes) / len(episodes)


@dataclass(frozen=True)
class Table:
    """The leaderboard: per method, success cells and training statistics."""

    columns: tuple[str, ...]  # "env/split" (and "env/split/task_type") labels
    task_type_columns: tuple[str, ...]
    methods: tuple[tuple[Any, ...], ...]
    cells: Mapping[tuple[tuple[Any, ...], str], Cell]
    stats: Mapping[tuple[Any, ...], Mapping[str, float | None]]


def build_table(runs: Sequence[records.RunData]) -> Table:
    """Aggregate runs into cells: per-run success rates, then mean +- s.e. over runs."""
    per_run: dict[tuple[tuple[Any, ...], str], list[float]] = defaultdict(list)
    task_type_columns: set[str] = set()
    for run in runs:
        groups: dict[str, list[records.EpisodeRecord]] = defaultdict(list)
        for episode in run.episodes:
            groups[f"{run.env}/{episode.split}"].append(episode)
            if episode.task_type:
                column = f"{run.env}/{episode.split}/{episode.task_type}"
                groups[column].append(episode)
                task_type_columns.add(column)
        for column, episodes in groups.items():
            per_run[(run.method, column)].append(success_rate(episodes))
    all_columns = sorted({column for _, column in per_run})
    by_method: dict[tuple[Any, ...], list[records.RunData]] = defaultdict(list)
    for run in runs:
        by_method[run.method].append(run)
    stats = {method: method_stats(method_runs) for method, method_runs in by_method.items()}
    cells = {key: cell(values) for key, values in per_run.items()}

    def best_mean(method: tuple[Any, ...]) -> float:
        means = [cells[(method, c)].mean for c in all_columns if (method, c) in cells]
        return statistics.fmean(means) if means else 0.0

    methods = sorted(by_method, key=lambda m: (str(m[0]), -best_mean(m), str(m)))
    return Table(
        columns=tuple(c for c in all_columns if c not in task_type_columns),
        task_type_columns=tuple(sorted(task_type_columns)),
        methods=tuple(methods),
        cells=cells,
        stats=stats,
    )


def method_stats(runs: Sequence[records.RunData]) -> dict[str, float | None]:
    """Trajectory length, zero-gradient fraction, training time and rollouts of a method.

    The zero-gradient fraction counts optimiser-step records whose gradient norm is
    exactly zero over all records of all seeds, as HP-RLVR reports it for GRPO.
    """
    lengths = [e.steps for run in runs for e in run.episodes]
    zero_flags = [
        float(m["charts/grad_norm_is_zero"])
        for run in runs
        for m in run.metrics
        if "charts/grad_norm_is_zero" in m
    ]
    trained = [run.training for run in runs if run.training is not None]
    return {
        "seeds": float(len(runs)),
        "traj_length": statistics.fmean(lengths) if lengths else None,
        "zero_grad_fraction": statistics.fmean(zero_flags) if zero_flags else None,
        "train_minutes": statistics.fmean(t["wall_seconds"] / 60 for t in trained)
        if trained
        else None,
        "rollouts": statistics.fmean(t["rollouts"] for t in trained) if trained else None,
    }


STAT_COLUMNS: dict[str, tuple[str, str]] = {
    # key -> (header, number format)
    "seeds": ("seeds", "{:.0f}"),
    "traj_length": ("traj length", "{:.1f}"),
    "zero_grad_fraction": ("zero-grad frac", "{:.3f}"),
    "train_minutes": ("train min", "{:.1f}"),
    "rollouts": ("rollouts", "{:.0f}"),
}


def stat_text(key: str, value: float | None) -> str:
    return "–" if value is None else STAT_COLUMNS[key][1].format(value)


def method_cells(method: tuple[Any, ...]) -> list[str]:
    model, trainer, credit, group_size, steps = method
    return [str(model), str(trainer), str(credit), str(group_size or "–"), str(steps or "–")]


def comparisons(table: Table) -> list[str]:
    """Per column: the best method and which methods it does not beat beyond 2 s.e."""
    lines = []
    for column in table.columns:
        ranked = sorted(
            (m for m in table.methods if (m, column) in table.cells),
            key=lambda m: -table.cells[(m, column)].mean,
        )
        if len(ranked) < 2:
            continue
        best = ranked[0]
        best_cell = table.cells[(best, column)]
        ties = []
        for other in ranked[1:]:
            other_cell = table.cells[(other, column)]
            if best_cell.se is None or other_cell.se is None:
                ties.append(f"{records.method_label(other)} (n=1, cannot tell)")
                continue
            gap = best_cell.mean - other_cell.mean
            if gap <= DISTINGUISHABLE_SE * math.hypot(best_cell.se, other_cell.se):
                ties.append(records.method_label(other))
        verdict = (
            "does not beat " + "; ".join(ties) + " (within 2 s.e.)"
            if ties
            else "beats every other method by more than 2 s.e."
        )
        lines.append(
            f"- {column}: best {records.method_label(best)} ({best_cell.text()}); {verdict}."
        )
    return lines


def header_cells(columns: Sequence[str]) -> list[str]:
    return [
        "model",
        "trainer",
        "credit",
        "G",
        "steps",
        *columns,
        *(h for h, _ in STAT_COLUMNS.values()),
    ]


def row_cells(table: Table, method: tuple[Any, ...], columns: Sequence[str]) -> list[str]:
    return [
        *method_cells(method),
        *(table.cells[(method, c)].text() if (method, c) in table.cells else "–" for c in columns),
        *(stat_text(k, table.stats[method][k]) for k in STAT_COLUMNS),
    ]


def markdown_table(table: Table, columns: Sequence[str]) -> str:
    headers = header_cells(columns)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for method in table.methods:
        lines.append("| " + " | ".join(row_cells(table, method, columns)) + " |")
    return "\n".join(lines)


def render_markdown(table: Table, plot_files: Mapping[str, str]) -> str:
    parts = [
        "# creditgym leaderboard",
        "",
        "Generated by `python -m benchmarks.leaderboard` from `results/runs/`; do not edit.",
        "Cells: evaluation success % as mean ± standard error over seeds (n = seeds).",
        "",
        markdown_table(table, table.columns),
    ]
    if table.task_type_columns:
        parts += [
            "",
            "## Per task type (ALFWorld task type, SysDiag fault family)",
            "",
            markdown_table(table, table.task_type_columns),
        ]
    lines = comparisons(table)
    if lines:
        parts += ["", "## Which differences are real", "", *lines]
    if plot_files:
        parts += ["", "## Plots", ""]
        parts += [f"![{title}]({name})" for title, name in plot_files.items()]
    return "\n".join(parts) + "\n"


def render_csv(table: Table) -> str:
    """Long format: one line per (method, column) with mean, s.e., n and method stats."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [*records.METHOD_FIELDS, "column", "success_mean_pct", "success_se_pct", "n", *STAT_COLUMNS]
    )
    for method in table.methods:
        for column in (*table.columns, *table.task_type_columns):
            if (method, column) not in table.cells:
                continue
            value = table.cells[(method, column)]
            stats = table.stats[method]
            writer.writerow(
                [
                    *method,
                    column,
                    f"{value.mean:.4f}",
                    "" if value.se is None else f"{value.se:.4f}",
                    value.n,
                    *("" if stats[k] is None else f"{stats[k]:.6g}" for k in STAT_COLUMNS),
                ]
            )
    return buffer.getvalue()


SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, column) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var ascending = th.getAttribute("data-order") !== "asc";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("data-order"); });
      th.setAttribute("data-order", ascending ? "asc" : "desc");
      rows.sort(function (a, b) {
        var x = a.cells[column].getAttribute("data-sort");
        var y = b.cells[column].getAttribute("data-sort");
        var nx = parseFloat(x), ny = parseFloat(y);
        var cmp = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
        return ascending ? cmp : -cmp;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def sort_key(text: str) -> str:
    """The value a column sorts by: the leading number of a cell, else its text."""
    head = text.split(" ", 1)[0]
    try:
        return str(float(head))
    except ValueError:
        return "-1" if text == "–" else text


def html_table(table: Table, columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header_cells(columns))
    body = []
    for method in table.methods:
        cells = "".join(
            f'<td data-sort="{html.escape(sort_key(text))}">{html.escape(text)}</td>'
            for text in row_cells(table, method, columns)
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def render_html(table: Table, plot_files: Mapping[str, str]) -> str:
    sections = [
        "<h1>creditgym leaderboard</h1>",
        "<p>Generated by <code>python -m benchmarks.leaderboard</code> from "
        "<code>results/runs/</code>. Cells: evaluation success % as mean ± standard error "
        "over seeds (n = seeds). Click a column header to sort.</p>",
        html_table(table, table.columns),
    ]
    if table.task_type_columns:
        sections += [
            "<h2>Per task type (ALFWorld task type, SysDiag fault family)</h2>",
            html_table(table, table.task_type_columns),
        ]
    lines = comparisons(table)
    if lines:
        items = "".join(f"<li>{html.escape(line[2:])}</li>" for line in lines)
        sections += ["<h2>Which differences are real</h2>", f"<ul>{items}</ul>"]
    for title, name in plot_files.items():
        sections.append(
            f'<h2>{html.escape(title)}</h2><a href="{html.escape(name)}">'
            f'<img src="{html.escape(name)}" alt="{html.escape(title)}" width="720"></a>'
        )
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:14px}"
        "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}"
        "th{cursor:pointer;background:#f0f0f0}th[data-order=asc]::after{content:' ▲'}"
        "th[data-order=desc]::after{content:' ▼'}"
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>creditgym leaderboard</title><style>{style}</style></head><body>"
        + "\n".join(sections)
        + f"<script>{SORT_SCRIPT}</script></body></html>\n"
    )


@dataclass(frozen=True)
class LeaderboardConfig:
    """Build the leaderboard tables and plots from run folders."""

    runs: Path = Path("results/runs")
    """Folder holding the run folders."""
    out: Path = Path("results")
    """Folder that receives leaderboard.md/.csv/.html and plots/."""


def write_leaderboard(runs_root: Path, out: Path) -> Table:
    """Read the run folders under `runs_root`; write tables and plots into `out`."""
    runs = records.load_runs(runs_root)
    if not runs:
        raise UsageError(f"no run folders with evaluation episodes under {runs_root}")
    table = build_table(runs)
    try:
        out.mkdir(parents=True, exist_ok=True)
        plot_files = plots.make_all(runs, out / "plots")
        relative = {title: str(path.relative_to(out)) for title, path in plot_files.items()}
        records.atomic_write_text(out / "leaderboard.md", render_markdown(table, relative))
        records.atomic_write_text(out / "leaderboard.csv", render_csv(table))
        records.atomic_write_text(out / "leaderboard.html", render_html(table, relative))
    except OSError as error:
        raise UsageError(f"cannot write the leaderboard to {out}: {error}") from error
    return table


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m benchmarks.leaderboard`."""
    config = tyro.cli(LeaderboardConfig, prog="python -m benchmarks.leaderboard", args=argv)
    table = write_leaderboard(config.runs, config.out)
    print(markdown_table(table, table.columns))
    print(f"wrote {config.out / 'leaderboard.md'}, .csv, .html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
