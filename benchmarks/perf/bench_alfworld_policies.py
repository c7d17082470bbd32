"""Step time of `creditgym/ALFWorld-v0` as a learning policy and the scripted expert see it.

A random policy stands in for a learning one: it leaves the walkthrough at once and keeps
exploring, and it plays with the env's defaults (`expert_plan` off, so no step replans).
The scripted expert plays with `EnvInfo.expert_kwargs` (`expert_plan=True`), as
`benchmarks.run --model expert` does, and reads `info["expert_action"]` every step.
Both play through `agents.episode.play_episode`, the runner's own loop; only `env.step`
is timed (wall clock and this process's CPU time, one torch thread). Reset (game load)
time is printed apart: the first load of a game translates its PDDL (`bench_alfworld`
times resets against alfworld's own env).

Usage: python -m creditgym.benchmarks.perf.bench_alfworld_policies [--data-dir DIR] [--games 6]
    [--rounds 2]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from creditgym import envs
from creditgym.agents.base import Agent, ExpertAgent, RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import Stopwatch, machine_state

ENV_ID = "creditgym/ALFWorld-v0"


@dataclass
class BenchArgs:
    """Time ALFWorld-v0 steps under a random policy and under the scripted expert."""

    data_dir: Path | None = None
    """Folder holding json_2.1.1/; unset: the games `benchmarks.run` plays (`$ALFWORLD_DATA`,
    else the generated default set). tests/data/alfworld holds 6 small train games."""
    games: int = 6
    """Train games played (the first N of the split, sorted by id)."""
    rounds: int = 2
    """Episodes per game per policy."""
    max_steps: int = 50
    """Step limit of an episode (50: the env's default, as in GiGPO / HCAPO)."""


class StepTimer(gym.Wrapper):
    """Times `step` alone (not reset), so game loading does not count as step time."""

    def __init__(self, env: gym.Env, watch: Stopwatch) -> None:
        super().__init__(env)
        self.watch = watch

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        with self.watch:
            return self.env.step(action)


def time_policy(
    args: BenchArgs, env_kwargs: dict[str, Any], make_agent: Callable[[int], Agent]
) -> tuple[Stopwatch, Stopwatch, float]:
    """(step watch, reset watch, success rate) of `make_agent(seed)` over the games."""
    steps, resets = Stopwatch(), Stopwatch()
    env = gym.make(
        ENV_ID,
        num_games=args.games,
        max_steps=args.max_steps,
        **env_kwargs,
    ).unwrapped
    timed_env = StepTimer(env, steps)
    wins = episodes = 0
    for game in env.games:
        for round_index in range(args.rounds):
            with resets:
                # Reset once outside the episode so the load is timed apart from steps;
                # play_episode's own reset of the same game is then a cached restart.
                env.reset(options={"task_id": game.task_id})
            trajectory = play_episode(
                timed_env, make_agent(round_index), seed=round_index,
                options={"task_id": game.task_id},
            )  # fmt: skip
            wins += trajectory.success
            episodes += 1
    return steps, resets, wins / episodes


def main(args: BenchArgs) -> None:
    torch.set_num_threads(1)
    print(machine_state())
    data = {} if args.data_dir is None else {"data_dir": str(args.data_dir)}
    policies = {
        "random policy (expert_plan off)": (data, lambda seed: RandomAgent(seed=seed)),
        "scripted expert (expert_plan on)": (
            {**data, **envs.ENVS[ENV_ID].expert_kwargs},
            lambda seed: ExpertAgent(),
        ),
    }
    played = envs.data_fingerprint(ENV_ID, data)
    assert played is not None  # ALFWorld-v0 declares its game set
    print(f"data: {args.data_dir or 'default'} {played.description}; {args.games} train games "
          f"x {args.rounds} rounds, T = {args.max_steps}, torch {torch.get_num_threads()} "
          "thread")  # fmt: skip
    for label, (env_kwargs, make_agent) in policies.items():
        steps, resets, success = time_policy(args, env_kwargs, make_agent)
        # CPU time beside wall time: on a loaded machine the wall figure grows, CPU less so.
        print(
            f"{label:34s} step {1e3 * steps.wall_s / steps.blocks:7.1f} ms wall "
            f"({1e3 * steps.cpu_s / steps.blocks:.1f} ms CPU) mean over {steps.blocks} steps; "
            f"reset {1e3 * resets.wall_s / resets.blocks:.0f} ms wall; "
            f"success {100 * success:.0f} %"
        )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_alfworld_policies"))
