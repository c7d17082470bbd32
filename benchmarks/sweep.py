"""Run a grid of configurations: `creditgym sweep --config FILE.toml`.

The file is small TOML:

    [common]            # RunConfig fields shared by every run (scalars)
    steps = 20

    [[grid]]            # one or more grids: list values are crossed, scalars fixed
    env = ["sysdiag", "alfworld"]
    credit = ["grpo", "gigpo"]
    seed = [0, 1, 2]

    [[grid]]            # e.g. the baselines
    model = ["expert", "random"]
    credit = "none"

Every configuration is validated before the first run starts. Finished runs (their
folder has `done.json` and every requested episode) are skipped, so rerunning a sweep
after a crash continues where it stopped. The leaderboard is rebuilt at the end.

`--executor local` runs the configurations one after another in this process;
`--executor ray` makes each one a Ray task (`--cpus-per-run`, and `--gpus-per-run` for a
run on `--device cuda`) on the Ray that `ray.init()` finds: the cluster named by
`--ray-address` or `RAY_ADDRESS`, else a local one started for the sweep. A task runs
`benchmarks.run`'s own `run`, so run folders, skip-finished and resume are the local
executor's. The runs to do are grouped into populations (`--population`, default 8: the
consecutive seeds of one configuration trained in one process, `benchmarks.run
--population`, into the same run folders), each one local run or one Ray task. A task
whose worker dies (killed, out of memory, node lost) is retried up to `--retries` times
into the same folders, where each run resumes from its last checkpoint and last written
episode; a run that raises is reported with its error and the others go on. On a
cluster every node must see `--out` (shared storage), so it must be absolute.

Each run holds its folder's lock while it runs (`benchmarks/lock.py`), so two sweeps over
one grid never write the same run: a run another process holds is reported in one line,
skipped, and counted as not done (exit status 1; rerun the sweep once the other ended).
A sweep whose `out` holds its runs computed in another precision (begun where
`dtype = "fast"` or `"auto"` resolved otherwise: another processor, a GPU) stops in one
line (exit status 2) rather than start a second grid beside them.
A run folder holding a damaged file (`report/records.py`) is reported the same way
when its run starts, or, found while checking which runs are finished, stops the sweep in
one line (exit status 2).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import tomllib
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import ray

from creditgym.agents.atomic import DamagedFileError
from creditgym.agents.rollout import close_workers
from creditgym.benchmarks.cli import (
    UsageError,
    exit_on_usage_error,
    lookup,
    parse_arguments,
    prog_of,
    suggest,
)
from creditgym.benchmarks.common import MACHINE_RESOLVED_DTYPES, PER_MACHINE_DTYPES
from creditgym.benchmarks.lock import LockHeldError
from creditgym.benchmarks.run import RunConfig, RunPlan, resolve, run, run_population
from creditgym.benchmarks.run.config import PRESETS
from creditgym.benchmarks.run.evaluate import is_finished
from creditgym.benchmarks.run.identity import hashed_name
from creditgym.benchmarks.run.population import (
    group_into_populations,
    member_plans,
    population_label,
)
from creditgym.benchmarks.run.validate import validate
from creditgym.benchmarks.sweep_file import check_sweep_file
from creditgym.models.precision import cpu_features
from creditgym.report import leaderboard

RUN_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
DEFAULT_SWEEP_OUT = RunConfig.out  # ad-hoc sweeps stay out of the committed reference set


@dataclass(frozen=True)
class SweepConfig:
    """Run every configuration of a sweep file, skipping finished runs."""

    config: Path
    """TOML sweep file ([common] fields and [[grid]] tables; see benchmarks/sweep.py)."""
    out: Path | None = None
    """Folder that receives the run folders; unset: the sweep file's `out` (in [common]:
    the reference configs name results/runs, the committed set), else results/local/runs
    (git-ignored, like an ad-hoc `benchmarks.run`)."""
    dry_run: bool = False
    """List the runs and whether each is finished, without running anything."""
    leaderboard: bool = True
    """Rebuild results/leaderboard.* from the run folders at the end."""
    shard: str = "0/1"
    """`i/n`: run only the configurations at positions i, i + n, i + 2n, ... of the
    sweep, so n processes (or machines) can split one sweep without running a
    configuration twice; e.g. `--shard 0/2` and `--shard 1/2` on a 2-core machine."""
    executor: Literal["local", "ray"] = "local"
    """local: the runs one after another in this process; ray: each run a Ray task, as
    many at once as the Ray cluster's CPUs / GPUs allow (docs/running.md)."""
    ray_address: str | None = None
    """--executor ray: the Ray cluster to join (e.g. `auto`, `ray://head:10001`); unset:
    RAY_ADDRESS, else a local Ray started for the sweep."""
    cpus_per_run: float = 1.0
    """--executor ray: CPUs each run reserves (Ray also sets its OMP_NUM_THREADS)."""
    gpus_per_run: float = 1.0
    """--executor ray: GPUs each run on --device cuda reserves (Ray picks them and sets
    CUDA_VISIBLE_DEVICES, so give `--device cuda`, not `cuda:N`)."""
    retries: int = 3
    """--executor ray: times a run whose worker died is started again (it resumes); a run
    that raises an error is not retried."""
    population: int = 8
    """Most seeds of one configuration trained together in one process (`creditgym run
    --population`, the same run folders): the runs to do that differ only in consecutive
    seeds are grouped into populations of up to this many, each one local run or one Ray
    task; 1: every run alone."""


def _coerce(key: str, value: Any) -> Any:
    """TOML value -> RunConfig field value (paths come as strings)."""
    if key not in RUN_FIELDS:
        raise UsageError(
            f"unknown run option {key!r} in sweep file; valid: {', '.join(RUN_FIELDS)}."
            f"{suggest(key, RUN_FIELDS)}"
        )
    if key == "faults":  # "a,b" or ["a", "b"] (in [common]; in a grid a list is an axis)
        return tuple(value.split(",")) if isinstance(value, str) else tuple(value)
    if key in ("env_options", "credit_options"):  # "delay=16 variance=high" (in a grid, a
        # list of such strings is an axis)
        return tuple(value.split()) if isinstance(value, str) else tuple(value)
    return Path(value) if key == "out" else value


def parse_shard(text: str) -> tuple[int, int]:
    """`"i/n"` -> (i, n) with 0 <= i < n, or a UsageError."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()) or not int(index) < int(count):
        raise UsageError(f"--shard must be i/n with 0 <= i < n (got {text!r})")
    return int(index), int(count)


def expand(document: Mapping[str, Any], out: Path | None) -> list[RunConfig]:
    """All RunConfigs of a parsed sweep file, in file order, without duplicates.

    `out` (the command line's) wins over the file's `out`; with neither, RunConfig's."""
    unknown = set(document) - {"common", "grid"}
    if unknown:
        raise UsageError(f"unknown sweep section(s) {sorted(unknown)}; valid: common, grid")
    common = {key: _coerce(key, value) for key, value in document.get("common", {}).items()}
    out = out if out is not None else common.pop("out", DEFAULT_SWEEP_OUT)
    common.pop("out", None)
    grids = document.get("grid", [])
    if not grids:
        raise UsageError("the sweep file has no [[grid]] table")
    configs: dict[RunConfig, None] = {}  # insertion-ordered set: file order, O(1) lookups
    for grid in grids:
        axes = {key: value if isinstance(value, list) else [value] for key, value in grid.items()}
        for values in itertools.product(*axes.values()):
            fields = {**common, **{k: _coerce(k, v) for k, v in zip(axes, values, strict=True)}}
            if "out" in fields:
                raise UsageError("`out` belongs in [common] (one folder per sweep), not in a grid")
            preset = lookup("preset", fields.get("preset", "default"), PRESETS)
            try:
                config = RunConfig(**{**preset, **fields, "out": out})
            except TypeError as error:
                raise UsageError(f"bad run options {fields}: {error}") from error
            configs.setdefault(config)
    return list(configs)


def load_sweep(path: Path, out: Path | None) -> list[RunConfig]:
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as error:
        raise UsageError(f"cannot read sweep file {path}: {error.strerror or error}") from error
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{path} is not valid TOML: {error}") from error
    check_sweep_file(path, document)  # every value of its field's type, before any is used
    return expand(document, out)


def run_local(plans: Sequence[RunPlan], sweep: SweepConfig) -> list[str]:
    """Run `plans` one after another in this process; one line per failed run."""
    failures = []
    for number, plan in enumerate(plans, start=1):
        print(f"[{number}/{len(plans)}] {population_label(plan)}: running", flush=True)
        try:
            failures += run_one(plan)
        # Another sweep or terminal is running it, or its folder holds a damaged file: one
        # line each (the message says what to do), and the sweep goes on.
        except (LockHeldError, DamagedFileError) as error:
            print(f"[{number}/{len(plans)}] {plan.name}: skipped, {error}", flush=True)
            failures.append(f"{plan.name}: {error}")
        except Exception as error:  # one broken run must not stop a long sweep
            traceback.print_exc()
            failures.append(f"{plan.name}: {error}")
        # Env workers are kept per env and kwargs for the next run on the same task (their
        # start-up costs seconds each); a sweep moving to another task stops them, or a
        # grid of many tasks would keep every task's workers (and their memory) alive.
        if number == len(plans) or task_of(plans[number].config) != task_of(plan.config):
            close_workers()
    return failures


def run_one(plan: RunPlan) -> list[str]:
    """A run, or a population of runs (`benchmarks.run.run_population`, whose members
    fail apart, and whose member another process holds is skipped as a run would be):
    one line per run that did not finish, each also printed."""
    if plan.config.population == 1:
        run(plan)
        return []
    outcomes = run_population(plan, skip_held=True)
    failures = []
    for member, outcome in zip(member_plans(plan), outcomes, strict=True):
        if outcome.error is not None:
            print(f"{member.name}: {outcome.verdict}, {outcome.error}", flush=True)
            failures.append(f"{member.name}: {outcome.error}")
    return failures


def task_of(config: RunConfig) -> tuple[Any, ...]:
    """What decides the env workers a run uses (its env and the env's kwargs)."""
    return (config.env, config.faults, config.env_options, config.max_episode_steps)


def run_cell(config: RunConfig, expected_name: str | None = None) -> list[str]:
    """One configuration (a run or a population) in a Ray worker: `run_one`, which
    resumes whatever the folders hold (a retry after the worker died continues,
    repeating nothing); one line per run that failed.

    `expected_name`: the run's name as the sweep's driver resolved it. A CPU run's
    `dtype = "fast"` resolves by the processor it runs on, so a worker on a node whose
    processor resolves otherwise would write another folder in other arithmetic: it
    refuses instead (a cluster of mixed processors, `check_one_precision`). The worker
    resolves the configuration's plan itself, on its own machine."""
    try:
        plan = resolve(config)
        if expected_name is not None and plan.name != expected_name:
            raise UsageError(
                f"{expected_name}: this node resolves dtype={config.dtype!r} to "
                f"{plan.dtype} ({cpu_features()}), the sweep's driver "
                f"otherwise; run the sweep where every node computes in one precision, or "
                f"give an explicit --dtype"
            )
        return run_one(plan)
    finally:
        # Ray reuses the worker for other tasks: what a task started ends with it, as the
        # resources it reserved do.
        close_workers()


def ray_task_options(plan: RunPlan, sweep: SweepConfig) -> dict[str, Any]:
    """The resources and retry policy of one configuration's Ray task."""
    return {
        "num_cpus": sweep.cpus_per_run,
        "num_gpus": sweep.gpus_per_run if plan.config.device.startswith("cuda") else 0,
        # Worker death only (killed, out of memory, node lost): the rerun resumes.
        "max_retries": sweep.retries,
        # An error the run raised would only repeat.
        "retry_exceptions": False,
        "name": plan.name,
    }


def run_on_ray(plans: Sequence[RunPlan], sweep: SweepConfig) -> list[str]:
    """Submit every configuration as a Ray task, report each as it ends; one line per
    failed run (its error, or the worker death that outlived the retries)."""
    if not ray.is_initialized():
        ray.init(address=sweep.ray_address)  # None: RAY_ADDRESS, else a local Ray
    remote_cell = ray.remote(run_cell)
    pending = {}
    for plan in plans:
        options = ray_task_options(plan, sweep)
        pending[remote_cell.options(**options).remote(plan.config, options["name"])] = plan
        print(f"submitted {population_label(plan)}", flush=True)
    failures, ended = [], 0
    while pending:
        [ref], _ = ray.wait(list(pending), num_returns=1)
        name = population_label(pending.pop(ref))
        ended += 1
        status = "failed"
        try:
            failed_members = ray.get(ref)
            failures += failed_members
            status = f"{len(failed_members)} failed" if failed_members else "finished"
        except ray.exceptions.RayTaskError as error:  # the run raised: show its traceback
            print(error, file=sys.stderr)
            failures.append(f"{name}: {error.cause}")
        except ray.exceptions.RayError as error:  # its worker died more than --retries times
            failures.append(f"{name}: {type(error).__name__}: {str(error).splitlines()[0]}")
        print(f"[{ended}/{len(plans)}] {name}: {status}", flush=True)
    return failures


EXECUTORS: dict[str, Callable[[Sequence[RunPlan], SweepConfig], list[str]]] = {
    "local": run_local,
    "ray": run_on_ray,
}


def check_ray_options(sweep: SweepConfig, configs: Sequence[RunConfig]) -> None:
    """UsageError on Ray options that cannot work, before anything is submitted."""
    if sweep.cpus_per_run < 0 or sweep.gpus_per_run < 0 or sweep.retries < 0:
        raise UsageError("--cpus-per-run, --gpus-per-run and --retries must be >= 0")
    joins_cluster = sweep.ray_address is not None or "RAY_ADDRESS" in os.environ
    relative = sorted({str(c.out) for c in configs if not c.out.is_absolute()})
    if joins_cluster and relative:
        raise UsageError(
            f"--executor ray on a cluster writes where every node can read: --out must be "
            f"an absolute path on shared storage (got {relative[0]})"
        )


def check_one_precision(plans: Sequence[RunPlan]) -> None:
    """UsageError where `--out` already holds one of `plans` computed in another
    precision than its `dtype` (`auto`, `fast`) resolves to here.

    Such a folder means the sweep began on another processor or device: continuing here
    would start a second grid in other arithmetic beside the first (the study names each
    precision's rows apart, so neither would finish). Refused before any run starts."""
    for plan in plans:
        config = plan.config
        if config.name or config.dtype not in PER_MACHINE_DTYPES:
            continue
        identity = plan.identity
        here = identity["dtype"]
        for precision in MACHINE_RESOLVED_DTYPES:
            twin = hashed_name(plan, {**identity, "dtype": precision})
            if precision != here and (config.out / twin).exists():
                raise UsageError(
                    f"{config.out} holds this sweep's runs computed in {precision} (e.g. "
                    f"{twin}); here dtype={config.dtype!r} resolves to {here} "
                    f"({cpu_features()}), which would start a second grid in other "
                    f"arithmetic beside them: continue the sweep where it resolves to "
                    f"{precision} (docs/running.md), or give another --out"
                )


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym sweep`."""
    sweep = parse_arguments(SweepConfig, argv, prog_of("sweep"))
    shard_index, shard_count = parse_shard(sweep.shard)
    configs = load_sweep(sweep.config, sweep.out)[shard_index::shard_count]
    if sweep.executor == "ray":
        check_ray_options(sweep, configs)
    plans = []
    for config in configs:
        # Each cell resolved once: its checks, its folder and its run read the one plan.
        plan = resolve(config)
        # A Ray task checks its device where it runs: the driver (a cluster's head
        # node) may have no GPU. The device is not part of a run's identity.
        on_cpu = dataclasses.replace(plan.config, device="cpu")
        validate(dataclasses.replace(plan, config=on_cpu) if sweep.executor == "ray" else plan)
        plans.append(plan)
    check_one_precision(plans)
    try:
        finished = [is_finished(plan) for plan in plans]
    except DamagedFileError as error:  # a run folder's records: one line, exit 2
        raise UsageError(str(error)) from error
    print(f"{len(plans)} runs, {sum(finished)} finished")
    todo = []
    for number, (plan, done) in enumerate(zip(plans, finished, strict=True), start=1):
        if done or sweep.dry_run:
            status = "finished, skipped" if done else "to run"
            print(f"[{number}/{len(plans)}] {plan.name}: {status}", flush=True)
        if not done:
            todo.append(plan)
    todo = group_into_populations(todo, sweep.population)
    failures = [] if sweep.dry_run or not todo else EXECUTORS[sweep.executor](todo, sweep)
    if sweep.leaderboard and not sweep.dry_run and configs:
        out = configs[0].out
        leaderboard.write_leaderboard(out, out.parent)
        print(f"leaderboard written to {out.parent}")
    for failure in failures:
        print(f"failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
