"""Hindsight scoring against generation on the users' ALFWorld command, side by side.

`creditgym run --env alfworld --credit hp_rlvr` trains smollm2-135m for one
iteration of 8 single rollouts (about 400 steps: episodes of up to 50), and HP-RLVR
(Chen et al. 2026) re-scores every step twice by teacher forcing (`models.scoring`). The
target (docs/performance.md): hindsight scoring at most 0.5 x the rollout's generation
time of the same batch on a CPU (HCAPO, arXiv 2603.08754, reports its hindsight pass at
about 8.3 % of an iteration on GPUs).

This script plays exactly that command's first iteration -- rollout, then credit, no
update -- once per generation-cache budget (`--generation-cache-gib` of the run; the
scoring reuses what generation kept, `models.generation_cache`), each budget in a fresh
process (peak resident memory only grows within a process), one after the other so that
every budget sees the same machine. The rollouts are the same in every process (the
run's seeds, the same arithmetic), so only the scoring differs. Prints the processor's
features; per budget, the rollout and credit seconds and their ratio, what the cache
kept and refused, how many scoring views it served, and the peak RSS after the credit.

    python -m creditgym.benchmarks.perf.bench_alfworld_hindsight           # 2 and 8 GiB
    python -m creditgym.benchmarks.perf.bench_alfworld_hindsight --budgets-gib 0 2 8
    python -m creditgym.benchmarks.perf.bench_alfworld_hindsight \\
        --run-args='--env alfworld --credit hcapo'
"""

from __future__ import annotations

import multiprocessing
import resource
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.common import describe_precision
from creditgym.benchmarks.perf.timing import machine_state
from creditgym.benchmarks.run import parse_config, resolve
from creditgym.benchmarks.run.build import load_run_policy
from creditgym.benchmarks.run.train import build_trainer
from creditgym.models.precision import cpu_features

USERS_COMMAND = "--env alfworld --credit hp_rlvr"


@dataclass(frozen=True)
class BenchArgs:
    """Options of the ALFWorld hindsight-scoring benchmark."""

    budgets_gib: tuple[float, ...] = (2.0, 8.0)
    """Generation-cache budgets to compare (GiB; 0: nothing kept, everything recomputed);
    2 is the run's default (`--generation-cache-gib`)."""
    run_args: str = USERS_COMMAND
    """The `benchmarks.run` arguments whose first iteration is played, as one string (the
    users' command by default); `--generation-cache-gib` is set per budget."""


def peak_mb() -> float:
    """This process's peak resident memory so far, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(run_args: str, budget_gib: float, results: dict) -> None:
    """Rollout and credit of the run's first iteration, in this (child) process."""
    plan = resolve(
        parse_config([*shlex.split(run_args), "--generation-cache-gib", str(budget_gib)])
    )
    cfg = plan.config
    torch.set_num_threads(cfg.threads)
    policy = load_run_policy(cfg.model, cfg.device, plan.dtype)
    # A fresh folder: the trainer finds no checkpoint to resume from.
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = build_trainer(plan, Path(run_dir), policy)
        phase = trainer.rollout_and_credit()
    metrics = phase.metrics
    results[budget_gib] = {
        "precision": describe_precision(plan.dtype),
        "model": cfg.model,
        "threads": cfg.threads,
        "steps": metrics["rollout/traj_length"] * metrics["rollout/num_trajectories"],
        "rollouts": metrics["rollout/num_trajectories"],
        "rollout_s": metrics["time/rollout_s"],
        "credit_s": metrics["time/credit_s"],
        "tokens_per_s": metrics["rollout/tokens_per_s"],
        "cache": {k[len("cache/") :]: v for k, v in metrics.items() if k.startswith("cache/")},
        "peak_mb": peak_mb(),
    }


def main(args: BenchArgs) -> None:
    print(machine_state())
    print(f"processor features: {cpu_features()}")
    print(f"command: creditgym run {args.run_args} (first iteration)")
    # The env's outside data (ALFWorld's generated games on first use), made here as
    # `benchmarks.run` makes it before its env workers start, so that no budget's process
    # times the generation.
    resolve(parse_config(shlex.split(args.run_args)))
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        results = manager.dict()
        for budget in args.budgets_gib:
            child = context.Process(target=measure, args=(args.run_args, budget, results))
            child.start()
            child.join()
            if child.exitcode != 0:
                print(f"budget {budget:g} GiB: the run died (exit code {child.exitcode})")
        results = dict(results)
    if not results:
        return
    first = next(iter(results.values()))
    print(
        f"\n{first['model']}, {first['precision']}, {first['threads']} torch thread(s); "
        f"{first['rollouts']:.0f} rollouts, {first['steps']:.0f} steps"
    )
    print(
        f"{'cache GiB':>9}{'steps':>7}{'rollout s':>11}{'credit s':>10}{'credit/rollout':>16}"
        f"{'kept':>6}{'refused':>9}{'prompt hits':>13}{'reused tokens':>15}"
        f"{'response hits':>15}{'peak RSS':>11}"
    )
    for budget, row in results.items():
        cache = row["cache"]
        print(
            f"{budget:>9g}{row['steps']:>7.0f}{row['rollout_s']:>11.1f}{row['credit_s']:>10.1f}"
            f"{row['credit_s'] / row['rollout_s']:>16.3f}"
            f"{cache.get('prompts_stored', 0):>6.0f}{cache.get('refused', 0):>9.0f}"
            f"{cache.get('prompt_hits', 0):>13.0f}{cache.get('reused_tokens', 0):>15.0f}"
            f"{cache.get('response_hits', 0):>15.0f}{row['peak_mb']:>8.0f} MB"
        )
    print(
        "credit/rollout: the credit call's seconds (views built and scored) over the "
        "rollout's (target <= 0.5);\nkept / refused: prompts the cache stored / entries "
        "over its budget; prompt hits: scoring views that loaded a kept prompt prefix"
    )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_alfworld_hindsight"))
