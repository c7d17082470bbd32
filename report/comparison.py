"""A user's credit module against `grpo` on a study's planned cells, with the study's
verdicts: the library of `creditgym compare` (docs/extending.md).

The plan's cells are the `grpo` rows of a sweep file (default the decisive study's,
benchmarks/configs/study_decisive.toml, whose seeds are docs/study_plan.md's): each
distinct `grpo` configuration less its seed is one cell (an instrument, a level, a reward
channel, the training budget), with the seeds the file gives it. The challenger's run of
a cell and seed is that `grpo` run with only `--credit` (and `--credit-options`) changed,
so its run folder, config.json and identity are what a sweep of the file with that
credit would write (`benchmarks.run_identity`).

A `grpo` run is reused from any folder searched (the output folder first, then the
committed run folders) where its folder holds done.json, every requested episode, and a
config.json whose identity equals the one this configuration hashes: the same name is not
enough (six hex digits of a hash), the identity is compared field by field.

The verdicts follow docs/study_plan.md, "The analysis": per cell and endpoint (final
held-out success, the learning curve's area) the runs are paired by seed; the per-seed
differences give the mean difference with its Student-t 95 % interval
(`stats.paired_difference`), the paired t-test (`stats.paired_test`) and the two one-sided
paired tests at `study.EQUIVALENCE_MARGIN` (`stats.paired_tost`); Holm's adjustment runs
over this module's family (every cell x endpoint against `grpo`; differences and
equivalences each a family), as the study adjusts its own. "better" / "worse" when the
difference test rejects at `study.ALPHA`, else "tie" when TOST does, else "inconclusive",
with whether the interval met the planned half-width (the margin). A cell compared at
fewer seeds than the plan gives it (`--seeds`) gets no verdict of the plan: its verdict is
printed as exploratory.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from creditgym.benchmarks import records, stats, study
from creditgym.benchmarks.cli import UsageError
from creditgym.benchmarks.common import markdown_table
from creditgym.benchmarks.run_config import RunConfig
from creditgym.benchmarks.run_eval import is_finished
from creditgym.benchmarks.run_identity import run_identity, run_name
from creditgym.benchmarks.run_settings import step_limit

BASELINE = study.BASELINE
# The endpoints, as runs.csv names them (`study.run_row`), and how the table shows them.
ENDPOINTS = study.PLAN_ENDPOINTS
# Identity fields a run's cost hardly depends on: runs that differ only in these (and the
# seed) measure one another's training seconds when a cell has no run of its own yet (the
# step limit T, the budget, the model and G stay in the key).
COST_FREE_FIELDS = ("seed", "env_options", "reward_channel")


@dataclass(frozen=True)
class Cell:
    """One planned setting: the `grpo` configuration at its first seed, and the seeds the
    plan gives it."""

    baseline: RunConfig
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class SeedPair:
    """One cell's seed: the `grpo` run and the challenger's, each with the finished run
    folder found for it (None: to run, into the output folder)."""

    cell: int  # index into the plan's cells
    seed: int
    baseline: RunConfig
    baseline_dir: Path | None
    challenger: RunConfig
    challenger_dir: Path | None


@dataclass(frozen=True)
class Comparison:
    """What `benchmarks.compare` will run and read: the cells, their seed pairs, and
    whether the seeds are the plan's."""

    cells: tuple[Cell, ...]
    pairs: tuple[SeedPair, ...]
    seeds_override: tuple[int, ...]  # () when the plan's seeds are used

    def to_run(self) -> list[RunConfig]:
        """Every run with no finished folder, `grpo` before the challenger per cell."""
        todo = []
        for cell in range(len(self.cells)):
            pairs = [p for p in self.pairs if p.cell == cell]
            todo += [p.baseline for p in pairs if p.baseline_dir is None]
            todo += [p.challenger for p in pairs if p.challenger_dir is None]
        return todo


def is_baseline(config: RunConfig) -> bool:
    """A `grpo` row in its default form (no options, creditgym's convention, policy
    gradient): the rows the study's confirmatory pairs compare against."""
    default = RunConfig()
    return (
        config.credit == BASELINE
        and not config.credit_options
        and config.credit_convention == default.credit_convention
        and config.trainer == default.trainer
    )


def plan_cells(configs: Sequence[RunConfig], out: Path) -> list[Cell]:
    """The cells of a sweep file's configurations: its `grpo` rows grouped by everything but
    the seed (in file order), their `out` set to `out`.

    Raises:
        UsageError: the file has no `grpo` row.
    """
    seeds: dict[RunConfig, list[int]] = {}
    for config in configs:
        if is_baseline(config):
            base = dataclasses.replace(config, seed=0, out=out)
            seeds.setdefault(base, []).append(config.seed)
    if not seeds:
        raise UsageError(f"the plan's sweep file has no {BASELINE} row to compare against")
    return [
        Cell(dataclasses.replace(base, seed=found[0]), tuple(found))
        for base, found in seeds.items()
    ]


def challenger_config(baseline: RunConfig, credit: str, options: tuple[str, ...]) -> RunConfig:
    """The run of the user's module that pairs with `baseline`: only the credit changed."""
    return dataclasses.replace(baseline, credit=credit, credit_options=options)


def challenger_name(config: RunConfig) -> str:
    """The module's row name as the study names rows (`hp_rlvr_exact`, `discounted
    [gamma=0.5]`)."""
    return study.method_form(run_identity(config))


def finished_run(config: RunConfig, folders: Sequence[Path]) -> Path | None:
    """The first of `folders` holding `config`'s run finished (done.json, every requested
    episode) with the identity `config` hashes, or None."""
    identity = run_identity(config)
    for folder in folders:
        placed = dataclasses.replace(config, out=folder)
        run_dir = folder / run_name(placed)
        if not is_finished(placed):
            continue
        recorded = records.read_json(run_dir / records.CONFIG_FILE).get("identity")
        if recorded == identity:
            return run_dir
    return None


def build_comparison(
    cells: Sequence[Cell],
    credit: str,
    options: tuple[str, ...],
    baseline_folders: Sequence[Path],
    seeds_override: tuple[int, ...] = (),
) -> Comparison:
    """Every cell's seed pairs (the plan's seeds, or `seeds_override`), each run with the
    finished folder found for it: `grpo` in `baseline_folders` (the output folder first),
    the challenger in the output folder only."""
    pairs = []
    for number, cell in enumerate(cells):
        for seed in seeds_override or cell.seeds:
            baseline = dataclasses.replace(cell.baseline, seed=seed)
            challenger = challenger_config(baseline, credit, options)
            pairs.append(
                SeedPair(
                    number,
                    seed,
                    baseline,
                    finished_run(baseline, baseline_folders),
                    challenger,
                    finished_run(challenger, [challenger.out]),
                )
            )
    return Comparison(tuple(cells), tuple(pairs), tuple(seeds_override))


def cell_label(config: RunConfig) -> tuple[str, str, str]:
    """(instrument, level, channel) of a cell, as the study's tables name them: the env,
    its options with the step limit T, the reward channel."""
    env = records.RunData(Path(), _label_config(config), (), (), None).env
    instrument, _, level = env.partition("[")
    return instrument, level.rstrip("]"), config.reward_channel


def _label_config(config: RunConfig) -> dict[str, Any]:
    identity = run_identity(config)
    return {
        "env_id": identity["env"],
        "faults": identity["faults"],
        "env_options": identity["env_options"],
        "max_episode_steps": step_limit(config),
    }


def _cost_key(identity: dict[str, Any]) -> str:
    return repr(sorted((k, v) for k, v in identity.items() if k not in COST_FREE_FIELDS))


def measured_seconds(
    cells: Sequence[Cell], folders: Sequence[Path]
) -> list[tuple[float | None, int, str]]:
    """Per cell: the median training seconds (training.json `wall_seconds`) of the
    finished `grpo` runs in `folders`, how many runs that is, and which runs: the cell's
    own seeds where any is finished, else `grpo` runs that differ from the cell only in
    `COST_FREE_FIELDS` (the same env, step limit T, budget, model and G); (None, 0, '')
    where none is found."""
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
    for cell in cells:
        identity = {**run_identity(cell.baseline), "seed": 0}
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


def cost_lines(comparison: Comparison, folders: Sequence[Path]) -> list[str]:
    """The planned cost, printed before any run starts: per cell the runs to do, reused
    and the seconds per run measured on earlier `grpo` runs, then the totals."""
    estimates = measured_seconds(comparison.cells, folders)
    todo = comparison.to_run()
    lines = []
    if comparison.seeds_override:
        planned = sorted({len(c.seeds) for c in comparison.cells})
        lines.append(
            f"--seeds {' '.join(map(str, comparison.seeds_override))} departs from the plan "
            f"({'/'.join(map(str, planned))} seeds per cell): every verdict below is "
            "exploratory, not the plan's"
        )
    total, unknown = 0.0, 0
    for number, (cell, (seconds, count, source)) in enumerate(
        zip(comparison.cells, estimates, strict=True)
    ):
        pairs = [p for p in comparison.pairs if p.cell == number]
        base_todo = sum(p.baseline_dir is None for p in pairs)
        mine_todo = sum(p.challenger_dir is None for p in pairs)
        instrument, level, channel = cell_label(cell.baseline)
        line = (
            f"{instrument} [{level}] {channel}, {len(pairs)} seeds: run {mine_todo} of the "
            f"module's and {base_todo} {BASELINE} ({len(pairs) - base_todo} {BASELINE} reused)"
        )
        runs = base_todo + mine_todo
        if seconds is None:
            unknown += runs
            line += "; no measured run of this setting"
        else:
            total += runs * seconds
            line += (
                f"; {seconds:.0f} s per run (median of {count} finished {BASELINE} runs {source})"
            )
        lines.append(line)
    hours = total / 3600
    lines.append(
        f"planned: {len(todo)} runs to do, {len(comparison.pairs) * 2 - len(todo)} reused; "
        f"about {hours:.2f} CPU-hours ({total / 60:.0f} CPU-minutes) of training, one run "
        "after another in this process (one core; `--shard 0/2` and `1/2` share two), "
        "evaluation and start-up on top"
        + (f", plus {unknown} runs with no measured setting" if unknown else "")
    )
    lines.append(
        "memory: one run's at a time, plus one copy of the starting weights per population "
        "(docs/running.md, Population runs; docs/extending.md gives a measured peak)"
    )
    return lines


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
    """A run's endpoints as the study computes them (`study.run_row`)."""
    row = study.run_row(load_run(run_dir))
    return {column: float(row[column]) for column in ENDPOINTS}


def finished_folders(comparison: Comparison) -> dict[tuple[str, int], Path]:
    """The finished run folder of every run of `comparison` that has one now, keyed by
    (role, pair index), role "baseline" or "challenger": a folder found before, else the
    output folder's."""
    found = {}
    for index, pair in enumerate(comparison.pairs):
        for role, config, known in (
            ("baseline", pair.baseline, pair.baseline_dir),
            ("challenger", pair.challenger, pair.challenger_dir),
        ):
            run_dir = known or finished_run(config, [config.out])
            if run_dir is not None:
                found[(role, index)] = run_dir
    return found


def verdict_rows(
    comparison: Comparison, found: dict[tuple[str, int], Path]
) -> list[dict[str, Any]]:
    """Per cell and endpoint: the seeds with both runs finished, the two means, the paired
    difference (module - grpo) with its 95 % interval, Holm-adjusted paired t-test and
    TOST p-values over the family, whether the half-width met the margin, and the verdict.

    `found`: the finished run folder of every run, keyed by (role, pair index), role
    "baseline" or "challenger"."""
    rows = []
    for number, cell in enumerate(comparison.cells):
        indices = [i for i, p in enumerate(comparison.pairs) if p.cell == number]
        complete = [i for i in indices if ("baseline", i) in found and ("challenger", i) in found]
        values = {
            (role, i): endpoint_values(found[(role, i)])
            for i in complete
            for role in ("baseline", "challenger")
        }
        instrument, level, channel = cell_label(cell.baseline)
        for column, endpoint in ENDPOINTS.items():
            x = np.array([[values[("challenger", i)][column]] for i in complete])
            y = np.array([[values[("baseline", i)][column]] for i in complete])
            row: dict[str, Any] = {
                "instrument": instrument,
                "level": level,
                "channel": channel,
                "endpoint": endpoint,
                "seeds": len(complete),
                "planned_seeds": len(cell.seeds),
                "baseline_mean": float(y.mean()) if len(y) else math.nan,
                "challenger_mean": float(x.mean()) if len(x) else math.nan,
                "difference": None,
                "p_difference": math.nan,
                "p_equivalence": math.nan,
            }
            if len(complete) >= study.MIN_SEEDS_FOR_VERDICT:
                row["difference"] = stats.paired_difference(x, y)
                row["p_difference"] = stats.paired_test(x, y)
                row["p_equivalence"] = stats.paired_tost(x, y, study.EQUIVALENCE_MARGIN)
            rows.append(row)
    family = [i for i, row in enumerate(rows) if row["difference"] is not None]
    for column in ("p_difference", "p_equivalence"):
        adjusted = stats.holm([rows[i][column] for i in family]) if family else []
        for i, value in zip(family, adjusted, strict=True):
            rows[i][column] = float(value)
    for row in rows:
        row["verdict"], row["half_width_met"] = verdict(row, bool(comparison.seeds_override))
    return rows


def verdict(row: dict[str, Any], exploratory: bool) -> tuple[str, bool | None]:
    """A row's verdict against `grpo` and whether its interval met the planned half-width
    (the equivalence margin; None without an interval)."""
    difference = row["difference"]
    if difference is None:
        return f"short of seeds ({row['seeds']} of {row['planned_seeds']})", None
    met = (difference.high - difference.low) / 2 <= study.EQUIVALENCE_MARGIN
    if row["p_difference"] < study.ALPHA:
        word = "better" if difference.value > 0 else "worse"
    elif row["p_equivalence"] < study.ALPHA:
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
        f"half-width ≤ {100 * study.EQUIVALENCE_MARGIN:.0f}",
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
            f"within ±{100 * study.EQUIVALENCE_MARGIN:.0f} points; alpha {study.ALPHA}.",
        ]
    )


def _points(value: float) -> str:
    return "–" if math.isnan(value) else f"{100 * value:.1f}"


def _p(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3f}"
