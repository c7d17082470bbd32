"""An environment's identity, declared beside its `register` call.

Everything a runner, a prompt builder or a tokenizer needs to know about an env lives
here, with the env, so adding an environment is one module plus one `register_env` call
in `envs/__init__.py` and no table elsewhere: its command-line short name, the step limit
runs use by default, its evaluation splits, the constructor kwargs of training episodes,
the `info` key naming a task's type, the intro line of its prompts, whether it describes
itself as a finite MDP, what `small`'s tokenizer corpus takes from it, its task families,
and, for an env that plays data from outside the code (ALFWorld's game files), which data
it plays. Nothing outside envs/ tests an env's id or short name: it reads these facts.

An env's options (the constructor keywords a run may set, `--env-options key=value`) are
declared once, by its options class (`EnvInfo.options`, an `envs.options.EnvOptions`):
`parse_env_options` is the one parser every entry point uses, and a run's identity is
built from `EnvOptions.canonical`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import gymnasium

from creditgym.envs.options import EnvOptions, NoEnvOptions


@dataclass(frozen=True)
class EvalSplit:
    """An evaluation split: its name and the env constructor kwargs that select it."""

    name: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DataFingerprint:
    """Which outside data (a set of game files) an env plays: recorded in the run folder
    and part of the run's identity, so a run on other data never resumes an old folder.

    Attributes:
        description: JSON-able and stable across processes and machines (no paths): what
            the data is (e.g. a generated set's generator version, seed and sizes, or a
            hash of the sorted task ids of each split of a folder).
    """

    description: Mapping[str, Any]


GENERIC_INTRO = "You are an agent acting in a text environment, one action per turn."
"""The prompt's first line for an env that declares no intro of its own."""


@dataclass(frozen=True)
class TaskFamilies:
    """Named families of tasks a run can restrict itself to (SysDiag's fault families).

    Attributes:
        kwarg: the env constructor kwarg taking a list of family names (`faults`).
        names: `"module:NAME"` of the family names (a mapping or sequence keyed by name),
            imported only when read, as Gymnasium's entry points are.
    """

    kwarg: str
    names: str

    def load(self) -> tuple[str, ...]:
        """The family names, in the env's own order."""
        module, attribute = self.names.split(":")
        return tuple(getattr(importlib.import_module(module), attribute))


@dataclass(frozen=True)
class EnvInfo:
    """What a runner needs to know about one registered env.

    Attributes:
        id: registered Gymnasium id (`creditgym/Name-vN`).
        short_name: command-line name (`--env sysdiag`).
        max_episode_steps: step limit T a run uses unless told otherwise; long enough that
            the env's scripted expert wins (a run whose episodes are all truncated
            measures nothing).
        eval_splits: evaluation splits; tasks are kept apart from training ones by the
            split's kwargs or by the runner's evaluation seed range.
        train_kwargs: constructor kwargs of training episodes.
        task_type_key: `info` key naming an episode's task type (leaderboard breakdown),
            None when the env has one task type.
        markov: observations show everything the policy needs (no history in the prompt
            is needed).
        expert_kwargs: constructor kwargs that make the env publish `info["expert_action"]`
            where computing it costs real time (ALFWorld's planner); empty where it is free.
        data_fingerprint: for an env that plays outside data, `"module:function"` (imported
            only when called, as Gymnasium's entry points are) mapping constructor kwargs
            to the `DataFingerprint` of the data that env would play, covering every split;
            None where all tasks live in the code or a pinned package.
        in_process: the env is pure in-memory Python whose steps take microseconds and
            cannot hang (no engine, no sandbox, no I/O), so rollouts with
            `env_workers="auto"` step it in the caller's process instead of a worker.
        intro: the first line of every prompt on this env (agents/prompts.py): who the
            agent is and how it acts. Part of the env's text: bump the id's `-vN` with it.
        finite_mdp: the env implements `finite_mdp()` (envs/mdp.py): each task is a
            finite MDP whose ground truth is computed exactly (measure/ground_truth.py),
            and its `info` reports the true state (`mdp_state`, `mdp_next_state`).
        tokenizer_episodes: seeded random-agent episodes that the corpus of `small`'s
            tokenizer takes from this env (agents/tokenizer_corpus.py); 0 (the default):
            none, so registering an env never changes that committed tokenizer (its text
            still encodes, in more tokens). Changing it means rebuilding the tokenizer.
        task_families: the named task families a run can restrict itself to (`--faults`),
            None where the env has none.
        horizon_option: the option (a field of `options`) that sets how far credit must
            travel (a credit instrument's delay or length: the x axis of the study's
            credit-vs-horizon figure), None where no single option does.
        options: the env's options class: every constructor keyword a run may set with
            `--env-options`, with its type, default, help and range (envs/options.py).
    """

    id: str
    short_name: str
    max_episode_steps: int
    eval_splits: tuple[EvalSplit, ...] = (EvalSplit("test"),)
    train_kwargs: Mapping[str, Any] = field(default_factory=dict)
    task_type_key: str | None = None
    markov: bool = False
    expert_kwargs: Mapping[str, Any] = field(default_factory=dict)
    data_fingerprint: str | None = None
    in_process: bool = False
    intro: str = GENERIC_INTRO
    finite_mdp: bool = False
    tokenizer_episodes: int = 0
    task_families: TaskFamilies | None = None
    horizon_option: str | None = None
    options: type[EnvOptions] = NoEnvOptions

    def horizon(self, options: EnvOptions) -> int | None:
        """The value of `horizon_option` in `options` (its default where unset); None
        where the env has no horizon option."""
        return None if self.horizon_option is None else getattr(options, self.horizon_option)


ENVS: dict[str, EnvInfo] = {}
"""Registered id -> its `EnvInfo`, in registration order."""


def register_env(info: EnvInfo, entry_point: str) -> None:
    """Register `info.id` with Gymnasium and record its `EnvInfo`.

    The env's own `max_steps` constructor argument carries the step limit (no TimeLimit
    wrapper), so that it can end a truncated episode with feedback like any other.
    """
    if info.tokenizer_episodes < 0:
        raise ValueError(f"{info.id}: tokenizer_episodes must be >= 0")
    if not issubclass(info.options, EnvOptions):
        raise ValueError(f"{info.id}: options must be an envs.options.EnvOptions subclass")
    if info.horizon_option is not None and info.horizon_option not in info.options.names():
        raise ValueError(f"{info.id}: horizon_option {info.horizon_option!r} is no option")
    gymnasium.register(id=info.id, entry_point=entry_point, kwargs={})
    ENVS[info.id] = EnvInfo(
        **{
            **info.__dict__,
            "train_kwargs": MappingProxyType(dict(info.train_kwargs)),
            "expert_kwargs": MappingProxyType(dict(info.expert_kwargs)),
        }
    )


def short_names() -> dict[str, str]:
    """Command-line short name -> registered id, for every registered env."""
    return {info.short_name: env_id for env_id, info in ENVS.items()}


def data_fingerprint(env_id: str, env_kwargs: Mapping[str, Any]) -> DataFingerprint | None:
    """The `DataFingerprint` of what `env_id` built with `env_kwargs` plays (None: no
    outside data). Raises what the env's constructor would for a wrong data folder."""
    hook = ENVS[env_id].data_fingerprint
    if hook is None:
        return None
    module, function = hook.split(":")
    return getattr(importlib.import_module(module), function)(env_kwargs)


def parse_env_options(env_id: str, texts: str | Sequence[str]) -> EnvOptions:
    """The options of registered `env_id` from `key=value` texts (one string is split on
    whitespace), by its `EnvInfo.options`: `("delay=16", "variance=high")` ->
    `KeyDoorOptions(delay=16, variance="high")`.

    Raises:
        ValueError: one line naming the env: a text without `=`, a key the env does not
            declare (its options listed), a key given twice, a value its type or range
            refuses.
    """
    try:
        return ENVS[env_id].options.parse(texts)
    except ValueError as error:
        raise ValueError(f"{env_id}: {error}") from None


def env_options_help() -> str:
    """The help of `--env-options`: per registered env, each option as
    `key=default (how it is written): help`, from its `EnvInfo.options`."""
    lines = [
        "Options of the env as key=value, e.g. `--env-options delay=16 variance=high` "
        "(keydoor). They choose the task: named ones enter the run's identity, parsed, off "
        "their defaults and in the env's order (`variance=high delay=16` and `delay=16 "
        "variance=high num_keys=1` are one run); the step limit, when unset, is the env's "
        "own default for them. Per env:"
    ]
    for info in ENVS.values():
        lines.append(f"{info.short_name}:")
        lines.append(info.options.help())
    return "\n".join(lines)
