"""A credit module against `grpo` on a study's planned cells, with the study's verdicts:
the report side of `creditgym compare` (benchmarks/compare.py plans the cells and runs
them; docs/extending.md).

The verdicts follow docs/study_plan.md, "The analysis": per cell and endpoint (final
held-out success, the learning curve's area) the runs are paired by seed; the per-seed
differences give the mean difference with its Student-t 95 % interval
(`stats.paired_difference`), the paired t-test (`stats.paired_test`) and the two one-sided
paired tests at `EQUIVALENCE_MARGIN` (`stats.paired_tost`); Holm's adjustment runs over
this module's family (every cell x endpoint against `grpo`; differences and equivalences
each a family), as the study adjusts its own. "better" / "worse" when the difference test
rejects at `ALPHA`, else "tie" when TOST does, else "inconclusive", with whether the
interval met the planned half-width (the margin). A cell compared at fewer seeds than the
plan gives it gets no verdict of the plan: its verdict is printed as exploratory.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from creditgym.report import records, stats
from creditgym.report.study.comparisons import (
    ALPHA,
    BASELINE,
    EQUIVALENCE_MARGIN,
    MIN_SEEDS_FOR_VERDICT,
)
from creditgym.report.study.plan import PLAN_ENDPOINTS
from creditgym.report.study.rows import run_row
from creditgym.report.tables import markdown_table

# The endpoints, as runs.csv names them (`study.run_row`), and how the table shows them.
ENDPOINTS = PLAN_ENDPOINTS
# Identity fields a run's cost hardly depends on: runs that differ only in these (and the
# seed) measure one another's training seconds when a cell has no run of its own yet (the
# step limit T, the budget, the model and G stay in the key).
COST_FREE_FIELDS = ("seed", "env_options", "reward_channel")


class CellRuns(NamedTuple):
    """One planned cell's finished runs, paired by seed."""

    label: tuple[str, str, str]  # instrument, level, channel (`cell_label`)
    planned_seeds: int  # the seeds the plan gives the cell
    pairs: tuple[tuple[Path, Path], ...]  # (module's, grpo's) run folder, per seed with both


def cell_label(identity: Mapping[str, Any], step_limit: int, channel: str) -> tuple[str, str, str]:
    """(instrument, level, channel) of a cell, as the study's tables name them: the env of
    a run identity, its options with the step limit T, the reward channel."""
    config = {
        "env_id": identity["env"],
        "faults": identity["faults"],
        "env_options": identity["env_options"],
        "max_episode_steps": step_limit,
    }
    env = records.RunData(Path(), config, (), (), None).env
    instrument, _, level = env.partition("[")
    return instrument, level.rstrip("]"), channel


def _cost_key(identity: dict[str, Any]) -> str:
    return repr(sorted((k, v) for k, v in identity.items() if k not in COST_FREE_FIELDS))


def measured_seconds(
    cell_identities: Sequence[Mapping[str, Any]], folders: Sequence[Path]
) -> list[tuple[float | None, int, str]]:
    """Per cell (the run identity of its `grpo` configuration): the median training seconds
    (training.json `wall_seconds`) of the finished `grpo` runs in `folders`, how many runs
    that is, and which runs: the cell's own seeds where any is finished, else `grpo` runs
    that differ from the cell only in `COST_FREE_FIELDS` (the same env, step limit T,
    budget, model and G); (None, 0, '') where none is found."""
    own: dict[str, list[float]] = {}
    similar: dict[str, list[float]] = {}
    for folder in folders:
        for run_dir in records.run_dirs(folder) if folder.is_dir() else ():
            training = records.read_summary_file(run_dir / records.TRAINING_FILE)
            config_path = run_dir / records.CONFIG_FILE
            if training is None or not (run_dir / records.DONE_FILE).exists():
                continue
            identity = records.read_json(config_path).get("identity", {})
            if identity.get("credit") != BASELINE or identity.get("credit_options"):
                continue
            seconds = float(training["wall_seconds"])
            own.setdefault(repr(sorted({**identity, "seed": 0}.items())), []).append(seconds)
            similar.setdefault(_cost_key(identity), []).append(seconds)
    estimates = []
    for cell_identity in cell_identities:
        identity = {**cell_identity, "seed": 0}
        mine = own.get(repr(sorted(identity.items())), [])
        other = similar.get(_cost_key(identity), [])
        if mine:
            estimates.append((statistics.median(mine), len(mine), "of this cell"))
        elif other:
            estimates.append(
                (statistics.median(other), len(other), "at this T and budget, other level")
            )
        else:
            estimates.append((None, 0, ""))
    return estimates


def load_run(run_dir: Path) -> records.RunData:
    """One finished run folder's records, checked as `records.load_runs` checks them."""
    records.check_run_records(run_dir)
    return records.RunData(
        run_dir=run_dir,
        config=records.read_json(run_dir / records.CONFIG_FILE),
        episodes=tuple(records.read_episodes(run_dir)),
        metrics=tuple(records.read_metrics(run_dir)),
        training=records.read_summary_file(run_dir / records.TRAINING_FILE),
        curve=tuple(records.read_curve(run_dir)),
    )


def endpoint_values(run_dir: Path) -> dict[str, float]:
    """A run's endpoints as the study computes them (`study.rows.run_row`)."""
    row = run_row(load_run(run_dir))
    return {column: float(row[column]) for column in ENDPOINTS}


def verdict_rows(cells: Sequence[CellRuns], exploratory: bool) -> list[dict[str, Any]]:
    """Per cell and endpoint: the seeds with both runs finished, the two means, the paired
    difference (module - grpo) with its 95 % interval, Holm-adjusted paired t-test and
    TOST p-values over the family, whether the half-width met the margin, and the verdict
    (`exploratory`: the seeds are not the plan's)."""
    rows = []
    for cell in cells:
        values = [
            (endpoint_values(challenger), endpoint_values(baseline))
            for challenger, baseline in cell.pairs
        ]
        instrument, level, channel = cell.label
        for column, endpoint in ENDPOINTS.items():
            x = np.array([[mine[column]] for mine, _ in values])
            y = np.array([[base[column]] for _, base in values])
            row: dict[str, Any] = {
                "instrument": instrument,
                "level": level,
                "channel": channel,
                "endpoint": endpoint,
                "seeds": len(values),
                "planned_seeds": cell.planned_seeds,
                "baseline_mean": float(y.mean()) if len(y) else math.nan,
                "challenger_mean": float(x.mean()) if len(x) else math.nan,
                "difference": None,
                "p_difference": math.nan,
                "p_equivalence": math.nan,
            }
            if len(values) >= MIN_SEEDS_FOR_VERDICT:
                row["difference"] = stats.paired_difference(x, y)
                row["p_difference"] = stats.paired_test(x, y)
                row["p_equivalence"] = stats.paired_tost(x, y, EQUIVALENCE_MARGIN)
            rows.append(row)
    family = [i for i, row in enumerate(rows) if row["difference"] is not None]
    for column in ("p_difference", "p_equivalence"):
        adjusted = stats.holm([rows[i][column] for i in family]) if family else []
        for i, value in zip(family, adjusted, strict=True):
            rows[i][column] = float(value)
    for row in rows:
        row["verdict"], row["half_width_met"] = verdict(row, exploratory)
    return rows


def verdict(row: dict[str, Any], exploratory: bool) -> tuple[str, bool | None]:
    """A row's verdict against `grpo` and whether its interval met the planned half-width
    (the equivalence margin; None without an interval)."""
    difference = row["difference"]
    if difference is None:
        return f"short of seeds ({row['seeds']} of {row['planned_seeds']})", None
    met = (difference.high - difference.low) / 2 <= EQUIVALENCE_MARGIN
    if row["p_difference"] < ALPHA:
        word = "better" if difference.value > 0 else "worse"
    elif row["p_equivalence"] < ALPHA:
        word = "tie"
    else:
        word = "inconclusive"
    if row["seeds"] < row["planned_seeds"] and not exploratory:
        return f"short of seeds ({row['seeds']} of {row['planned_seeds']})", met
    return (f"exploratory: {word}" if exploratory else word), met


def verdict_table(rows: Sequence[dict[str, Any]], name: str) -> str:
    """The verdicts as a markdown table (points; p-values Holm-adjusted over the family)."""
    columns = [
        "instrument",
        "level",
        "channel",
        "endpoint",
        "seeds",
        BASELINE,
        name,
        f"{name} − {BASELINE} [95 % CI]",
        f"half-width ≤ {100 * EQUIVALENCE_MARGIN:.0f}",
        "p (Holm)",
        "TOST p (Holm)",
        "verdict",
    ]
    body = []
    for row in rows:
        difference = row["difference"]
        met = {True: "yes", False: "no", None: "–"}[row["half_width_met"]]
        body.append(
            [
                row["instrument"],
                row["level"],
                row["channel"],
                row["endpoint"],
                f"{row['seeds']}/{row['planned_seeds']}",
                _points(row["baseline_mean"]),
                _points(row["challenger_mean"]),
                "–" if difference is None else difference.text(scale=100),
                met,
                _p(row["p_difference"]),
                _p(row["p_equivalence"]),
                row["verdict"],
            ]
        )
    tested = sum(row["difference"] is not None for row in rows)
    return "\n".join(
        [
            markdown_table(columns, body),
            "",
            f"Paired by seed; p-values Holm-adjusted over the module's family of {tested} "
            f"(cells x endpoints; differences and equivalences each a family); tie: TOST "
            f"within ±{100 * EQUIVALENCE_MARGIN:.0f} points; alpha {ALPHA}.",
        ]
    )


def _points(value: float) -> str:
    return "–" if math.isnan(value) else f"{100 * value:.1f}"


def _p(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3f}"
