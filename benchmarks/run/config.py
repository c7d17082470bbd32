"""The configuration of one run of `creditgym run`: `RunConfig`, its presets, and the
command line parsed into it (`parse_config`) and written back from it (`command_line`).

Each field is declared once here, with its type, default and a docstring that becomes
`--help`; the run identity (`benchmarks/run/identity.py`) reads the field list below to
decide which fields name a run folder. What the fields resolve to is the run's plan
(`benchmarks/run/plan.py`).
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from creditgym import credit
from creditgym.agents.rollout import EnvWorkers
from creditgym.agents.trajectory import DEFAULT_REWARD_CHANNEL, RewardChannel
from creditgym.benchmarks.cli import lookup, parse_arguments, prog_of
from creditgym.credit.base import DEFAULT_CONVENTION
from creditgym.credit.options import options_help
from creditgym.envs.registry import env_options_help
from creditgym.models.generation_cache import DEFAULT_GENERATION_CACHE_BYTES

# The first line of `creditgym run --help`.
DESCRIPTION = "Train one (env, credit, model) configuration and evaluate it: `creditgym run`."
# `--credit none` evaluates without training; `--trainer eval-only` skips training.
NO_CREDIT = "none"
EVAL_ONLY = "eval-only"


@dataclass(frozen=True)
class RunConfig:
    """Train one configuration (env x credit x model) and evaluate it."""

    env: str = "sysdiag"
    """Environment: a registered short name (`EnvInfo.short_name` in envs/__init__.py, e.g.
    sysdiag, keydoor) or id. SysDiag is the default: its episodes are fast enough for a CPU
    run."""
    # The help names every registered module, from the registry.
    credit: Annotated[
        str,
        tyro.conf.arg(
            help=f"Credit module ({', '.join(credit.REGISTRY)}, or package.module:Class); "
            "`none` evaluates the model or scripted agent without training."
        ),
    ] = "grpo"
    model: str = "smollm2-135m"
    """Policy: a model name (tiny, smollm2-135m), a Hugging Face id or local folder, or a
    scripted agent (expert, random)."""
    trainer: str = "policy_gradient"
    """Trainer used when --credit is not `none`; `eval-only` skips training."""
    group_size: int | None = None
    """Rollouts per task in one optimiser step (G); unset = the method's own choice: 1 for
    hp_rlvr (single rollout, its paper), 8 otherwise (GRPO / GiGPO / HCAPO papers)."""
    steps: int = 1
    """Optimiser steps (policy_gradient: iterations of rollout -> credit -> update;
    sft: rounds)."""
    tasks_per_step: int = 1
    """Tasks per training iteration at G = 8 (hp_rlvr at G = 1 gets 8x as many tasks, so
    every method uses the same number of rollouts)."""
    learning_rate: float | None = None
    """AdamW learning rate; unset: the trainer's own default (policy_gradient 1e-5 for
    LoRA / tiny, sft 1e-4)."""
    constrained: bool = True
    """Constrained decoding: the policy can only emit an admissible command (lets an
    untrained small model act validly from the first step)."""
    max_new_tokens: int = 48
    """Longest policy response per step, in tokens."""
    eval_episodes: int = 4
    """Evaluation episodes per split (the same tasks for every method and seed)."""
    split: str = "all"
    """Evaluation split: `all`, or one split of the env (ALFWorld: in_distribution,
    out_of_distribution; other envs: test)."""
    seed: int = 0
    """Seed of training and of the policy's sampling."""
    device: str = "cpu"
    """Torch device of the policy (cpu, cuda, cuda:1, mps)."""
    out: Path = Path("results/local/runs")
    """Folder that receives the run folder (git-ignored; the committed reference set in
    results/runs/ grows only when asked, with `--out results/runs`)."""
    preset: Literal["default", "paper", "demo"] = "default"
    """Starting values of the other options: `default` fits a 2-core CPU in < 15 min;
    `paper` is the GiGPO/HCAPO ALFWorld setup (G=8, 150 steps, 50-step episodes), for a GPU;
    `demo` is the fast regime `make demo` trains (`small` on KeyDoor, docs/small_model.md)."""
    max_episode_steps: int | None = None
    """Step limit T of an episode; unset: the env's own default, declared with its
    registration (`EnvInfo.max_episode_steps` in envs/__init__.py)."""
    eval_temperature: float = 0.4
    """Sampling temperature of the policy during evaluation (> 0; GiGPO validates at 0.4,
    a low temperature close to greedy)."""
    eval_batch_size: int = 8
    """Evaluation episodes played together in one batch by an LLM policy."""
    sample_group_size: int = 2
    """Rollouts of one task kept as sample trajectories with every module's credit."""
    name: str | None = None
    """Run folder name; derived from the configuration when unset (so reruns resume)."""
    faults: tuple[str, ...] = ()
    """Task families to train and evaluate on, for an env that has them
    (`EnvInfo.task_families`: SysDiag's ten fault families; empty: all); e.g.
    `--faults memory_leak --max-episode-steps 1` is the one-step task of the reference
    learning slice (benchmarks/configs/reference_cpu.toml)."""
    # The help lists every option of every registered env, from its options class.
    env_options: Annotated[
        tuple[str, ...],
        tyro.conf.arg(
            metavar="KEY=VALUE [KEY=VALUE ...]",
            help=env_options_help(),
            help_behavior_hint="(default: none named)",
        ),
    ] = ()
    history_len: int | None = None
    """(observation, action) pairs in the policy's prompt; unset: 0 on an env whose
    observations are Markov (`EnvInfo.markov`: KeyDoor, Umbrella), else 2 (GiGPO's K). The
    hindsight credit modules rebuild prompts with the same K."""
    generation_cache_gib: float = DEFAULT_GENERATION_CACHE_BYTES / 2**30
    """hcapo / hp_rlvr: most GiB of prompt keys / values and response hidden states kept
    from each training rollout for the hindsight scoring (models/generation_cache.py), on
    the policy's device: a bound, not an allocation (the users' ALFWorld command keeps
    ~6.4 GB), and never past a quarter of the device's memory left free; steps beyond it
    are recomputed (slower, same credit); 0 disables."""
    credit_convention: str = DEFAULT_CONVENTION
    """How grpo / gigpo compute their group statistics: creditgym's own way (default) or a
    peer's, to reproduce its numbers: trl, verl, verl-agent (gigpo: creditgym, verl-agent).
    docs/conventions.md has the table."""
    # The help lists every option of every registered module, from its `Options` class.
    credit_options: Annotated[
        tuple[str, ...],
        tyro.conf.arg(
            metavar="KEY=VALUE [KEY=VALUE ...]",
            help=options_help(credit.REGISTRY),
            help_behavior_hint="(default: none named)",
        ),
    ] = ()
    reward_channel: RewardChannel = DEFAULT_REWARD_CHANNEL
    """The signal credit and training see (agents/trajectory.py, docs/credit.md): `return`,
    the env's reward at every step (KeyDoor: apples and door); `outcome`, 0 at every step
    and the env's verifiable verdict (1 / 0) at the last. Modules that need a verdict read
    it off this channel. Evaluation reports the env's own success and return either way."""
    eval_every: int = 0
    """Learning curve: evaluate the policy every this many training iterations (and before
    the first, and after the last) on the first `--curve-episodes` evaluation tasks at
    `--eval-temperature`, into curve.jsonl (trainers/curve.py); 0: no curve."""
    curve_episodes: int = 32
    """Held-out tasks of each learning-curve point (with `--eval-every`)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16", "fast"] = "auto"
    """Weight dtype of the policy; auto: float32 on a CPU (exact log-prob bookkeeping, fast
    CPU matmuls), bfloat16 on CUDA (what GPU training uses); fast: on a CPU whose
    processor has AMX or AVX-512 BF16, a LoRA-trained policy's decoder products in
    bfloat16 (models/precision.py; named `bfloat16-products` in the run identity),
    float32 elsewhere (the same run as float32), bfloat16 on CUDA."""
    threads: int = 1
    """torch CPU threads of the run. 1 by default: on a shared 2-core machine a second
    OpenMP thread spin-waits for a core another process holds (one `small` iteration took
    46 s instead of ~3 s, docs/small_model.md); raise it on an idle many-core machine.
    Speed only, not part of the run name."""
    env_workers: EnvWorkers = "auto"
    """What runs each rollout env (training and evaluation): a worker process, this
    process (`inline`: pure in-memory envs), or a Ray actor on the Ray cluster `ray.init()`
    joins (RAY_ADDRESS, else a local Ray); the same episodes either way, so not part of the
    run name. auto: inline for KeyDoor and Umbrella (registered `in_process`), else a
    process."""
    update_distinct_rows: bool = False
    """policy_gradient: run each distinct step row of an update once (the same prompt,
    action and admissible commands: a finite MDP's states recur, ~2-2.5x fewer rows on
    KeyDoor delay 4), its activations carrying the summed gradient of every step that
    repeats it (`PolicyGradientConfig.distinct_rows`). The same update up to float
    rounding, summed in another order: such runs are named apart from the others."""
    population: int = 1
    """Train the seeds `seed`, `seed + 1`, ..., `seed + population - 1` of this
    configuration in one process (benchmarks/run/population.py): one start-up, and each
    seed's run folder the same as its single run's (its provenance.json names the
    population); 1: the single run of `seed`. Not part of the run name."""


# Iterations of the demo preset: enough for `small` to learn KeyDoor's key at delay 8.
DEMO_STEPS = 20
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    # GiGPO (arXiv 2505.10978) Table 1 / HCAPO (arXiv 2603.08754) setup: G = 8, 150 iterations,
    # 50-step episodes, validation temperature 0.4.
    "paper": {
        "steps": 150,
        "tasks_per_step": 16,
        "learning_rate": 1e-6,
        "max_new_tokens": 512,
        "constrained": False,
        "eval_episodes": 128,
        "max_episode_steps": 50,
        "eval_temperature": 0.4,
        "eval_batch_size": 32,
    },
    # `make demo`: the fast regime (docs/small_model.md). `small` learns to take the key on
    # KeyDoor (default delay 8, history-free prompts since the env is Markov) with GRPO at
    # 32 rollouts per iteration; evaluated on 64 held-out tasks.
    "demo": {
        "env": "keydoor",
        "model": "small",
        "credit": "grpo",
        "steps": DEMO_STEPS,
        "tasks_per_step": 4,
        "learning_rate": 3e-3,
        "max_new_tokens": 8,
        "eval_episodes": 64,
        "eval_batch_size": 32,
    },
}

# Prompt history K on an env whose observations are not Markov: GiGPO's K (arXiv 2505.10978).
NON_MARKOV_HISTORY_LEN = 2

# Fields that do not change what a run computes, left out of the run name's hash: a
# rerun with more evaluation episodes, another split or device extends the same run.
NON_IDENTITY_FIELDS = frozenset(
    {
        "eval_episodes",
        "split",
        "device",
        "out",
        "preset",
        "eval_batch_size",
        "sample_group_size",
        "name",
        "generation_cache_gib",  # speed only: cached or recomputed, the same credit
        "env_workers",  # where the envs run, not what they play
        "threads",  # speed only
        "population",  # which process trains a seed, not what the seed computes
    }
)


def parse_config(argv: Sequence[str] | None = None) -> RunConfig:
    """Parse the command line; `--preset` picks the defaults the other options start from."""
    args = list(sys.argv[1:] if argv is None else argv)
    preset = "default"
    for position, arg in enumerate(args):
        if arg == "--preset" and position + 1 < len(args):
            preset = args[position + 1]
        elif arg.startswith("--preset="):
            preset = arg.split("=", 1)[1]
    overrides = lookup("preset", preset, PRESETS)
    default = dataclasses.replace(RunConfig(), preset=preset, **overrides)
    return parse_arguments(
        RunConfig, args, prog_of("run"), default=default, description=DESCRIPTION
    )


def command_line(cfg: RunConfig) -> str:
    """The `creditgym run` command that replays `cfg` (options off their defaults only),
    the same whether the run came from the shell or from a sweep."""
    words = ["creditgym", "run"]
    for spec in dataclasses.fields(RunConfig):
        value = getattr(cfg, spec.name)
        if value == spec.default:
            continue
        flag = "--" + spec.name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, tuple):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return shlex.join(words)
