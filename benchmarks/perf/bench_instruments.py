"""KeyDoor-v0 and Umbrella-v0 throughput on one core: env steps per second (target >= 10,000).

Plays uniformly random admissible commands through `gymnasium.make` (the registered
env with Gymnasium's wrappers, as rollouts build it) over seeded episodes, and times
`env.step` alone and step plus reset together. The process is pinned to one core; rates
are per CPU-second of this process (what one core delivers, stable when other jobs
share the machine) and per wall-clock second.

    .venv/bin/python -m creditgym.benchmarks.perf.bench_instruments [--steps 200000] [--delay 8] \\
        [--length 10]
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import gymnasium

from creditgym import envs  # noqa: F401  (registers the creditgym/ ids)
from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state, random_play_rates

TARGET_STEPS_PER_SECOND = 10_000


@dataclass
class BenchArgs:
    """Time KeyDoor-v0 and Umbrella-v0 under random admissible commands."""

    steps: int = 200_000
    """Env steps to time per env."""
    delay: int = 8
    """KeyDoor orchard steps (its default)."""
    variance: str = "high"
    """KeyDoor apple rewards, "low" or "high" ("high" draws a value per apple)."""
    length: int = 10
    """Umbrella chain length (its default)."""
    num_distractors: int = 2
    """Umbrella distractor facts per step (its default)."""


def measure(env_id: str, env_kwargs: dict[str, Any], total_steps: int) -> dict[str, float]:
    """`random_play_rates` of the registered env, built as rollouts build it."""
    env = gymnasium.make(env_id, **env_kwargs)
    try:
        return random_play_rates(env, total_steps)
    finally:
        env.close()


def main(args: BenchArgs) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as specified
    print(machine_state())
    runs = {
        "creditgym/KeyDoor-v0": {"delay": args.delay, "variance": args.variance},
        "creditgym/Umbrella-v0": {"length": args.length, "num_distractors": args.num_distractors},
    }
    all_met = True
    for env_id, env_kwargs in runs.items():
        figures = measure(env_id, env_kwargs, args.steps)
        met = figures["steps_per_cpu_second"] >= TARGET_STEPS_PER_SECOND
        all_met &= met
        options = ", ".join(f"{key}={value}" for key, value in env_kwargs.items())
        print(
            f"{env_id} ({options}): {figures['steps']:,} random admissible steps over "
            f"{figures['episodes']:,} episodes, one core"
        )
        print(
            f"  env.step only         : {figures['steps_per_cpu_second']:>9,.0f} steps/CPU-s "
            f"(target >= {TARGET_STEPS_PER_SECOND:,}); "
            f"{figures['steps_per_wall_second']:,.0f} steps/wall-s"
        )
        print(
            f"  step + reset, overall : {figures['overall_steps_per_cpu_second']:>9,.0f} "
            "steps/CPU-s"
        )
    print("target met" if all_met else "target MISSED")
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_instruments"))
