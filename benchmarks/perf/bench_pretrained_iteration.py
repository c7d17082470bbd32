"""Seconds and peak memory of a pretrained policy's GRPO iteration: the old path and the new.

One iteration of `PolicyGradientTrainer` (GRPO, G = 8 over 4 tasks: 32 rollouts) with
smollm2-135m + LoRA on KeyDoor (delay 4, high variance), the settings of
`creditgym run --env keydoor --env-options delay=4 variance=high --model
smollm2-135m --credit grpo --tasks-per-step 4` (constrained decoding, no history on a
Markov env), once per path, each path in a fresh process (peak resident memory only
grows within a process), one after the other in the same run so that both see the same
machine load:

- old: float32 throughout, every step's prompt run in full by the rollout and the update,
  the update's tensors on glibc's heap, activations recomputed in backward over
  4,096-token micro-batches (what "auto" chose for them before it measured what a model
  keeps);
- new: bfloat16 products where this CPU has them natively (`models.precision`, AMX or
  AVX-512 BF16; float32 elsewhere), the prompt prefix steps share run once: per
  micro-batch in the update (`PolicyGradientConfig.shared_prefix`, `models.logprobs`;
  the steps after it in groups of like length, not all padded to the longest), per
  prefix in the rollout's prefill (`models.batching`), and the update's large
  tensors mapped (`trainers.host_memory`), the gated MLP fused (`models.precision`), and
  "auto" activation checkpointing: micro-batches cut to keep at most 1 GiB of
  activations, so a KeyDoor trajectory keeps its activations instead of recomputing them
  (`trainers.activation_checkpointing`).

Prints the processor's features, each path's rollout and update seconds, step rows,
peak RSS (at the end of the first rollout and overall, to tell which phase sets it),
gradient norm and clip fraction (0 on the first epoch when the ratio is 1 within the
clip range), and the new / old ratios.

    python -m creditgym.benchmarks.perf.bench_pretrained_iteration  # 1 thread
    python -m creditgym.benchmarks.perf.bench_pretrained_iteration --threads 2  # on an idle machine
"""

from __future__ import annotations

import multiprocessing
import resource
import sys
import tempfile
from dataclasses import dataclass
from typing import Literal

import torch

from creditgym import envs
from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state, rss_mb
from creditgym.credit.grpo import GRPO
from creditgym.models.precision import cpu_features, native_bfloat16, use_bfloat16_matmuls
from creditgym.models.registry import load_model
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)

ENV_ID = "creditgym/KeyDoor-v0"
PATHS = ("old", "new")


@dataclass(frozen=True)
class BenchArgs:
    """Options of the pretrained-iteration benchmark."""

    model: str = "smollm2-135m"
    """Policy model name or path (LoRA)."""
    env_options: tuple[str, ...] = ("delay=4", "variance=high")
    """KeyDoor's options as key=value (envs/keydoor/options.py)."""
    tasks: int = 4
    """Tasks per iteration; rollouts = tasks x group_size."""
    group_size: int = 8
    """Rollouts per task (GRPO's G)."""
    iterations: int = 1
    """Iterations per path; the table gives their mean."""
    threads: int = 1
    """torch CPU threads of each path's process; 1 by default: beside another job on the
    2-core machine, 2 threads made the rollout about 3x slower (a spin-waiting thread)."""
    seed: int = 0
    """Seeds tasks and sampling (the same for both paths)."""
    paths: tuple[Literal["old", "new"], ...] = PATHS
    """Which paths to run (`old`, `new`); the ratios need both."""
    micro_batch_tokens: int | None = None
    """The new path's `PolicyGradientConfig.micro_batch_tokens` (None: its default)."""
    activation_checkpointing: bool | None = None
    """The new path's `PolicyGradientConfig.activation_checkpointing` (None: auto)."""


def peak_mb() -> float:
    """This process's peak resident memory so far, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def new_path_settings(config: BenchArgs) -> dict:
    """The trainer settings `config` overrides for the new path."""
    settings = {"activation_checkpointing": config.activation_checkpointing}
    if config.micro_batch_tokens is not None:
        settings["micro_batch_tokens"] = config.micro_batch_tokens
    return settings


def measure(config: BenchArgs, path: str, results: dict) -> None:
    """`config.iterations` training iterations of one path in this (child) process."""
    torch.set_num_threads(config.threads)
    loaded = load_model(config.model)
    bfloat16 = path == "new" and native_bfloat16()
    if bfloat16:
        use_bfloat16_matmuls(loaded.model)
    trainer_config = PolicyGradientConfig(
        steps=config.iterations,
        group_size=config.group_size,
        tasks_per_step=config.tasks,
        seed=config.seed,
        checkpoint_every=config.iterations,
        shared_prefix=path == "new",
        map_large_tensors=path == "new",
        **(new_path_settings(config) if path == "new" else {"activation_checkpointing": True}),
        finetune="lora",
    )
    agent = AgentConfig(constrained=True, history_len=0)
    env_kwargs = envs.parse_env_options(ENV_ID, config.env_options).kwargs()
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = PolicyGradientTrainer(
            loaded, GRPO(), ENV_ID, env_kwargs, agent, trainer_config, run_dir
        )
        before = rss_mb()
        rollout_peaks = []
        rollout_and_credit = trainer.rollout_and_credit

        def rollout_then_peak():  # the peak so far once each rollout (and credit) ends
            phase = rollout_and_credit()
            rollout_peaks.append(peak_mb())
            return phase

        trainer.rollout_and_credit = rollout_then_peak
        records = trainer.train()

    def mean(name: str) -> float:
        return sum(record[name] for record in records) / len(records)

    results[path] = {
        "precision": "bfloat16 products" if bfloat16 else "float32",
        "rollout_s": mean("time/rollout_s"),
        "train_s": mean("time/train_s"),
        "steps": mean("rollout/traj_length") * mean("rollout/num_trajectories"),
        "before_mb": before,
        "rollout_peak_mb": rollout_peaks[0],
        "peak_mb": peak_mb(),
        "grad_norm": mean("charts/grad_norm"),
        "clip_frac": mean("charts/clip_frac"),
    }


def main(config: BenchArgs) -> None:
    print(machine_state())
    print(
        f"processor features: {cpu_features()}; bfloat16 products "
        f"{'native: the new path uses them' if native_bfloat16() else 'not native: float32'}"
    )
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        results = manager.dict()
        for path in config.paths:
            child = context.Process(target=measure, args=(config, path, results))
            child.start()
            child.join()
            if child.exitcode != 0:
                print(f"{path}: the run died (exit code {child.exitcode})")
        results = dict(results)
    if config.micro_batch_tokens is not None or config.activation_checkpointing is not None:
        print(f"new path overrides: {new_path_settings(config)}")
    print(
        f"\none GRPO iteration, {config.model} + LoRA on KeyDoor "
        f"{' '.join(config.env_options)}: {config.tasks} tasks x G = {config.group_size}, "
        f"threads={config.threads}, mean of {config.iterations}"
    )
    print(
        f"{'path':<5}{'precision':>19}{'steps':>7}{'rollout s':>11}{'update s':>10}"
        f"{'total s':>9}{'RSS before':>12}{'peak: rollout':>15}{'peak':>9}{'grad norm':>11}"
        f"{'clip':>7}"
    )
    for path in PATHS:
        if path not in results:
            continue
        row = results[path]
        print(
            f"{path:<5}{row['precision']:>19}{row['steps']:>7.0f}{row['rollout_s']:>11.1f}"
            f"{row['train_s']:>10.1f}{row['rollout_s'] + row['train_s']:>9.1f}"
            f"{row['before_mb']:>9.0f} MB{row['rollout_peak_mb']:>12.0f} MB"
            f"{row['peak_mb']:>6.0f} MB{row['grad_norm']:>11.4f}"
            f"{row['clip_frac']:>7.3f}"
        )
    if len(results) == 2:
        old, new = results["old"], results["new"]
        print(
            f"old / new: rollout {old['rollout_s'] / new['rollout_s']:.2f}x, update "
            f"{old['train_s'] / new['train_s']:.2f}x, iteration "
            f"{(old['rollout_s'] + old['train_s']) / (new['rollout_s'] + new['train_s']):.2f}x "
            f"faster; peak RSS {new['peak_mb']:.0f} MB against {old['peak_mb']:.0f} MB"
        )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_pretrained_iteration"))
