"""Seeds per CPU-hour: one process per seed (today's path, as a sweep's shards run them)
against population runs (`benchmarks.run --population K`, benchmarks/run/population.py).

For each row of the study's mix (`small`, 32 rollouts an iteration, AdamW 3e-3, a
learning curve every 4 iterations on 32 tasks, 64 evaluation episodes: KeyDoor delay 4
for 20 iterations and Umbrella length 10 for 60, each with grpo and hp_rlvr), it first
profiles one single run (start-up, rollout, credit, update, learning curve, and the rest:
evaluation, samples and writing) and times its update with and without
`--update-distinct-rows` on the same trajectories, in this process; then it times
`--cores` processes side by side for each path: `--single-seeds` processes of one seed
each, dealt to the cores, and for each K of `--populations` one population of K seeds per
core, also with `--update-distinct-rows` (another arithmetic, named apart). It prints the
processor (with the flags that decide bfloat16), each path's seeds per CPU-hour (seeds x
3600 / (wall x cores)) with its speed-up over today's path, and the peak resident memory
of one of its processes.

    python -m creditgym.benchmarks.perf.bench_population           # the full version (hours)
    python -m creditgym.benchmarks.perf.bench_population --rows keydoor-grpo --populations 1 8 \\
        --keydoor-steps 4 --eval-episodes 16 --single-seeds 2      # a reduced version
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state
from creditgym.benchmarks.run import parse_config, resolve
from creditgym.benchmarks.run.command import starting_policy
from creditgym.benchmarks.run.train import build_trainer
from creditgym.models.precision import cpu_features
from creditgym.report import records
from creditgym.trainers.policy_gradient import distinct_steps

REPO_ROOT = Path(__file__).resolve().parents[2]
# The study's regime (benchmarks/configs/study_fair.toml's [common]).
STUDY_ARGV = (
    "--model", "small", "--tasks-per-step", "4", "--learning-rate", "3e-3",
    "--max-new-tokens", "8", "--eval-batch-size", "16", "--eval-every", "4",
    "--curve-episodes", "32", "--threads", "1",
)  # fmt: skip
# Each row's env options, as the study names them.
ENVS = {
    "keydoor": ("keydoor", "delay=4 variance=high"),
    "umbrella": (
        "umbrella",
        "length=10 num_distractors=0 forecast_per_replica=true forecast_visible=true",
    ),
}
ROWS = ("keydoor-grpo", "keydoor-hp_rlvr", "umbrella-grpo", "umbrella-hp_rlvr")


@dataclass(frozen=True)
class BenchArgs:
    """Options of the population benchmark (defaults: the issue's full version)."""

    rows: tuple[str, ...] = ROWS
    """Rows as env-credit (keydoor-grpo, keydoor-hp_rlvr, umbrella-grpo, umbrella-hp_rlvr)."""
    populations: tuple[int, ...] = (1, 8, 32, 64)
    """Population sizes K timed (each core runs one population of K seeds)."""
    single_seeds: int = 8
    """Seeds of today's path per row (one process each), dealt to the cores; 0: no paths
    timed (the profile and the update only)."""
    cores: int = 2
    """Processes side by side (one thread each)."""
    keydoor_steps: int = 20
    """Training iterations of the KeyDoor rows (the study's 20)."""
    umbrella_steps: int = 60
    """Training iterations of the Umbrella rows (the study's 60)."""
    eval_episodes: int = 64
    """Held-out evaluation episodes of every run (the study's 64)."""
    distinct_rows: bool = True
    """Also time each population with `--update-distinct-rows` (each distinct step row of
    an update run once: another summation order, named apart)."""
    profile: bool = True
    """Profile one single run of each row first."""
    update_iterations: int = 4
    """Iterations of each row whose update is timed in this process with and without
    distinct rows, on the same trajectories (0: none)."""


def row_argv(row: str, args: BenchArgs) -> list[str]:
    """The `benchmarks.run` options of a row, without seed, population and out."""
    env, credit = row.split("-", 1)
    name, options = ENVS[env]
    steps = {"keydoor": args.keydoor_steps, "umbrella": args.umbrella_steps}[env]
    return [
        *STUDY_ARGV, "--env", name, "--env-options", *options.split(), "--credit", credit,
        "--steps", str(steps), "--eval-episodes", str(args.eval_episodes),
    ]  # fmt: skip


def side_by_side(commands: Sequence[list[str]]) -> tuple[float, float]:
    """Run `commands` at once; (wall seconds until the last ends, peak RSS MB of any)."""
    start = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.run", *command],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for command in commands
    ]
    peak_kb = 0
    for process in processes:
        # wait4: this child's own peak, not the running maximum over every child.
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(process.args)} exited {process.returncode}")
        peak_kb = max(peak_kb, usage.ru_maxrss)
    return time.perf_counter() - start, peak_kb / 1024


def startup_seconds() -> float:
    """Seconds a fresh interpreter takes to import `benchmarks.run` (every run pays it)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import creditgym.benchmarks.run"], cwd=REPO_ROOT, check=True
    )
    return time.perf_counter() - start


def profile(row: str, args: BenchArgs, out: Path, startup_s: float) -> str:
    """One single run of `row` (seed 0) and where its wall time went."""
    wall, peak = side_by_side([[*row_argv(row, args), "--seed", "0", "--out", str(out)]])
    (run_dir,) = records.run_dirs(out)
    metrics = records.read_metrics(run_dir)
    phases = {
        name: sum(m[f"time/{name}_s"] for m in metrics) for name in ("rollout", "credit", "train")
    }
    curve_file = run_dir / records.CURVE_FILE
    curve = [json.loads(line) for line in curve_file.read_text().splitlines()]
    curve_s = sum(point["eval_s"] for point in curve)
    training_s = records.read_json(run_dir / records.TRAINING_FILE)["wall_seconds"]
    rest = wall - startup_s - training_s - curve_s
    return (
        f"{row}: one run {wall:.1f} s, peak {peak:.0f} MB: start-up {startup_s:.1f}, "
        f"rollout {phases['rollout']:.1f}, credit {phases['credit']:.1f}, update "
        f"{phases['train']:.1f}, curve {curve_s:.1f}, evaluation + samples + writing "
        f"{rest:.1f}"
    )


def distinct_rows_update(row: str, args: BenchArgs, out: Path) -> str:
    """The update of `args.update_iterations` iterations of `row` (seed 0) timed without
    and with distinct rows, both trainers on the same trajectories and advantages."""
    torch.set_num_threads(1)  # as the runs (--threads 1)
    plan = resolve(parse_config([*row_argv(row, args), "--out", str(out)]))
    trainers = []
    for distinct in (False, True):
        run_dir = out / f"distinct-{distinct}"
        run_dir.mkdir(parents=True)
        trainer = build_trainer(plan, run_dir, starting_policy(plan))
        trainer.config = dataclasses.replace(trainer.config, distinct_rows=distinct)
        trainers.append(trainer)
    seconds, rows, distinct_rows = [0.0, 0.0], 0, 0
    for _ in range(args.update_iterations):
        phase = trainers[0].rollout_and_credit()
        trainers[0].iteration += 1  # the next iteration's tasks
        rows += sum(t.length for t in phase.trajectories)
        distinct_rows += len(distinct_steps(phase.trajectories)[0])
        for index, trainer in enumerate(trainers):
            start = time.perf_counter()
            trainer._optimiser_step(phase.trajectories, phase.credit.token_advantages)
            seconds[index] += time.perf_counter() - start
    return (
        f"{row}: update of {args.update_iterations} iterations ({rows} step rows, "
        f"{distinct_rows} distinct): {seconds[0]:.2f} s, with distinct rows {seconds[1]:.2f} s "
        f"({seconds[0] / seconds[1]:.2f}x)"
    )


def main(args: BenchArgs) -> None:
    print(machine_state())
    print(f"processor features: {cpu_features()}")
    startup_s = startup_seconds()
    print(f"start-up (import benchmarks.run in a fresh interpreter): {startup_s:.1f} s")
    header = (
        f"{'row':<18}{'path':<22}{'seeds':>6}{'wall s':>9}{'seeds/CPU-h':>13}{'x':>7}{'peak MB':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="bench_population_") as scratch:
        root = Path(scratch)
        for row in args.rows:
            if args.profile:
                print(profile(row, args, root / f"{row}-profile", startup_s), flush=True)
            if args.update_iterations:
                print(distinct_rows_update(row, args, root / f"{row}-update"), flush=True)
        if args.single_seeds:
            print(header)
        for row in args.rows if args.single_seeds else ():
            argv = row_argv(row, args)
            out = root / f"{row}-single"
            # Today's path: one process per seed, `cores` at a time.
            start = time.perf_counter()
            peak = 0.0
            for first in range(0, args.single_seeds, args.cores):
                seeds = range(first, min(first + args.cores, args.single_seeds))
                _, wave_peak = side_by_side(
                    [[*argv, "--seed", str(s), "--out", str(out)] for s in seeds]
                )
                peak = max(peak, wave_peak)
            wall = time.perf_counter() - start
            today = args.single_seeds * 3600 / (wall * args.cores)
            print(
                f"{row:<18}{'process/seed':<22}{args.single_seeds:>6}{wall:>9.1f}"
                f"{today:>13.0f}{1.0:>7.2f}{peak:>9.0f}",
                flush=True,
            )
            variants = {"": [], " distinct": ["--update-distinct-rows"]}
            for size in args.populations:
                for label, extra in list(variants.items())[: 1 + args.distinct_rows]:
                    out = root / f"{row}-population{size}{label.strip()}"
                    population = ["--population", str(size), "--out", str(out)]
                    commands = [
                        [*argv, *extra, "--seed", str(core * size), *population]
                        for core in range(args.cores)
                    ]
                    wall, peak = side_by_side(commands)
                    rate = size * 3600 / wall  # size x cores seeds over wall x cores
                    print(
                        f"{row:<18}{f'population {size}{label}':<22}{size * args.cores:>6}"
                        f"{wall:>9.1f}{rate:>13.0f}{rate / today:>7.2f}{peak:>9.0f}",
                        flush=True,
                    )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_population"))
