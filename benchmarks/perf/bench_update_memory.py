"""Peak memory and time of one policy update, with and without activation checkpointing.

Each setting runs in a fresh process (peak resident memory only grows within a
process): load the policy, one training iteration of `PolicyGradientTrainer` with LoRA
on SysDiag (the same seed, so the same rollouts and the same update work), then report
the process's peak resident set size, its resident size before training, the update's
seconds and the gradient norm. Rule-based credit gives every step a non-zero advantage,
so the gradient norms of the two settings must agree: checkpointing recomputes
activations, it does not change the gradient (`trainers/activation_checkpointing.py`).

    python -m creditgym.benchmarks.perf.bench_update_memory       # smollm2-135m, 4 rollouts
    python -m creditgym.benchmarks.perf.bench_update_memory --model tiny --group-size 2
"""

from __future__ import annotations

import multiprocessing
import resource
import sys
import tempfile
from dataclasses import dataclass

import torch

from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state, rss_mb
from creditgym.credit.rule_based import RuleBased
from creditgym.models.registry import load_model
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)


@dataclass(frozen=True)
class BenchArgs:
    """Options of the update-memory benchmark."""

    model: str = "smollm2-135m"
    """Policy model name or path (LoRA for pretrained models, full fine-tuning for tiny)."""
    group_size: int = 4
    """Rollouts of the one task (one trajectory per micro-batch, the trainer default)."""
    max_steps: int = 5
    """SysDiag step limit per episode (the `benchmarks.run` default)."""
    max_new_tokens: int = 48
    """Longest response per step (constrained decoding)."""
    threads: int = 1
    """torch CPU threads."""


def measure(config: BenchArgs, checkpointing: bool, results: dict) -> None:
    """One training iteration in this (child) process; fills `results[checkpointing]`."""
    torch.set_num_threads(config.threads)
    loaded = load_model(config.model)
    trainer_config = PolicyGradientConfig(
        steps=1,
        group_size=config.group_size,
        tasks_per_step=1,
        batching="equal_tasks",  # one task, `group_size` rollouts
        num_envs=config.group_size,
        activation_checkpointing=checkpointing,
        seed=0,
    )
    agent = AgentConfig(constrained=True, max_new_tokens=config.max_new_tokens)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = PolicyGradientTrainer(
            loaded,
            RuleBased(),
            "creditgym/SysDiag-v0",
            {"max_steps": config.max_steps},
            agent,
            trainer_config,
            run_dir,
        )
        before = rss_mb()
        record = trainer.train()[0]
    results[checkpointing] = {
        "before_mb": before,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "train_s": record["time/train_s"],
        "grad_norm": record["charts/grad_norm"],
        "tokens": record["charts/action_tokens"],
        "steps": record["rollout/traj_length"] * config.group_size,
    }


def main(config: BenchArgs) -> None:
    print(machine_state())
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        results = manager.dict()
        for checkpointing in (True, False):
            child = context.Process(target=measure, args=(config, checkpointing, results))
            child.start()
            child.join()
            if child.exitcode != 0:
                print(f"checkpointing={checkpointing}: the run died (exit code {child.exitcode})")
        results = dict(results)
    print(
        f"\none policy update, {config.model} on SysDiag: {config.group_size} rollouts, "
        f"one per micro-batch, threads={config.threads}"
    )
    print(
        f"{'checkpointing':<14}{'steps':>6}{'RSS before':>12}{'peak RSS':>10}{'train s':>9}"
        f"{'grad norm':>12}"
    )
    for checkpointing, row in results.items():
        print(
            f"{checkpointing!s:<14}{row['steps']:>6.0f}{row['before_mb']:>9.0f} MB"
            f"{row['peak_mb']:>7.0f} MB{row['train_s']:>9.1f}{row['grad_norm']:>12.6f}"
        )
    if len(results) == 2:
        on, off = results[True], results[False]
        growth = (off["peak_mb"] - off["before_mb"]) / max(on["peak_mb"] - on["before_mb"], 1)
        print(
            f"without / with checkpointing: peak RSS above the pre-training level "
            f"{growth:.1f}x, "
            f"update time {off['train_s'] / on['train_s']:.2f}x; grad norms differ by "
            f"{abs(on['grad_norm'] - off['grad_norm']):.2e}"
        )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_update_memory"))
