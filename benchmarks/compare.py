"""A user's credit module against grpo with the study's verdicts: `creditgym compare`.

    creditgym compare --credit my_module:MyCredit --dry-run              # the cost only
    creditgym compare --credit my_module:MyCredit                         # run, then verdicts
    creditgym compare --credit discounted --credit-options gamma=0.5 --seeds 0 1 2

Runs the module on every `grpo` cell of the plan's sweep file (default the decisive
study's, benchmarks/configs/study_decisive.toml) at the planned seeds, in the run folders a
sweep of that file would write, reusing every finished `grpo` run of equal identity in the
output folder or the committed run folders and running the others; prints the planned
cost before it starts, then per instrument, level, channel and endpoint the verdict
against grpo (docs/study_plan.md's analysis; `report/comparison.py`).

The plan's cells are the `grpo` rows of the sweep file: each distinct `grpo` configuration
less its seed is one cell (an instrument, a level, a reward channel, the training budget),
with the seeds the file gives it. The challenger's run of a cell and seed is that `grpo`
run with only `--credit` (and `--credit-options`) changed, so its run folder, config.json
and identity are what a sweep of the file with that credit would write
(`benchmarks/run/identity.py`). A `grpo` run is reused from any folder searched (the output
folder first, then the committed run folders) where its folder holds done.json, every
requested episode, and a config.json whose identity equals the one this configuration
hashes: the same name is not enough (six hex digits of a hash), the identity is compared
field by field. A cell compared at fewer seeds than the plan gives it (`--seeds`) gets no
verdict of the plan: its verdict is printed as exploratory.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, parse_arguments, prog_of
from creditgym.benchmarks.run import RunConfig, RunPlan, resolve
from creditgym.benchmarks.run.build import credit_class
from creditgym.benchmarks.run.config import NO_CREDIT
from creditgym.benchmarks.run.evaluate import is_finished
from creditgym.benchmarks.run.plan import parse_credit_options
from creditgym.benchmarks.run.population import group_into_populations, single_run
from creditgym.benchmarks.run.validate import validate
from creditgym.benchmarks.sweep import SweepConfig, load_sweep, parse_shard, run_local
from creditgym.report import comparison, records
from creditgym.report.comparison import BASELINE
from creditgym.report.study.rows import method_form

PLAN = Path("benchmarks/configs/study_decisive.toml")
# Where committed runs live (results/<study>/runs), searched for grpo runs to reuse.
COMMITTED_RUNS = "results/*/runs"


@dataclass(frozen=True)
class CompareConfig:
    """Run a credit module on the plan's cells and print its verdicts against grpo."""

    credit: str
    """The module: a registered name or `package.module:Class` (imported by path)."""
    credit_options: tuple[str, ...] = ()
    """Its options, `name=value` each (as `creditgym run --credit-options`)."""
    config: Path = PLAN
    """The plan's sweep file: its grpo rows are the cells, with their seeds."""
    out: Path = RunConfig.out
    """Folder that receives the runs this command does (the module's, and grpo's where no
    finished run is found)."""
    baselines: tuple[Path, ...] = ()
    """Folders searched for finished grpo runs after --out; unset: the plan's own `out`
    and every committed results/*/runs."""
    seeds: tuple[int, ...] = ()
    """Seeds to run instead of the plan's (a departure: the verdicts become exploratory)."""
    population: int = 8
    """Most seeds of one configuration trained together (`creditgym sweep --population`)."""
    shard: str = "0/1"
    """`i/n`: do only the populations at positions i, i + n, ... of those to run (two
    processes on two cores); the verdicts are printed by a process that finds every run
    finished."""
    dry_run: bool = False
    """Print the planned cost and stop."""


@dataclass(frozen=True)
class Cell:
    """One planned setting: the `grpo` configuration at its first seed (resolved once), and
    the seeds the plan gives it."""

    baseline: RunPlan
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class SeedPair:
    """One cell's seed: the `grpo` run and the challenger's, each with the finished run
    folder found for it (None: to run, into the output folder)."""

    cell: int  # index into the plan's cells
    seed: int
    baseline: RunPlan
    baseline_dir: Path | None
    challenger: RunPlan
    challenger_dir: Path | None


@dataclass(frozen=True)
class Comparison:
    """What `benchmarks.compare` will run and read: the cells, their seed pairs, and
    whether the seeds are the plan's."""

    cells: tuple[Cell, ...]
    pairs: tuple[SeedPair, ...]
    seeds_override: tuple[int, ...]  # () when the plan's seeds are used

    def to_run(self) -> list[RunPlan]:
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
        Cell(resolve(dataclasses.replace(base, seed=found[0])), tuple(found))
        for base, found in seeds.items()
    ]


def challenger_config(baseline: RunConfig, credit: str, options: tuple[str, ...]) -> RunConfig:
    """The run of the user's module that pairs with `baseline`: only the credit changed."""
    return dataclasses.replace(baseline, credit=credit, credit_options=options)


def challenger_name(run: RunPlan) -> str:
    """The module's row name as the study names rows (`hp_rlvr_exact`, `discounted
    [gamma=0.5]`)."""
    return method_form(run.identity)


def finished_run(run: RunPlan, folders: Sequence[Path]) -> Path | None:
    """The first of `folders` holding `run` finished (done.json, every requested episode)
    with the identity `run` hashes, or None."""
    for folder in folders:
        placed = dataclasses.replace(run, config=dataclasses.replace(run.config, out=folder))
        if not is_finished(placed):
            continue
        recorded = records.read_json(placed.run_dir / records.CONFIG_FILE).get("identity")
        if recorded == run.identity:
            return placed.run_dir
    return None


def build_comparison(
    cells: Sequence[Cell],
    challengers: Sequence[RunPlan],
    baseline_folders: Sequence[Path],
    seeds_override: tuple[int, ...] = (),
) -> Comparison:
    """Every cell's seed pairs (the plan's seeds, or `seeds_override`), each run with the
    finished folder found for it: `grpo` in `baseline_folders` (the output folder first),
    the challenger (each cell's, `challengers`) in the output folder only."""
    pairs = []
    for number, (cell, cell_challenger) in enumerate(zip(cells, challengers, strict=True)):
        for seed in seeds_override or cell.seeds:
            baseline = single_run(cell.baseline, seed)
            challenger = single_run(cell_challenger, seed)
            pairs.append(
                SeedPair(
                    number,
                    seed,
                    baseline,
                    finished_run(baseline, baseline_folders),
                    challenger,
                    finished_run(challenger, [challenger.config.out]),
                )
            )
    return Comparison(tuple(cells), tuple(pairs), tuple(seeds_override))


def cell_label(run: RunPlan) -> tuple[str, str, str]:
    """(instrument, level, channel) of a cell's run (`comparison.cell_label`)."""
    return comparison.cell_label(run.identity, run.step_limit, run.config.reward_channel)


def cost_lines(plan: Comparison, folders: Sequence[Path]) -> list[str]:
    """The planned cost, printed before any run starts: per cell the runs to do, reused
    and the seconds per run measured on earlier `grpo` runs, then the totals."""
    identities = [cell.baseline.identity for cell in plan.cells]
    estimates = comparison.measured_seconds(identities, folders)
    todo = plan.to_run()
    lines = []
    if plan.seeds_override:
        planned = sorted({len(c.seeds) for c in plan.cells})
        lines.append(
            f"--seeds {' '.join(map(str, plan.seeds_override))} departs from the plan "
            f"({'/'.join(map(str, planned))} seeds per cell): every verdict below is "
            "exploratory, not the plan's"
        )
    total, unknown = 0.0, 0
    for number, (cell, (seconds, count, source)) in enumerate(
        zip(plan.cells, estimates, strict=True)
    ):
        pairs = [p for p in plan.pairs if p.cell == number]
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
        f"planned: {len(todo)} runs to do, {len(plan.pairs) * 2 - len(todo)} reused; "
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


def finished_folders(plan: Comparison) -> dict[tuple[str, int], Path]:
    """The finished run folder of every run of `plan` that has one now, keyed by
    (role, pair index), role "baseline" or "challenger": a folder found before, else the
    output folder's."""
    found = {}
    for index, pair in enumerate(plan.pairs):
        for role, run, known in (
            ("baseline", pair.baseline, pair.baseline_dir),
            ("challenger", pair.challenger, pair.challenger_dir),
        ):
            run_dir = known or finished_run(run, [run.config.out])
            if run_dir is not None:
                found[(role, index)] = run_dir
    return found


def cell_runs(plan: Comparison, found: dict[tuple[str, int], Path]) -> list[comparison.CellRuns]:
    """Each cell's label, planned seeds and the run folders of its seeds with both runs
    finished (`found`, from `finished_folders`), as `comparison.verdict_rows` reads them."""
    cells = []
    for number, cell in enumerate(plan.cells):
        indices = [i for i, p in enumerate(plan.pairs) if p.cell == number]
        pairs = tuple(
            (found[("challenger", i)], found[("baseline", i)])
            for i in indices
            if ("baseline", i) in found and ("challenger", i) in found
        )
        cells.append(comparison.CellRuns(cell_label(cell.baseline), len(cell.seeds), pairs))
    return cells


def baseline_folders(args: CompareConfig, plan_out: Path) -> list[Path]:
    """--out first, then --baselines or the plan's `out` and the committed run folders."""
    rest = args.baselines or (plan_out, *sorted(Path().glob(COMMITTED_RUNS)))
    return list(dict.fromkeys([args.out, *rest]))


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym compare`."""
    args = parse_arguments(CompareConfig, argv, prog_of("compare"))
    if args.credit in (BASELINE, NO_CREDIT):
        raise UsageError(f"--credit {args.credit}: compare a module other than the baseline")
    if any(seed < 0 for seed in args.seeds):
        raise UsageError(f"--seeds must be >= 0 (got {args.seeds})")
    shard_index, shard_count = parse_shard(args.shard)
    # `--credit my_module:MyCredit` names a file beside the user, wherever the command was
    # started from: `python -m` puts the working directory on the path, the `creditgym`
    # console script does not.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    # The module and its options first: a typo is one line before the plan is read.
    credit_class(args.credit)
    parse_credit_options(args.credit, args.credit_options)
    configs = load_sweep(args.config, None)
    cells = plan_cells(configs, args.out)
    challengers = [
        resolve(challenger_config(cell.baseline.config, args.credit, args.credit_options))
        for cell in cells
    ]
    for challenger in challengers:  # the module, its options and the output folder
        validate(challenger)
    folders = baseline_folders(args, configs[0].out)
    plan = build_comparison(cells, challengers, folders, args.seeds)
    for line in cost_lines(plan, folders):
        print(line, flush=True)
    if args.dry_run:
        return 0
    # Populations first, then the shard's share of them: sharding single runs would split
    # every population's consecutive seeds between the processes.
    todo = group_into_populations(plan.to_run(), args.population)[shard_index::shard_count]
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    failures = run_local(
        todo, SweepConfig(config=args.config, out=args.out, population=args.population)
    )
    if todo:
        used = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"measured: {sum(len(p.seeds) for p in todo)} runs in "
            f"{time.monotonic() - started:.0f} s wall, "
            f"{used.ru_utime + used.ru_stime - cpu_before:.0f} s CPU, "
            f"peak RSS {used.ru_maxrss / 1024:.0f} MB",
            flush=True,
        )
    for failure in failures:
        print(f"failed: {failure}", file=sys.stderr)
    found = finished_folders(plan)
    missing = 2 * len(plan.pairs) - len(found)
    if missing:
        print(
            f"{missing} runs not finished (another shard, or failed): run the same command "
            "again for the verdicts",
            file=sys.stderr,
        )
        return 1
    name = challenger_name(plan.pairs[0].challenger)
    rows = comparison.verdict_rows(cell_runs(plan, found), bool(plan.seeds_override))
    print(comparison.verdict_table(rows, name))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
