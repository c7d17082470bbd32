"""A run's plan: what a `RunConfig` resolves to, resolved once (`resolve`) and then read,
never re-parsed, by the run's identity, its checks, training, evaluation, the samples and
the population engine.

Where the options leave a value unset (group size, step limit, prompt history, dtype) or
name it in text (the env, its options, the credit module's options, the evaluation
split), the value the run plays with is decided here, so that an option left unset and
one spelled out at the value it resolves to are the same run, and each text is parsed
once. The plan names its run folder by the rule of `benchmarks/run/identity.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditgym import envs
from creditgym.benchmarks import common
from creditgym.benchmarks.cli import UsageError, lookup
from creditgym.benchmarks.run.build import credit_class, credit_names, make_env
from creditgym.benchmarks.run.config import (
    EVAL_ONLY,
    NO_CREDIT,
    NON_MARKOV_HISTORY_LEN,
    RunConfig,
)
from creditgym.benchmarks.run.identity import run_identity, run_name
from creditgym.credit.base import DEFAULT_GROUP_SIZE
from creditgym.credit.options import canonical_texts, parse_options, split_option
from creditgym.envs.registry import DataFingerprint, EnvInfo, EvalSplit

# Evaluation seeds start far above any training seed so that evaluation tasks are never
# training tasks where the env draws tasks from the seed (SysDiag, CodeExec).
EVAL_SEED_BASE = 1_000_000


def episode_agent_seed(run_seed: int, split: str, index: int) -> int:
    """A per-episode agent seed, stable across restarts (resume replays the same episode)."""
    digest = hashlib.sha256(f"{run_seed}/{split}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


@dataclass(frozen=True)
class RunPlan:
    """One run (or population of runs) resolved: built by `resolve` alone."""

    config: RunConfig
    """The options as given, the env and credit options in their one spelling
    (`EnvOptions.canonical`, `canonical_texts`): what config.json, commands.txt and the
    study's row names show."""
    env_id: str
    """The registered id --env names (`creditgym/KeyDoor-v0`)."""
    env: EnvInfo
    """The env's own facts (envs/__init__.py): splits, defaults, task families."""
    env_options: envs.EnvOptions
    """--env-options parsed into the env's options class (`EnvInfo.options`)."""
    step_limit: int
    """The episode step limit T: --max-episode-steps, else the env's default for its
    options (KeyDoor's grows with `delay`, Umbrella's is its `length`)."""
    group_size: int
    """Rollouts per task G: --group-size, else the credit module's `default_group_size`."""
    history_len: int
    """(observation, action) pairs K in the prompt: --history-len, else 0 on a Markov env,
    else 2."""
    dtype: str
    """The policy's precision, `auto` and `fast` resolved by the device, the processor and
    the model (`benchmarks.common.resolve_dtype`)."""
    credit_options: Any
    """--credit-options parsed into the module's `Options`; None: its defaults (or no
    credit module)."""
    game_set: DataFingerprint | None
    """The outside data the run plays (`EnvInfo.data_fingerprint`), None without such data."""
    splits: tuple[EvalSplit, ...]
    """The evaluation splits --split asks for, in the env's order."""
    seeds: tuple[int, ...]
    """The seeds this process trains: seed, seed + 1, ..., seed + population - 1."""
    trains: bool
    """Whether the run trains (a credit module, and a trainer other than eval-only)."""

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """Every result-deciding value, as JSON values (`identity.run_identity`)."""
        return run_identity(self)

    @functools.cached_property
    def name(self) -> str:
        """The run folder's name: --name, else derived from the identity (`identity.run_name`)."""
        return run_name(self)

    @property
    def run_dir(self) -> Path:
        return self.config.out / self.name

    def env_kwargs(self, split: EvalSplit | None = None) -> dict[str, Any]:
        """The env's constructor kwargs for `split` (None: training): the split's or the
        env's training kwargs, the env options, the step limit, the expert's hints for the
        expert agent, and the chosen task families."""
        kwargs = dict(split.env_kwargs) if split else dict(self.env.train_kwargs)
        kwargs.update(self.env_options.kwargs())
        kwargs["max_steps"] = self.step_limit
        if self.config.model == "expert":  # the one agent that reads `expert_action`
            kwargs.update(self.env.expert_kwargs)
        families = self.env.task_families
        if self.config.faults and families is not None:
            kwargs[families.kwarg] = list(self.config.faults)
        return kwargs


def resolve(cfg: RunConfig) -> RunPlan:
    """The plan of `cfg`: every name looked up and every text parsed, once; a bad name or
    value is one UsageError line. The one place a `RunConfig` becomes a `RunPlan`."""
    env_id = common.env_id(cfg.env)
    env = envs.ENVS[env_id]
    splits = eval_splits(cfg.split, env_id, env)
    played = game_set(env_id, env)  # a wrong data folder (ALFWORLD_DATA) fails here
    if ":" not in cfg.credit:  # a registered name (or `none`): close matches suggested
        lookup("credit module", cfg.credit, credit_names())
    credit_options = parse_credit_options(cfg.credit, cfg.credit_options)
    env_options = common.env_options(env_id, cfg.env_options)
    canonical = () if credit_options is None else canonical_texts(credit_options)
    return RunPlan(
        config=dataclasses.replace(
            cfg, credit_options=canonical, env_options=env_options.canonical()
        ),
        env_id=env_id,
        env=env,
        env_options=env_options,
        step_limit=step_limit(cfg.max_episode_steps, env_id, env, env_options),
        group_size=group_size(cfg.group_size, cfg.credit),
        history_len=prompt_history(cfg.history_len, env),
        dtype=common.resolve_dtype(cfg.dtype, cfg.device, cfg.model),
        credit_options=credit_options,
        game_set=played,
        splits=splits,
        seeds=tuple(range(cfg.seed, cfg.seed + cfg.population)),
        trains=cfg.credit != NO_CREDIT and cfg.trainer != EVAL_ONLY,
    )


def eval_splits(split: str, env_id: str, env: EnvInfo) -> tuple[EvalSplit, ...]:
    """--split: `all` of the env's evaluation splits, or the one it names."""
    if split == "all":
        return env.eval_splits
    return (lookup(f"split of {env_id}", split, {s.name: s for s in env.eval_splits}),)


def game_set(env_id: str, env: EnvInfo) -> DataFingerprint | None:
    """The outside data the run plays, by its env's `EnvInfo.data_fingerprint` hook (None
    for an env without such data); a wrong data folder is one UsageError line."""
    try:
        return envs.data_fingerprint(env_id, env.train_kwargs)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot find the data of {env_id}: {error}") from error


def parse_credit_options(credit: str, texts: tuple[str, ...]) -> Any:
    """--credit-options parsed into the module's `Options` (`credit.options`); None when
    none is named (the module's defaults)."""
    if not texts:
        return None
    if credit == NO_CREDIT:
        raise UsageError("--credit-options needs a --credit module")
    try:
        pairs = [split_option(option) for option in texts]
        return parse_options(credit_class(credit).Options, pairs)
    except ValueError as error:
        raise UsageError(f"--credit-options of {credit}: {error}") from error


def step_limit(
    max_episode_steps: int | None, env_id: str, env: EnvInfo, env_options: envs.EnvOptions
) -> int:
    """--max-episode-steps, else the env's default, for its options the default the env
    computes for them."""
    if max_episode_steps is not None:
        return max_episode_steps
    if not env_options.canonical():
        return env.max_episode_steps
    return env_default_limit(env_id, json.dumps(env_options.kwargs(), sort_keys=True))


@functools.lru_cache(maxsize=64)
def env_default_limit(env_id: str, options_json: str) -> int:
    """The `max_steps` an env built with these options (JSON) chooses for itself."""
    env = make_env(env_id, {**envs.ENVS[env_id].train_kwargs, **json.loads(options_json)})
    try:
        return int(env.unwrapped.max_steps)
    finally:
        env.close()


def group_size(given: int | None, credit: str) -> int:
    """--group-size, else the credit module's own `default_group_size` (HP-RLVR: 1)."""
    if given is not None:
        return given
    if credit == NO_CREDIT:  # nothing trains; only the run name's hash reads it
        return DEFAULT_GROUP_SIZE
    return credit_class(credit).default_group_size


def prompt_history(given: int | None, env: EnvInfo) -> int:
    """History pairs K in the prompt: --history-len, else 0 on a Markov env, else 2."""
    if given is not None:
        return given
    return 0 if env.markov else NON_MARKOV_HISTORY_LEN
