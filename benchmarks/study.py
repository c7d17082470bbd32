"""The reference study's report: `creditgym study`.

Reads the run folders of a study's sweep (`--runs`, default `results/study/runs/` of
`benchmarks/configs/study.toml`; `--config` names the sweep config in the header) and
writes, next to them (`results/study/`), runs.csv, study.md and the figures; with
`--calibration` calibration.md instead of study.md; with `--plan` it prints a study's plan
from a pilot and writes nothing. What each holds: report/study/.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, parse_arguments, prog_of
from creditgym.report import records, stats
from creditgym.report.study.build import build
from creditgym.report.study.comparisons import MIN_SEEDS_FOR_VERDICT
from creditgym.report.study.plan import bca_stability, plan_costs, plan_markdown, plan_pairs
from creditgym.report.study.rows import runs_table
from creditgym.report.study.summary import MIN_REPS


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


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym study`."""
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
    frame = build(args.runs, args.out, args.reps, args.config, args.calibration)
    report = "calibration.md" if args.calibration else "study.md"
    print(f"{len(frame)} runs over {frame.task.nunique()} tasks -> {args.out}/{report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
