"""A user's credit module against grpo with the study's verdicts: `creditgym compare`.

    creditgym compare --credit my_module:MyCredit --dry-run              # the cost only
    creditgym compare --credit my_module:MyCredit                         # run, then verdicts
    creditgym compare --credit discounted --credit-options gamma=0.5 --seeds 0 1 2

Runs the module on every `grpo` cell of the plan's sweep file (default the decisive
study's, benchmarks/configs/study_decisive.toml) at the planned seeds, in the run folders a
sweep of that file would write, reusing every finished `grpo` run of equal identity in the
output folder or the committed run folders and running the others; prints the planned
cost before it starts, then per instrument, level, channel and endpoint the verdict
against grpo (docs/study_plan.md's analysis; `benchmarks/comparison.py`).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from creditgym.benchmarks import comparison
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, parse_arguments, prog_of
from creditgym.benchmarks.run_build import credit_class
from creditgym.benchmarks.run_config import RunConfig
from creditgym.benchmarks.run_population import group_into_populations
from creditgym.benchmarks.run_settings import NO_CREDIT, credit_options_of
from creditgym.benchmarks.run_validate import validate
from creditgym.benchmarks.sweep import SweepConfig, load_sweep, parse_shard, run_local

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


def baseline_folders(args: CompareConfig, plan_out: Path) -> list[Path]:
    """--out first, then --baselines or the plan's `out` and the committed run folders."""
    rest = args.baselines or (plan_out, *sorted(Path().glob(COMMITTED_RUNS)))
    return list(dict.fromkeys([args.out, *rest]))


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym compare`."""
    args = parse_arguments(CompareConfig, argv, prog_of("compare"))
    if args.credit in (comparison.BASELINE, NO_CREDIT):
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
    credit_options_of(RunConfig(credit=args.credit, credit_options=args.credit_options))
    configs = load_sweep(args.config, None)
    cells = comparison.plan_cells(configs, args.out)
    for cell in cells:  # the module, its options and the output folder, before any work
        validate(comparison.challenger_config(cell.baseline, args.credit, args.credit_options))
    folders = baseline_folders(args, configs[0].out)
    plan = comparison.build_comparison(cells, args.credit, args.credit_options, folders, args.seeds)
    for line in comparison.cost_lines(plan, folders):
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
            f"measured: {sum(p.population for p in todo)} runs in "
            f"{time.monotonic() - started:.0f} s wall, "
            f"{used.ru_utime + used.ru_stime - cpu_before:.0f} s CPU, "
            f"peak RSS {used.ru_maxrss / 1024:.0f} MB",
            flush=True,
        )
    for failure in failures:
        print(f"failed: {failure}", file=sys.stderr)
    found = comparison.finished_folders(plan)
    missing = 2 * len(plan.pairs) - len(found)
    if missing:
        print(
            f"{missing} runs not finished (another shard, or failed): run the same command "
            "again for the verdicts",
            file=sys.stderr,
        )
        return 1
    name = comparison.challenger_name(plan.pairs[0].challenger)
    print(comparison.verdict_table(comparison.verdict_rows(plan, found), name))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
