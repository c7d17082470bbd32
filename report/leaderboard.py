"""Leaderboard from run folders: the library of `creditgym leaderboard [--runs FOLDER]`
(benchmarks/leaderboard.py).

Reads only the run folders under `--runs` (config.json, episodes.jsonl, metrics.jsonl,
training.json; default `results/runs/`, the committed reference set) and writes
`leaderboard.md`, `.csv` and a static, sortable `.html` page (inline JavaScript, works
offline) plus the plots of `report.plots` into `--out` (default: the folder above
`--runs`, so `--runs results/local/runs` never touches `results/leaderboard.*`). Every
page names the folder it was built from. Never edit those files by hand: rerun this.

One table per task (env, fault families, step limit T) and reward channel (the signal
the rows trained on, `benchmarks.run --reward-channel`; a column of every table), so the
rows compared trained on one signal; evaluation-only rows appear in each of their task's
tables. Oracles (credit modules that read ground truth: the env's labels, its noise-free
outcome or its exact state, `credit.base.is_oracle`) are listed apart under each table
and never ranked against the rest. A row is one method
configuration: every setting of the runs' `method_config` (report/records.py; model,
trainer, credit, G, optimiser steps, learning rate, tasks per step, constrained decoding,
history length, sampling temperature, ...), so runs share a row only when they differ in
nothing but the seed. Settings that differ between the rows of a table are columns; those
the rows share are listed above it. A cell is the success rate in percent as mean +-
standard error over the row's seeds (one run per seed; n = seeds), each run's rate over
its evaluation episodes (BALROG reports the same way); under each table, which leads are
real is decided by the probability of improvement's bootstrap interval
(`report/stats.py`), not by the standard errors. A row's statistics (seeds,
trajectory length, zero-gradient fraction, training time, rollouts) are over that
table's runs only.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from creditgym import credit
from creditgym.agents.atomic import atomic_write_text
from creditgym.cli import UsageError
from creditgym.credit.base import is_oracle
from creditgym.report import plots, records, stats
from creditgym.report.tables import markdown_table

# Fewer seeds than this in either row and the bootstrap is too coarse for a verdict.
MIN_SEEDS_FOR_VERDICT = 3
# Headers of the settings shown first (records.METHOD_FIELDS); others show their name.
SETTING_HEADERS = {"group_size": "G"}
# The run option naming the reward channel: its own column, never a varying setting.
CHANNEL_SETTING = "reward_channel"


@dataclass(frozen=True)
class Cell:
    """Success % over seeds: mean, standard error (None for one seed), seeds n, and each
    seed's own rate (ascending seed order), which the comparisons resample."""

    mean: float
    se: float | None
    n: int
    runs: tuple[float, ...] = ()

    def text(self) -> str:
        spread = f" ± {self.se:.1f}" if self.se is not None else ""
        return f"{self.mean:.1f}{spread} (n={self.n})"


@dataclass(frozen=True)
class Section:
    """One task's table: its rows, split columns and the settings its rows share."""

    task: str  # records.RunData.env, e.g. "SysDiag-v0[memory_leak, T=1]"
    columns: tuple[str, ...]  # evaluation splits
    task_type_columns: tuple[str, ...]  # "split/task_type", when the task has several types
    methods: tuple[str, ...]  # row keys (records.RunData.method), best first per model
    shared: Mapping[str, Any]  # setting -> the one value of every row it applies to
    varying: tuple[str, ...]  # settings (beyond METHOD_FIELDS) that differ: columns
    channel: str | None = None  # the reward channel its trained rows used; None: none trained
    oracles: tuple[str, ...] = ()  # row keys of oracles: listed apart, never ranked


@dataclass(frozen=True)
class Table:
    """The leaderboard: one section per task, cells and statistics keyed by task and row."""

    source: Path
    run_count: int
    sections: tuple[Section, ...]
    settings: Mapping[str, Mapping[str, Any]]  # row key -> its method_config
    cells: Mapping[tuple[str, str, str], Cell]  # (task, row key, column)
    stats: Mapping[tuple[str, str], Mapping[str, float | None]]  # (task, row key)


def runs_frame(runs: Sequence[records.RunData]) -> pd.DataFrame:
    """One line per run: task, row key, seed, folder name.

    Raises:
        ValueError: two run folders hold the same task, configuration and seed (they
            would count as two seeds).
    """
    frame = pd.DataFrame(
        [{"task": r.env, "method": r.method, "seed": r.seed, "run": r.run_dir.name} for r in runs]
    )
    twins = frame[frame.duplicated(["task", "method", "seed"], keep=False)]
    if not twins.empty:
        names = ", ".join(sorted(twins["run"]))
        raise ValueError(f"run folders with the same configuration and seed: {names}")
    return frame


def episodes_frame(runs: Sequence[records.RunData]) -> pd.DataFrame:
    """One line per evaluation episode, tagged with its run's task, row key and folder."""
    return pd.DataFrame(
        [
            {
                "task": run.env,
                "method": run.method,
                "run": run.run_dir.name,
                "split": episode.split,
                "task_type": episode.task_type,
                "success": 100.0 * episode.success,
                "steps": episode.steps,
            }
            for run in runs
            for episode in run.episodes
        ]
    )


def per_run_rates(episodes: pd.DataFrame) -> pd.DataFrame:
    """Success % of each run per column: its split, and its split / task type."""
    by_split = episodes.groupby(["task", "method", "run", "split"], as_index=False)["success"]
    split_rates = by_split.mean().rename(columns={"split": "column"})
    typed = episodes[episodes["task_type"] != ""]
    by_type = typed.groupby(["task", "method", "run", "split", "task_type"], as_index=False)
    type_rates = by_type["success"].mean()
    type_rates["column"] = type_rates["split"] + "/" + type_rates["task_type"]
    return pd.concat([split_rates, type_rates[["task", "method", "run", "column", "success"]]])


def cells_of(rates: pd.DataFrame) -> dict[tuple[str, str, str], Cell]:
    """Mean, standard error (sample std / sqrt(n)) and n over a row's runs, per column."""
    grouped = rates.groupby(["task", "method", "column"])["success"]
    summary = grouped.agg(["mean", "sem", "count"])
    per_run = grouped.apply(tuple)
    return {
        key: Cell(
            float(row["mean"]),
            None if math.isnan(row["sem"]) else float(row["sem"]),
            int(row["count"]),
            tuple(float(rate) for rate in per_run[key]),
        )
        for key, row in summary.iterrows()
    }


def stats_of(
    runs: Sequence[records.RunData], frame: pd.DataFrame, episodes: pd.DataFrame
) -> dict[tuple[str, str], dict[str, float | None]]:
    """Per (task, row): seeds, trajectory length, zero-gradient fraction, training minutes
    and rollouts, each over that task's runs of the row only.

    The zero-gradient fraction counts optimiser-step records whose gradient norm is
    exactly zero over all records of all seeds, as HP-RLVR reports it for GRPO.
    """
    zero_flags = pd.DataFrame(
        [
            {"task": run.env, "method": run.method, "flag": float(m[plots.ZERO_GRAD_METRIC])}
            for run in runs
            for m in run.metrics
            if plots.ZERO_GRAD_METRIC in m
        ],
        columns=["task", "method", "flag"],
    )
    trained = pd.DataFrame(
        [
            {
                "task": run.env,
                "method": run.method,
                "minutes": run.training["wall_seconds"] / 60,
                "rollouts": run.training["rollouts"],
            }
            for run in runs
            if run.training is not None
        ],
        columns=["task", "method", "minutes", "rollouts"],
    )
    keys = ["task", "method"]
    columns = {
        "seeds": frame.groupby(keys)["seed"].nunique(),
        "traj_length": episodes.groupby(keys)["steps"].mean(),
        "zero_grad_fraction": zero_flags.groupby(keys)["flag"].mean(),
        "train_minutes": trained.groupby(keys)["minutes"].mean(),
        "rollouts": trained.groupby(keys)["rollouts"].mean(),
    }
    stats = pd.DataFrame(columns)
    return {
        key: {name: None if pd.isna(value) else float(value) for name, value in row.items()}
        for key, row in stats.iterrows()
    }


def split_settings(
    settings: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(settings with one value in every row they apply to, the other settings' names).

    A setting an evaluation-only row lacks (learning rate, ...) counts as shared when the
    rows that have it agree."""
    keys = sorted({key for s in settings for key in s} - set(records.METHOD_FIELDS))
    shared, varying = {}, []
    for key in keys:
        values = {json.dumps(s[key]) for s in settings if key in s}
        if len(values) == 1:
            shared[key] = json.loads(values.pop())
        else:
            varying.append(key)
    return shared, tuple(varying)


def reward_channel(settings: Mapping[str, Any]) -> str | None:
    """The reward channel a row trained on; None for an evaluation-only row, which trained
    on nothing."""
    if settings["trainer"] == "eval-only":
        return None
    return settings[CHANNEL_SETTING]


def reads_ground_truth(settings: Mapping[str, Any]) -> bool:
    """Whether a row's credit module is an oracle (`credit.base.is_oracle`).

    Raises:
        ValueError: the credit module cannot be found (a plug-in no longer importable).
    """
    if settings["trainer"] == "eval-only":
        return False
    try:
        return is_oracle(credit.resolve(settings["credit"]))
    except KeyError as error:
        raise ValueError(f"cannot tell whether a row reads ground truth: {error}") from error


def build_table(runs: Sequence[records.RunData], source: Path) -> Table:
    """Aggregate runs into one section per task and reward channel: per-run success
    rates, then mean +- s.e. over the runs (seeds) of each row."""
    frame = runs_frame(runs)
    episodes = episodes_frame(runs)
    cells = cells_of(per_run_rates(episodes))
    stats = stats_of(runs, frame, episodes)
    settings = {run.method: run.method_config for run in runs}
    sections = []
    for task in sorted(frame["task"].unique()):
        task_methods = sorted(frame.loc[frame["task"] == task, "method"].unique())
        task_columns = {column for t, _, column in cells if t == task}
        columns = tuple(sorted(c for c in task_columns if "/" not in c))
        typed = sorted(c for c in task_columns if "/" in c)
        several_types = len({c.split("/", 1)[1] for c in typed}) > 1

        def mean_success(method: str, task: str = task, columns: tuple = columns) -> float:
            means = [cells[(task, method, c)].mean for c in columns if (task, method, c) in cells]
            return sum(means) / len(means) if means else 0.0

        trained = {reward_channel(settings[m]) for m in task_methods} - {None}
        for channel in sorted(trained) or [None]:
            methods = [m for m in task_methods if reward_channel(settings[m]) in (channel, None)]
            methods.sort(key=lambda m: (str(settings[m]["model"]), -mean_success(m), m))
            shared, varying = split_settings(
                [{k: v for k, v in settings[m].items() if k != CHANNEL_SETTING} for m in methods]
            )
            oracles = tuple(m for m in methods if reads_ground_truth(settings[m]))
            sections.append(
                Section(
                    task=task,
                    columns=columns,
                    task_type_columns=tuple(typed) if several_types else (),
                    methods=tuple(m for m in methods if m not in oracles),
                    shared=shared,
                    varying=varying,
                    channel=channel,
                    oracles=oracles,
                )
            )
    return Table(
        source=source,
        run_count=len(runs),
        sections=tuple(sections),
        settings=settings,
        cells=cells,
        stats=stats,
    )


STAT_COLUMNS: dict[str, tuple[str, str]] = {
    # key -> (header, number format)
    "seeds": ("seeds", "{:.0f}"),
    "traj_length": ("traj length", "{:.1f}"),
    "zero_grad_fraction": ("zero-grad frac", "{:.3f}"),
    "train_minutes": ("train min", "{:.1f}"),
    "rollouts": ("rollouts", "{:.0f}"),
}


def section_title(section: Section) -> str:
    """A table's heading: its task, and the reward channel its rows trained on."""
    if section.channel is None:
        return section.task
    return f"{section.task}, trained on the {section.channel} channel"


ORACLE_NOTE = (
    "Oracles (their credit reads ground truth: the env's labels, its noise-free outcome or "
    "its exact state): listed apart, never ranked against the rows above."
)


def stat_text(key: str, value: float | None) -> str:
    return "–" if value is None else STAT_COLUMNS[key][1].format(value)


def shared_text(section: Section) -> str:
    """The settings every row of a section shares, as one line."""
    parts = [f"{key} {records.setting_text(section.shared, key)}" for key in section.shared]
    return "Same in every row it applies to: " + ", ".join(parts) + "." if parts else ""


def row_label(table: Table, section: Section, method: str) -> str:
    """Short row name plus the settings that tell it from the other rows of its table."""
    settings = table.settings[method]
    extra = [f"{key}={records.setting_text(settings, key)}" for key in section.varying]
    return records.method_label(settings) + (f" ({', '.join(extra)})" if extra else "")


def comparisons(table: Table, section: Section) -> list[str]:
    """Per split: the best row and the rows it is not shown to beat: those whose
    probability of improvement P(best > other) has a 95 % stratified-bootstrap interval
    reaching down to 0.5 (Agarwal et al. 2021, arXiv 2108.13264; `report/stats.py`),
    or with fewer than MIN_SEEDS_FOR_VERDICT seeds."""
    lines = []
    for column in section.columns:
        ranked = sorted(
            (m for m in section.methods if (section.task, m, column) in table.cells),
            key=lambda m: -table.cells[(section.task, m, column)].mean,
        )
        if len(ranked) < 2:
            continue
        best = ranked[0]
        best_cell = table.cells[(section.task, best, column)]
        ties = []
        for other in ranked[1:]:
            other_cell = table.cells[(section.task, other, column)]
            label = row_label(table, section, other)
            if min(best_cell.n, other_cell.n) < MIN_SEEDS_FOR_VERDICT:
                ties.append(f"{label} (n={other_cell.n} vs {best_cell.n}, cannot tell)")
                continue
            improvement = stats.probability_of_improvement(
                np.array(best_cell.runs)[:, None], np.array(other_cell.runs)[:, None]
            )
            if not improvement.low > 0.5:
                ties.append(f"{label} (P = {improvement.text(digits=2)})")
        verdict = (
            "is not shown to beat " + "; ".join(ties) + " (P(best > row), 95 % interval)"
            if ties
            else "beats every other row: each P(best > row) has a 95 % interval above 0.5"
        )
        lines.append(
            f"- {column}: best {row_label(table, section, best)} ({best_cell.text()}); {verdict}."
        )
    return lines


def header_cells(section: Section, columns: Sequence[str]) -> list[str]:
    return [
        *(SETTING_HEADERS.get(key, key) for key in records.METHOD_FIELDS),
        "channel",
        *(SETTING_HEADERS.get(key, key) for key in section.varying),
        *columns,
        *(h for h, _ in STAT_COLUMNS.values()),
    ]


def row_cells(table: Table, section: Section, method: str, columns: Sequence[str]) -> list[str]:
    settings = table.settings[method]
    cells = (table.cells.get((section.task, method, column)) for column in columns)
    stats = table.stats[(section.task, method)]
    return [
        *(records.setting_text(settings, key) for key in records.METHOD_FIELDS),
        reward_channel(settings) or "–",
        *(records.setting_text(settings, key) for key in section.varying),
        *(cell.text() if cell else "–" for cell in cells),
        *(stat_text(key, stats[key]) for key in STAT_COLUMNS),
    ]


def source_text(table: Table) -> str:
    return f"{records.plural(table.run_count, 'run folder')} in `{table.source.as_posix()}/`"


def command_text(table: Table) -> str:
    return f"creditgym leaderboard --runs {table.source.as_posix()}"


def section_table(
    table: Table, section: Section, columns: Sequence[str], methods: Sequence[str]
) -> str:
    """The rows `methods` of a section (its compared rows or its oracles) in `columns`."""
    return markdown_table(
        header_cells(section, columns),
        [row_cells(table, section, method, columns) for method in methods],
    )


def render_markdown(table: Table, plot_files: Mapping[str, str]) -> str:
    parts = [
        "# creditgym leaderboard",
        "",
        f"Built from the {source_text(table)} by `{command_text(table)}`; do not edit.",
        "One table per task. A row is one method configuration: runs share a row only when",
        "they differ in nothing but the seed; a setting shown as – is at its default",
        "(`creditgym run --help`) or does not apply. Cells: evaluation success %",
        "as mean ± standard error over the row's seeds (n = seeds). One table per task and",
        "reward channel (`--reward-channel`); oracles are listed apart and never ranked.",
    ]
    for section in table.sections:
        parts += ["", f"## {section_title(section)}", ""]
        if shared_text(section):
            parts += [shared_text(section), ""]
        for methods, note in ((section.methods, None), (section.oracles, ORACLE_NOTE)):
            if not methods:
                continue
            if note:
                parts += ["", note, ""]
            parts.append(section_table(table, section, section.columns, methods))
            if section.task_type_columns:
                parts += ["", "Per task type:", ""]
                parts.append(section_table(table, section, section.task_type_columns, methods))
        lines = comparisons(table, section)
        if lines:
            parts += ["", "Which differences are real:", "", *lines]
    if plot_files:
        parts += ["", "## Plots", ""]
        parts += [f"![{title}]({name})" for title, name in plot_files.items()]
    return "\n".join(parts) + "\n"


def csv_frame(table: Table) -> pd.DataFrame:
    """Long format: one line per (task, row, column) with every setting, the cell and the
    row's statistics in that task."""
    # The reward channel has its own column, `channel`.
    named = {k for s in table.settings.values() for k in s} - {CHANNEL_SETTING}
    setting_keys = [*records.METHOD_FIELDS, *sorted(named - set(records.METHOD_FIELDS))]
    lines = []
    for section in table.sections:
        for method in (*section.methods, *section.oracles):
            settings = table.settings[method]
            for column in (*section.columns, *section.task_type_columns):
                cell = table.cells.get((section.task, method, column))
                if cell is None:
                    continue
                lines.append(
                    {
                        "task": section.task,
                        **{key: settings.get(key) for key in setting_keys},
                        "channel": reward_channel(settings),
                        "oracle": method in section.oracles,
                        "column": column,
                        "success_mean_pct": round(cell.mean, 4),
                        "success_se_pct": None if cell.se is None else round(cell.se, 4),
                        "n": cell.n,
                        **table.stats[(section.task, method)],
                    }
                )
    return pd.DataFrame(lines).astype({"n": "Int64", "seeds": "Int64"})


def render_csv(table: Table) -> str:
    return csv_frame(table).to_csv(index=False, lineterminator="\n")


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


def html_table(
    table: Table, section: Section, columns: Sequence[str], methods: Sequence[str]
) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header_cells(section, columns))
    body = []
    for method in methods:
        cells = "".join(
            f'<td data-sort="{html.escape(sort_key(text))}">{html.escape(text)}</td>'
            for text in row_cells(table, section, method, columns)
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def code(text: str) -> str:
    """Markdown `code` spans of a line as HTML."""
    pieces = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def render_html(table: Table, plot_files: Mapping[str, str]) -> str:
    sections = [
        "<h1>creditgym leaderboard</h1>",
        f"<p>Built from the {code(source_text(table))} by <code>"
        f"{html.escape(command_text(table))}</code>. One table per task. A row is one method "
        "configuration: runs share a row only when they differ in nothing but the seed; a "
        "setting shown as – is at its default (<code>creditgym run --help</code>) "
        "or does not apply. Cells: evaluation success % as mean ± standard error over the "
        "row's seeds (n = seeds). One table per task and reward channel "
        "(<code>--reward-channel</code>); oracles are listed apart and never ranked. Click a "
        "column header to sort.</p>",
    ]
    for section in table.sections:
        sections.append(f"<h2>{html.escape(section_title(section))}</h2>")
        if shared_text(section):
            sections.append(f"<p>{html.escape(shared_text(section))}</p>")
        for methods, note in ((section.methods, None), (section.oracles, ORACLE_NOTE)):
            if not methods:
                continue
            if note:
                sections.append(f"<p>{html.escape(note)}</p>")
            sections.append(html_table(table, section, section.columns, methods))
            if section.task_type_columns:
                sections += [
                    "<h3>Per task type</h3>",
                    html_table(table, section, section.task_type_columns, methods),
                ]
        lines = comparisons(table, section)
        if lines:
            items = "".join(f"<li>{html.escape(line[2:])}</li>" for line in lines)
            sections += ["<h3>Which differences are real</h3>", f"<ul>{items}</ul>"]
    for title, name in plot_files.items():
        sections.append(
            f'<h2>{html.escape(title)}</h2><a href="{html.escape(name)}">'
            f'<img src="{html.escape(name)}" alt="{html.escape(title)}" '
            'style="max-width:100%"></a>'
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


def write_leaderboard(runs_root: Path, out: Path) -> Table:
    """Read the run folders under `runs_root`; write tables and plots into `out`."""
    try:
        runs = records.load_runs(runs_root)
        unfinished = records.unfinished_runs(runs_root)
        if unfinished:  # their evaluation may be partial: averaging it would mix data
            print(
                f"left out {len(unfinished)} unfinished run folder(s) (no done.json: in "
                f"progress or killed; the same command finishes them), e.g. {unfinished[0].name}"
            )
        if not runs:
            raise UsageError(f"no finished run folders with evaluation episodes under {runs_root}")
        table = build_table(runs, runs_root)
    except ValueError as error:  # a malformed record or a mixed set: name it, no traceback
        raise UsageError(str(error)) from error
    try:
        out.mkdir(parents=True, exist_ok=True)
        plot_files = plots.make_all(runs, out / "plots")
        relative = {title: str(path.relative_to(out)) for title, path in plot_files.items()}
        atomic_write_text(out / "leaderboard.md", render_markdown(table, relative))
        atomic_write_text(out / "leaderboard.csv", render_csv(table))
        atomic_write_text(out / "leaderboard.html", render_html(table, relative))
    except OSError as error:
        raise UsageError(f"cannot write the leaderboard to {out}: {error}") from error
    return table
