"""SysDiag throughput on one core: environment steps per second (target >= 20,000).

Plays uniformly random admissible commands (the mix an exploring policy sends: read-only
diagnostics, kills, restarts, reboots) over seeded episodes of every fault family, and
times `env.step` alone, `env.reset` alone, and both together. The process is pinned to
one core; rates are given per CPU-second of this process (what one core delivers, and
stable when other jobs share the machine) and per wall-clock second. Also prints the
scripted expert's and the random agent's success over seeds 0-199 (the figures in
docs/environments.md).

    .venv/bin/python -m creditgym.benchmarks.perf.bench_sysdiag [--steps 200000]
"""

from __future__ import annotations

import os
import sys
import time
import timeit
from dataclasses import dataclass

from creditgym.agents.base import Agent, ExpertAgent, RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state, random_play_rates
from creditgym.envs.sysdiag.env import SysDiagEnv

TARGET_STEPS_PER_SECOND = 20_000


@dataclass(frozen=True)
class BenchArgs:
    """Time SysDiag-v0's step and reset under random admissible commands."""

    steps: int = 200_000
    """Env steps to time."""


def reference_microseconds() -> float:
    """CPU time of `sum(range(10_000))` in microseconds (best of 5): a yardstick for how
    fast this core is right now (about 100-150 us on an idle modern desktop core), to
    read the rates above on a shared or slow machine."""
    timer = timeit.Timer("sum(range(10_000))", timer=time.process_time)
    return min(timer.repeat(repeat=5, number=200)) / 200 * 1e6


def success_and_return(agent: Agent, seeds: range) -> tuple[int, float]:
    """(episodes solved, mean return) of `agent` over `seeds`."""
    env = SysDiagEnv()
    trajectories = [play_episode(env, agent, seed=seed) for seed in seeds]
    solved = sum(t.success for t in trajectories)
    return solved, sum(t.total_return for t in trajectories) / len(trajectories)


def main(args: BenchArgs) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as specified
    print(machine_state())
    figures = random_play_rates(SysDiagEnv(), args.steps)
    print(
        f"SysDiag-v0, random admissible commands, {figures['steps']} steps over "
        f"{figures['episodes']} episodes, one core"
    )
    print(
        f"  env.step only         : {figures['steps_per_cpu_second']:>9,.0f} steps/CPU-s "
        f"(target >= {TARGET_STEPS_PER_SECOND:,}); "
        f"{figures['steps_per_wall_second']:,.0f} steps/wall-s"
    )
    print(f"  env.reset only        : {figures['resets_per_cpu_second']:>9,.0f} resets/CPU-s")
    print(f"  step + reset, overall : {figures['overall_steps_per_cpu_second']:>9,.0f} steps/CPU-s")
    print(f"  core yardstick        : sum(range(10_000)) takes {reference_microseconds():.0f} us")
    met = figures["steps_per_cpu_second"] >= TARGET_STEPS_PER_SECOND
    print("  target met" if met else "  target MISSED")
    seeds = range(200)
    for agent in (ExpertAgent(), RandomAgent(seed=0)):
        solved, mean_return = success_and_return(agent, seeds)
        print(
            f"  {agent.name:<6} agent, seeds 0-199: solved {solved}/{len(seeds)}, "
            f"mean return {mean_return:.3f}"
        )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_sysdiag"))
