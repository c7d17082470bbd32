"""A population run: `creditgym run ... --population K` trains the seeds
seed, seed + 1, ..., seed + K - 1 of one configuration in one process.

The population pays the per-run fixed costs once (imports, the policy's build and
tokenizer, env registration and data checks) and trains its members one after another,
each from its own copy of the starting weights. A member is the single run of its seed
(`benchmarks/run/command.py: run_in`, in the run folder its plan names): its own optimiser,
gradient-norm clipping, random streams (every one a pure function of its seed,
trainers/core.py), tasks, rollouts, credit groups, evaluation and checkpoints, so its
folder holds the files and records its single run writes, whatever K and whichever
seeds share its population; its provenance.json (when the population starts the
folder) and commands.txt name the population. A member that fails (a NaN loss, a
damaged file) is stopped and reported in one line; the others go on.

This module holds the population's own pieces (its members, checks, outcomes and
progress); `benchmarks/run/command.py: run_population` runs them. The population is
resolved once (`benchmarks/run/plan.py`); each member's plan is the population's with its
own seed, nothing parsed again.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from creditgym.agents.atomic import DamagedFileError
from creditgym.benchmarks.cli import UsageError
from creditgym.benchmarks.lock import LockHeldError
from creditgym.benchmarks.run.config import RunConfig
from creditgym.benchmarks.run.plan import RunPlan
from creditgym.credit.base import NonFiniteError
from creditgym.report import records

# Exit status of a member stopped by bad input (a NaN loss or reward, a damaged record or
# checkpoint, an option its env refuses): what the single run exits with on it.
BAD_INPUT_STATUS = 2
# Exit status of a member that failed otherwise (an evaluation that lost episodes, a bug).
FAILED_STATUS = 1
# Errors that are a member's input, not the code: reported in one line, no traceback.
BAD_INPUT_ERRORS = (NonFiniteError, DamagedFileError, UsageError)


def check_population(cfg: RunConfig) -> None:
    """UsageError on a population that cannot run: K < 1, or one `--name` for K folders."""
    if cfg.population < 1:
        raise UsageError(f"--population must be >= 1 (got {cfg.population})")
    if cfg.population > 1 and cfg.name:
        raise UsageError(
            "--name names one run folder; a population writes one per seed under derived "
            "names: leave --name unset"
        )


def single_run(plan: RunPlan, seed: int) -> RunPlan:
    """The plan of the single run of `seed` (population 1) of `plan`'s configuration, so
    that its run name, config.json and identity are that run's; nothing resolved again."""
    config = dataclasses.replace(plan.config, seed=seed, population=1)
    return dataclasses.replace(plan, config=config, seeds=(seed,))


def member_plans(plan: RunPlan) -> list[RunPlan]:
    """Each member's plan: the single run of its seed."""
    return [single_run(plan, seed) for seed in plan.seeds]


def population_record(plan: RunPlan, command: str) -> dict[str, Any]:
    """What a member's provenance.json says of the population that started its folder."""
    return {"seeds": list(plan.seeds), "command": command}


class MemberOutcome(NamedTuple):
    """How one member of a population ended."""

    seed: int
    run_dir: Path
    status: int  # 0 finished; else the exit status its single run would give
    verdict: str  # finished; skipped (another process holds its folder); stopped (failed)
    error: str | None  # one line, when it did not finish
    success_pct: float | None  # held-out success of its first split, when finished


def finished_outcome(seed: int, run_dir: Path) -> MemberOutcome:
    """The outcome of a member whose folder holds done.json (its summary's first split)."""
    rows = records.read_json(run_dir / records.DONE_FILE)["summary"]
    success = rows[0]["success_pct"] if rows else None
    return MemberOutcome(seed, run_dir, 0, "finished", None, success)


def failed_outcome(seed: int, run_dir: Path, error: BaseException) -> MemberOutcome:
    """The outcome of a member stopped by `error`, with its one-line report."""
    status = BAD_INPUT_STATUS if isinstance(error, BAD_INPUT_ERRORS) else FAILED_STATUS
    text = (str(error).splitlines() or [""])[0]
    if not isinstance(error, BAD_INPUT_ERRORS):
        text = f"{type(error).__name__}: {text}"
    return MemberOutcome(seed, run_dir, status, "stopped", text, None)


def held_outcome(seed: int, run_dir: Path, error: LockHeldError) -> MemberOutcome:
    """The outcome of a member another process is running (not done here: exit status 1,
    as a sweep counts a run it skipped)."""
    return MemberOutcome(seed, run_dir, FAILED_STATUS, "skipped", str(error), None)


def seed_range(plan: RunPlan) -> str:
    """`seeds 0-7` (or `seed 3` for a population of one)."""
    seeds = plan.seeds
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"


def plan_prefix(plan: RunPlan) -> str:
    """What the population will do before the plan line of one member: its size, seeds
    and memory (members train one after another: one run's, plus the starting weights)."""
    return (
        f"population of {len(plan.seeds)} ({seed_range(plan)}), trained one after another "
        "in this process (the memory of one run, plus one copy of the starting weights); "
        "each: "
    )


def progress_line(plan: RunPlan, outcomes: Sequence[MemberOutcome]) -> str:
    """`population seeds 0-7: 3/8 done, 1 failed; mean held-out success 45.2 % over 2`."""
    done = [o.success_pct for o in outcomes if o.status == 0 and o.success_pct is not None]
    line = f"population {seed_range(plan)}: {len(outcomes)}/{len(plan.seeds)} members ended"
    for verdict, words in (("skipped", "held by another process"), ("stopped", "stopped")):
        count = sum(o.verdict == verdict for o in outcomes)
        if count:
            line += f", {count} {words}"
    if done:
        line += f"; mean held-out success {statistics.fmean(done):.1f} % over {len(done)}"
    return line


def exit_status(outcomes: Sequence[MemberOutcome]) -> int:
    """The population's exit status: the largest of its members' (0 when all finished)."""
    return max((o.status for o in outcomes), default=0)


def group_into_populations(plans: Sequence[RunPlan], size: int) -> list[RunPlan]:
    """`plans` (single runs) as populations of at most `size` consecutive seeds of one
    configuration, for `benchmarks.sweep`: runs that differ only in their seed join, and
    the populations keep the order of their first runs (so a configuration's later block
    of seeds may join an earlier block's population); a run whose neighbouring seeds are
    absent stays alone. A population's plan is its first member's with the population's
    seeds: nothing is resolved again.

    Raises:
        UsageError: `size` < 1, or a run that is a population already.
    """
    if size < 1:
        raise UsageError(f"--population must be >= 1 (got {size})")
    if any(plan.config.population != 1 for plan in plans):
        raise UsageError("a sweep groups its seeds itself: set its --population, not `population`")
    by_seed: dict[RunConfig, dict[int, RunPlan]] = {}
    for plan in plans:
        config = plan.config
        # A run named by --name has a folder of its own: it stays alone.
        base = config if config.name else dataclasses.replace(config, seed=0)
        by_seed.setdefault(base, {}).setdefault(config.seed, plan)
    populations = []
    for found in by_seed.values():
        ordered = sorted(found)
        start = 0
        for end in range(1, len(ordered) + 1):
            if end == len(ordered) or ordered[end] != ordered[end - 1] + 1 or end - start == size:
                first = found[ordered[start]]
                config = dataclasses.replace(first.config, population=end - start)
                seeds = tuple(ordered[start:end])
                populations.append(dataclasses.replace(first, config=config, seeds=seeds))
                start = end
    first = {plan.config: position for position, plan in reversed(list(enumerate(plans)))}
    return sorted(populations, key=lambda p: first[dataclasses.replace(p.config, population=1)])


def population_label(plan: RunPlan) -> str:
    """A run's name, or for a population its first member's with its seeds."""
    if len(plan.seeds) == 1:
        return plan.name
    first = member_plans(plan)[0].name
    return f"{first} (population of {len(plan.seeds)}, {seed_range(plan)})"
