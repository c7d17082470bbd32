"""Seconds per optimiser step, split into rollout / credit / train, GRPO (G=8) vs HP-RLVR (G=1).

HP-RLVR (Chen et al. 2026) reports its cost against GRPO as the split of one step's time
into rollout generation, credit scoring and training; this script measures that split for
`smollm2-135m` with LoRA on SysDiag, at equal rollouts per step (GRPO: `tasks` tasks x 8;
HP-RLVR: 8 x `tasks` tasks x 1), and prints the ratios GRPO / HP-RLVR per phase.

    python -m creditgym.benchmarks.perf.bench_train            # smollm2-135m, 2 iterations each
    python -m creditgym.benchmarks.perf.bench_train --model tiny --iterations 1

Each method gets a freshly loaded model (LoRA is injected in place). The first
iteration includes one-off costs (worker start-up), so the table reports the mean over
all iterations and the last iteration separately.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state, timed
from creditgym.credit.base import CreditContext, CreditModule, build
from creditgym.credit.grpo import GRPO
from creditgym.credit.hp_rlvr import HPRLVR
from creditgym.models.registry import load_model
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)

PHASES = ("time/rollout_s", "time/credit_s", "time/train_s")
# Method label -> credit module class, the two settings the paper compares; each runs at
# its class's `default_group_size` (GRPO 8, HP-RLVR 1).
METHODS: dict[str, type[CreditModule]] = {"grpo (G=8)": GRPO, "hp_rlvr (G=1)": HPRLVR}


@dataclass(frozen=True)
class BenchArgs:
    """Options of the training-step benchmark."""

    model: str = "smollm2-135m"
    """Policy model name or path."""
    iterations: int = 2
    """Training iterations timed per method (one optimiser step each)."""
    tasks: int = 1
    """Tasks per step at G = 8 (HP-RLVR gets 8x as many tasks at G = 1)."""
    max_steps: int = 4
    """SysDiag step limit per episode."""
    constrained: bool = True
    """Constrained decoding (admissible commands only); False lets the model think first."""
    max_new_tokens: int = 48
    """Longest response per step, in tokens."""
    threads: int = 2
    """torch CPU threads."""
    device: str = "cpu"
    """Device of the policy."""


def time_method(config: BenchArgs, cls: type[CreditModule]) -> list[Mapping[str, float]]:
    """Train `config.iterations` iterations with LoRA; returns the metrics records."""
    loaded = load_model(config.model, device=config.device)
    credit = build(cls, CreditContext(policy=loaded))
    trainer_config = PolicyGradientConfig(
        steps=config.iterations,
        group_size=cls.default_group_size,
        tasks_per_step=config.tasks,
        batching="equal_rollouts",
        num_envs=8,
        finetune="lora",
        checkpoint_every=config.iterations,
    )
    agent = AgentConfig(constrained=config.constrained, max_new_tokens=config.max_new_tokens)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = PolicyGradientTrainer(
            loaded,
            credit,
            "creditgym/SysDiag-v0",
            {"max_steps": config.max_steps},
            agent,
            trainer_config,
            run_dir,
        )
        return trainer.train()


def main(config: BenchArgs) -> None:
    torch.set_num_threads(config.threads)
    print(machine_state())
    results: dict[str, dict[str, float]] = {}
    for label, cls in METHODS.items():
        records, watch = timed(time_method, config, cls)
        mean = {phase: float(np.mean([r[phase] for r in records])) for phase in PHASES}
        mean["total"] = sum(mean[phase] for phase in PHASES)
        mean["last_total"] = sum(records[-1][phase] for phase in PHASES)
        mean["rollouts"] = float(np.mean([r["rollout/num_trajectories"] for r in records]))
        mean["steps_per_rollout"] = float(np.mean([r["rollout/traj_length"] for r in records]))
        results[label] = mean
        print(f"{label}: {len(records)} optimiser steps in {watch.wall_s:.1f} s")

    print(
        f"\nseconds per optimiser step, {config.model} + LoRA on SysDiag "
        f"(max_steps={config.max_steps}, constrained={config.constrained}, "
        f"threads={config.threads}, device={config.device})"
    )
    header = f"{'method':<16}{'rollout':>10}{'credit':>10}{'train':>10}{'total':>10}"
    print(header + f"{'last':>10}{'rollouts':>10}{'len':>6}")
    for label, row in results.items():
        cells = "".join(f"{row[p]:>10.2f}" for p in (*PHASES, "total", "last_total"))
        print(f"{label:<16}{cells}{row['rollouts']:>10.0f}{row['steps_per_rollout']:>6.1f}")
    grpo, hp_rlvr = results["grpo (G=8)"], results["hp_rlvr (G=1)"]
    ratios = "  ".join(
        f"{name.split('/')[-1]} {grpo[name] / max(hp_rlvr[name], 1e-9):.2f}x"
        for name in (*PHASES, "total")
    )
    print(f"ratio GRPO / HP-RLVR: {ratios}")
    for label, row in results.items():
        share = row["time/rollout_s"] / max(row["total"], 1e-9)
        print(f"rollout share of step time, {label}: {100 * share:.1f} %")
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_train"))
