"""Rollout throughput: generated tokens per second against batch size.

Plays the same `--tasks` SysDiag episodes with `agents.rollout.collect` at each batch
size (= parallel environments) and prints generated tokens per second of generation
(time inside `agent.act`) and per second of the whole rollout (wall clock, env workers
included), each with its ratio to batch size 1 (sequential generation). Sampling is
seeded per episode (`AgentInput.episode_key`), so every batch size generates the same
tokens and the ratios compare equal work. Target: >= 4x generation at batch 8 on CPU.

`--schedulers continuous lockstep` also times the round-by-round schedule (one
`agent.act` per round of ready envs, every row waiting for the round's longest
response) against the continuous batch `collect` uses for LLM agents
(`models.batching`), on the same episodes in the same run.

    python -m creditgym.benchmarks.perf.bench_rollout  # smollm2-135m, batch sizes 1 4 8 16
    python -m creditgym.benchmarks.perf.bench_rollout --model tiny --batch-sizes 1 8
    python -m creditgym.benchmarks.perf.bench_rollout --max-steps 6 --schedulers continuous lockstep
    python -m creditgym.benchmarks.perf.bench_rollout --device cuda --batch-sizes 1 8
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Literal

import torch

from creditgym.agents.base import AgentAction, AgentInput, ExpertAgent
from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state
from creditgym.envs import SHORT_NAMES
from creditgym.models.registry import ModelUnavailableError, load_model


class Lockstep:
    """An LLM agent without `stream()`, so `collect` drives it one round at a time."""

    def __init__(self, agent: LLMAgent) -> None:
        self.agent, self.name = agent, agent.name

    def act(self, inputs: list[AgentInput]) -> list[AgentAction]:
        return self.agent.act(inputs)


@dataclass(frozen=True)
class BenchArgs:
    """Time rollouts (generated tokens per second) against batch size."""

    model: str = "smollm2-135m"
    """Model name or path."""
    env: str = "sysdiag"
    """Env short name (see `envs.SHORT_NAMES`)."""
    batch_sizes: tuple[int, ...] = (1, 4, 8, 16)
    """Parallel environments, one measurement each."""
    tasks: int = 16
    """Episodes per batch size."""
    max_steps: int = 1
    """Env steps per episode."""
    max_new_tokens: int = 256
    """Response cap (the LLMAgent default)."""
    threads: int = 1
    """torch CPU threads."""
    schedulers: tuple[Literal["continuous", "lockstep"], ...] = ("continuous",)
    """How collect batches the LLM's steps (see the module docstring)."""
    device: str = "cpu"
    """Torch device of the policy (cpu, cuda)."""


def main(args: BenchArgs) -> None:
    if not args.batch_sizes or min(args.batch_sizes) < 1 or args.tasks < 1:
        raise SystemExit("error: batch sizes and --tasks must be >= 1")
    if args.env not in SHORT_NAMES:
        raise SystemExit(f"error: --env must be one of {', '.join(sorted(SHORT_NAMES))}")
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    try:
        loaded = load_model(args.model, device=args.device)
    except ModelUnavailableError as error:
        raise SystemExit(f"error: {error}") from None
    env_id = SHORT_NAMES[args.env]
    env_kwargs = {"max_steps": args.max_steps}
    # Start the env workers once (scripted agent) so no row pays their start-up.
    warm = max(args.batch_sizes)
    collect(
        env_id,
        ExpertAgent(),
        list(range(warm)),
        num_envs=warm,
        env_kwargs=env_kwargs,
        progress=False,
    )
    print(machine_state())
    print(
        f"model={args.model} env={env_id} tasks={args.tasks} max_steps={args.max_steps} "
        f"max_new_tokens={args.max_new_tokens} threads={args.threads} device={args.device}"
    )
    print(
        f"{'scheduler':<10} {'batch':>5} {'tokens':>7} {'gen s':>7} {'gen tok/s':>9} "
        f"{'gen ratio':>9} {'wall s':>7} {'wall tok/s':>10} {'wall ratio':>10}"
    )
    baselines: tuple[float, float] | None = None  # batch 1 = sequential generation
    for batch_size in args.batch_sizes:
        for scheduler in args.schedulers if batch_size > 1 else args.schedulers[:1]:
            agent = LLMAgent(loaded, max_new_tokens=args.max_new_tokens, seed=0)
            _, stats = collect(
                env_id,
                agent if scheduler == "continuous" else Lockstep(agent),
                seeds=list(range(args.tasks)),
                num_envs=batch_size,
                env_kwargs=env_kwargs,
                progress=False,
            )
            generation_rate = stats.tokens_generated / stats.agent_seconds
            wall_rate = stats.tokens_per_second
            if batch_size == 1:
                baselines = (generation_rate, wall_rate)
            ratios = (
                (f"{generation_rate / baselines[0]:8.2f}x", f"{wall_rate / baselines[1]:9.2f}x")
                if baselines
                else ("        -", "         -")
            )
            print(
                f"{scheduler if batch_size > 1 else 'sequential':<10} {batch_size:>5} "
                f"{stats.tokens_generated:>7} {stats.agent_seconds:>7.1f} "
                f"{generation_rate:>9.1f} {ratios[0]} {stats.seconds:>7.1f} {wall_rate:>10.1f} "
                f"{ratios[1]}",
                flush=True,
            )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_rollout"))
