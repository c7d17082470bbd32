"""What a `RunConfig` resolves to: the values a run plays with where the options leave them
unset or name them in text (group size, step limit, prompt history, dtype, env options,
credit options, evaluation splits, the env's constructor kwargs, the data played).

Resolved once, here, for naming (`benchmarks/run_identity.py`), validation, training and
evaluation alike, so that an option left unset and one spelled out at the value it
resolves to are the same run.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from creditgym import envs
from creditgym.benchmarks import common
from creditgym.benchmarks.cli import UsageError, lookup
from creditgym.benchmarks.run_build import credit_class, make_env
from creditgym.benchmarks.run_config import NON_MARKOV_HISTORY_LEN, RunConfig
from creditgym.credit.base import DEFAULT_GROUP_SIZE
from creditgym.credit.options import canonical_texts, parse_options, split_option
from creditgym.envs.registry import DataFingerprint, EvalSplit

# `--credit none` evaluates without training; `--trainer eval-only` skips training.
NO_CREDIT = "none"
EVAL_ONLY = "eval-only"


def trains(cfg: RunConfig) -> bool:
    return cfg.credit != NO_CREDIT and cfg.trainer != EVAL_ONLY


def group_size(cfg: RunConfig) -> int:
    """--group-size, else the credit module's own `default_group_size` (HP-RLVR: 1)."""
    if cfg.group_size is not None:
        return cfg.group_size
    if cfg.credit == NO_CREDIT:  # nothing trains; only the run name's hash reads it
        return DEFAULT_GROUP_SIZE
    return credit_class(cfg.credit).default_group_size


def model_dtype(cfg: RunConfig) -> str:
    """The policy's precision: --dtype, resolved for `auto` and `fast` by the device, the
    processor and the model (`benchmarks.common.resolve_dtype`)."""
    return common.resolve_dtype(cfg.dtype, cfg.device, cfg.model)


def step_limit(cfg: RunConfig) -> int:
    """The episode step limit T of a run: --max-episode-steps, else the env's default
    (with --env-options, the default the env computes for them: KeyDoor's grows with
    `delay`, Umbrella's is its `length`).

    Resolved here, for naming and for the env alike, so that a run with the option unset
    and one that spells out the env's default are the same run (same folder)."""
    if cfg.max_episode_steps is not None:
        return cfg.max_episode_steps
    env_id = common.env_id(cfg.env)
    if not cfg.env_options:
        return envs.ENVS[env_id].max_episode_steps
    return env_default_limit(env_id, json.dumps(env_options(cfg), sort_keys=True))


@functools.lru_cache(maxsize=64)
def env_default_limit(env_id: str, options_json: str) -> int:
    """The `max_steps` an env built with these options (JSON) chooses for itself."""
    env = make_env(env_id, {**envs.ENVS[env_id].train_kwargs, **json.loads(options_json)})
    try:
        return int(env.unwrapped.max_steps)
    finally:
        env.close()


def env_options(cfg: RunConfig) -> dict[str, Any]:
    """--env-options as constructor kwargs (`delay=16` -> {"delay": 16})."""
    return common.env_options(cfg.env_options)


def prompt_history(cfg: RunConfig) -> int:
    """History pairs K in the prompt: --history-len, else 0 on a Markov env, else 2."""
    if cfg.history_len is not None:
        return cfg.history_len
    return 0 if envs.ENVS[common.env_id(cfg.env)].markov else NON_MARKOV_HISTORY_LEN


def credit_options_of(cfg: RunConfig) -> Any:
    """--credit-options parsed, once, into the module's `Options` (`credit.options`); None
    when none is named (the module's defaults)."""
    if not cfg.credit_options:
        return None
    if cfg.credit == NO_CREDIT:
        raise UsageError("--credit-options needs a --credit module")
    try:
        pairs = [split_option(option) for option in cfg.credit_options]
        return parse_options(credit_class(cfg.credit).Options, pairs)
    except ValueError as error:
        raise UsageError(f"--credit-options of {cfg.credit}: {error}") from error


def canonical_credit_options(cfg: RunConfig) -> tuple[str, ...]:
    """The run's credit options in their one spelling: `key=value` off the defaults,
    sorted by key (`credit.options.canonical_texts`); () when every one is at its default."""
    options = credit_options_of(cfg)
    return () if options is None else canonical_texts(options)


def game_set(cfg: RunConfig) -> DataFingerprint | None:
    """The outside data the run plays, by its env's `EnvInfo.data_fingerprint` hook (None
    for an env without such data); a wrong data folder is one UsageError line."""
    env_id = common.env_id(cfg.env)
    try:
        return envs.data_fingerprint(env_id, envs.ENVS[env_id].train_kwargs)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot find the data of {env_id}: {error}") from error


def eval_splits(cfg: RunConfig, env_id: str) -> tuple[EvalSplit, ...]:
    splits = envs.ENVS[env_id].eval_splits
    if cfg.split == "all":
        return splits
    return (lookup(f"split of {env_id}", cfg.split, {s.name: s for s in splits}),)


def env_kwargs_for(cfg: RunConfig, env_id: str, split: EvalSplit | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = (
        dict(split.env_kwargs) if split else dict(envs.ENVS[env_id].train_kwargs)
    )
    kwargs.update(env_options(cfg))
    kwargs["max_steps"] = step_limit(cfg)
    if cfg.model == "expert":  # the one agent that reads `expert_action`
        kwargs.update(envs.ENVS[env_id].expert_kwargs)
    families = envs.ENVS[env_id].task_families
    if cfg.faults and families is not None:
        kwargs[families.kwarg] = list(cfg.faults)
    return kwargs
