"""Train one (env, credit, model) configuration and evaluate it: `python -m benchmarks.run`.

    python -m benchmarks.run                                   # defaults, < 15 min on 2 CPU cores
    python -m benchmarks.run --env alfworld --credit hp_rlvr   # one method on ALFWorld
    python -m benchmarks.run --model expert --credit none      # scripted baseline, eval only
    python -m benchmarks.run --preset paper --device cuda      # the papers' settings

Each run writes `results/local/runs/<run-name>/` (layout in `benchmarks/records.py`); the run
name is derived from the configuration, so the same command finds the same folder and
resumes a killed run without losing or repeating evaluation episodes. Names (env,
credit, model, trainer, split) are turned into objects here, through dict registries.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
import tyro
from peft import PeftModel
from tqdm import tqdm

from creditgym import credit, envs
from creditgym.agents.atomic import DamagedFileError, atomic_write_text
from creditgym.agents.base import Agent, ExpertAgent, RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.agents.llm import LLMAgent
from creditgym.agents.models import MODELS, LoadedModel, vocabulary
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import DEFAULT_REWARD_CHANNEL, REWARD_CHANNELS, Trajectory
from creditgym.benchmarks import common, lock, records
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, lookup, suggest
from creditgym.benchmarks.run_config import (
    LATER_FIELDS,
    LEGACY_HISTORY_LEN,
    NON_IDENTITY_FIELDS,
    PRESETS,
    RunConfig,
)
from creditgym.credit.base import (
    DEFAULT_CONVENTION,
    DEFAULT_GROUP_SIZE,
    CreditContext,
    CreditModule,
    NonFiniteError,
)
from creditgym.credit.options import canonical_texts, parse_options, split_option
from creditgym.envs.registry import DataFingerprint, EvalSplit
from creditgym.measure.ground_truth import exact_sources
from creditgym.trainers.curve import CurveSettings
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)
from creditgym.trainers.sft import CreditFilteredSFTTrainer, SFTConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
# Named, not __name__: run as `python -m benchmarks.run` this module is __main__.
logger = logging.getLogger("benchmarks.run")

# Evaluation seeds start far above any training seed so that evaluation tasks are never
# training tasks where the env draws tasks from the seed (SysDiag, CodeExec).
EVAL_SEED_BASE = 1_000_000


# Scripted agents, built per episode from a seed so a resumed run replays exactly the
# episodes an uninterrupted one would have played.
SCRIPTED_AGENTS: dict[str, Callable[[int], Agent]] = {
    "expert": lambda seed: ExpertAgent(),
    "random": lambda seed: RandomAgent(seed=seed),
}
NO_CREDIT = "none"
EVAL_ONLY = "eval-only"
# Model that scores hindsight credit of scripted-agent samples (they have no policy).
SCRIPTED_SAMPLE_SCORER = "tiny"
# Training rollouts are sampled at temperature 1.0, as in GRPO (arXiv 2402.03300), GiGPO
# (arXiv 2505.10978), HCAPO (arXiv 2603.08754) and HP-RLVR.
TRAIN_TEMPERATURE = 1.0


def trainer_configs(cfg: RunConfig) -> dict[str, tuple[type, Any]]:
    """Trainer name -> (trainer class, its config built from `cfg`)."""
    size = group_size(cfg)
    # Unset: each trainer keeps its own default learning rate.
    learning_rate = {} if cfg.learning_rate is None else {"learning_rate": cfg.learning_rate}
    return {
        "policy_gradient": (
            PolicyGradientTrainer,
            PolicyGradientConfig(
                steps=cfg.steps,
                group_size=size,
                tasks_per_step=cfg.tasks_per_step,
                seed=cfg.seed,
                checkpoint_every=1,
                resume=True,
                env_workers=cfg.env_workers,
                **learning_rate,
            ),
        ),
        "sft": (
            CreditFilteredSFTTrainer,
            SFTConfig(
                rounds=cfg.steps,
                num_tasks=cfg.tasks_per_step,
                group_size=size,
                # Fewer rollouts than environments would leave workers idle.
                num_envs=min(8, cfg.tasks_per_step * size),
                env_workers=cfg.env_workers,
                seed=cfg.seed,
                resume=True,
                **learning_rate,
            ),
        ),
    }


TRAINER_NAMES = ("policy_gradient", "sft", EVAL_ONLY)


def group_size(cfg: RunConfig) -> int:
    """--group-size, else the credit module's own `default_group_size` (HP-RLVR: 1)."""
    if cfg.group_size is not None:
        return cfg.group_size
    if cfg.credit == NO_CREDIT:  # nothing trains; only the run name's hash reads it
        return DEFAULT_GROUP_SIZE
    return credit_class(cfg.credit).default_group_size


env_id_for = common.env_id
DTYPES = common.DTYPES


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
    env_id = env_id_for(cfg.env)
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
    return 0 if envs.ENVS[env_id_for(cfg.env)].markov else LEGACY_HISTORY_LEN


def trains(cfg: RunConfig) -> bool:
    return cfg.credit != NO_CREDIT and cfg.trainer != EVAL_ONLY


def method_fields(cfg: RunConfig) -> dict[str, Any]:
    """Leaderboard row identity (`records.METHOD_FIELDS`): model, trainer, credit, G, steps."""
    if not trains(cfg):
        return {
            "model": cfg.model,
            "trainer": EVAL_ONLY,
            "credit": NO_CREDIT,
            "group_size": 0,
            "steps": 0,
        }
    return {
        "model": cfg.model,
        "trainer": cfg.trainer,
        "credit": cfg.credit,
        "group_size": group_size(cfg),
        "steps": cfg.steps,
    }


def method_label(cfg: RunConfig) -> str:
    return records.method_label(method_fields(cfg))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def run_identity(cfg: RunConfig) -> dict[str, Any]:
    """Every result-deciding field of `cfg`, as JSON values: what the run name hashes and
    config.json records (so that a folder reused under `--name` can be checked)."""
    identity = {
        key: value
        for key, value in dataclasses.asdict(cfg).items()
        if key not in NON_IDENTITY_FIELDS
        and not (key in LATER_FIELDS and value == RunConfig.__dataclass_fields__[key].default)
    }
    identity["env"] = env_id_for(cfg.env)
    identity["group_size"] = group_size(cfg)
    identity["max_episode_steps"] = step_limit(cfg)
    # Named credit options as parsed values: off their defaults, sorted, one spelling each
    # (`credit.options.canonical_texts`), so `x=true`, `x=True` and `x=1` are one run and
    # an option spelled out at its default is the run without it.
    identity.pop("credit_options", None)
    if canonical_credit_options(cfg):
        identity["credit_options"] = list(canonical_credit_options(cfg))
    # Hash the resolved K, except the legacy 2 (how every earlier run prompted), so that
    # an unset K on a Markov env is a different run from K = 2 there, and old names hold.
    identity.pop("history_len", None)
    if prompt_history(cfg) != LEGACY_HISTORY_LEN:
        identity["history_len"] = prompt_history(cfg)
    # The dtype decides results, the device alone does not: hash the resolved dtype, and
    # leave float32 (every run before the option existed) out so those keep their names.
    identity.pop("dtype", None)
    if model_dtype(cfg) != "float32":
        identity["dtype"] = model_dtype(cfg)
    # The data played decides results (ALFWorld: which game set), so a run on other data
    # gets another folder; the env's default data is left out, so runs keep their names.
    played = game_set(cfg)
    if played is not None and not played.is_default:
        identity["game_set"] = played.description
    return json.loads(json.dumps(identity, default=str))


def game_set(cfg: RunConfig) -> DataFingerprint | None:
    """The outside data the run plays, by its env's `EnvInfo.data_fingerprint` hook (None
    for an env without such data); a wrong data folder is one UsageError line."""
    env_id = env_id_for(cfg.env)
    try:
        return envs.data_fingerprint(env_id, envs.ENVS[env_id].train_kwargs)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot find the data of {env_id}: {error}") from error


def run_name(cfg: RunConfig) -> str:
    """Readable name plus a hash of every result-deciding field (same config, same name)."""
    if cfg.name:
        return cfg.name
    identity = run_identity(cfg)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    what = (
        f"{cfg.trainer}-{cfg.credit}-G{group_size(cfg)}-{cfg.steps}steps"
        if trains(cfg)
        else EVAL_ONLY
    )
    options = [re.sub(r"[^A-Za-z0-9.]+", "", option) for option in cfg.env_options]
    parts = [cfg.model, what, f"seed{cfg.seed}", digest[:6]]
    return _slug(common.output_name(None, identity["env"], parts, [*cfg.faults, *options], "-"))


# Settings only training reads: an evaluation-only run ignores them, so they do not split
# its leaderboard row (its run name still hashes them, so run folders keep their names).
TRAINING_ONLY_FIELDS = (
    "trainer",
    "group_size",
    "steps",
    "tasks_per_step",
    "learning_rate",
    "credit_convention",
    "credit_options",
    "reward_channel",
)
# Settings that measure a run without changing its policy: a run with a learning curve and
# one without share a leaderboard row (their names differ: only one has curve.jsonl).
MEASUREMENT_FIELDS = ("eval_every", "curve_episodes")
# Settings that choose the task, not the method: they pick the leaderboard table.
TASK_FIELDS = ("env", "faults", "env_options", "max_episode_steps")


def method_config(cfg: RunConfig) -> dict[str, Any]:
    """A run's leaderboard row: its identity less the seed (a row averages over seeds) and
    the task fields, with the display fields of `method_fields` (eval-only: no training).

    Derived from the identity alone, so LATER_FIELDS at their defaults are left out as
    there: a folder written before such a field existed and a new run at its default
    share a row, as they share a run name."""
    dropped = {
        "seed",
        *TASK_FIELDS,
        *MEASUREMENT_FIELDS,
        *(() if trains(cfg) else TRAINING_ONLY_FIELDS),
    }
    kept = {key: value for key, value in run_identity(cfg).items() if key not in dropped}
    return {**kept, **method_fields(cfg)}


def check_run_folder(cfg: RunConfig) -> None:
    """Refuse a run whose folder holds another configuration (a reused `--name`): resuming
    would add this configuration's episodes to the other's and relabel them."""
    run_dir = cfg.out / run_name(cfg)
    # A derived name hashes the identity: the same name is the same configuration.
    if not cfg.name or not (run_dir / records.CONFIG_FILE).is_file():
        return
    recorded = records.read_json(run_dir / records.CONFIG_FILE).get("identity")
    if recorded is None:
        raise UsageError(
            f"{run_dir} records no configuration identity (written by an older creditgym); "
            "choose another --name"
        )
    identity = run_identity(cfg)
    keys = {*recorded, *identity}
    differing = sorted(key for key in keys if recorded.get(key) != identity.get(key))
    if differing:
        shown = "; ".join(
            f"{key} {recorded.get(key, 'unset')} there, {identity.get(key, 'unset')} here"
            for key in differing[:3]
        )
        raise UsageError(f"{run_dir} holds another configuration ({shown}); choose another --name")


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
    return tyro.cli(
        RunConfig,
        prog="python -m benchmarks.run",
        args=args,
        default=default,
        description=__doc__.split("\n")[0],
    )


def check_out_writable(out: Path) -> None:
    """Create `out` and write a probe file there, or raise a one-line UsageError."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-probe-"):
            pass
    except OSError as error:
        raise UsageError(f"--out {out} cannot be written: {error.strerror or error}") from error


def make_env(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env:
    """`gym.make` with env errors (missing module, bad kwargs, missing data) as one line."""
    try:
        return gym.make(env_id, **env_kwargs)
    except (ImportError, gym.error.Error, TypeError, ValueError, OSError) as error:
        raise UsageError(f"cannot create env {env_id} with {dict(env_kwargs)}: {error}") from error


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


def eval_splits(cfg: RunConfig, env_id: str) -> tuple[EvalSplit, ...]:
    splits = envs.ENVS[env_id].eval_splits
    if cfg.split == "all":
        return splits
    return (lookup(f"split of {env_id}", cfg.split, {s.name: s for s in splits}),)


def credit_names() -> dict[str, str]:
    """Every valid --credit value (the credit registry plus `none`)."""
    return {NO_CREDIT: NO_CREDIT, **{name: name for name in credit.REGISTRY}}


def validate(cfg: RunConfig) -> None:
    """Check every name and path before any work starts (one clear line per problem)."""
    env_id = env_id_for(cfg.env)
    eval_splits(cfg, env_id)
    game_set(cfg)  # a wrong data folder (ALFWORLD_DATA) fails here, before any work
    if ":" not in cfg.credit:  # a registered name (or `none`): close matches suggested
        lookup("credit module", cfg.credit, credit_names())
    # Each module declares the conventions it can follow (a `package.module:Class` plug-in
    # is imported and checked against the contract here); `none` computes no credit.
    offered = (
        credit_class(cfg.credit).conventions if cfg.credit != NO_CREDIT else (DEFAULT_CONVENTION,)
    )
    lookup(f"--credit-convention of {cfg.credit}", cfg.credit_convention, {c: c for c in offered})
    credit_options_of(cfg)
    lookup("trainer", cfg.trainer, {name: name for name in TRAINER_NAMES})
    if cfg.eval_episodes < 0 or cfg.steps < 0 or group_size(cfg) < 1:
        raise UsageError("--eval-episodes and --steps must be >= 0 and --group-size >= 1")
    if cfg.env_options:  # the env's own constructor checks names and values
        make_env(env_id, env_kwargs_for(cfg, env_id, None)).close()
    families = envs.ENVS[env_id].task_families
    if cfg.faults and families is None:
        raise UsageError(f"--faults selects an env's task families; {env_id} has none")
    if cfg.faults:
        for family in cfg.faults:
            lookup(f"task family of {env_id}", family, {name: name for name in families.load()})
    if cfg.threads < 1:
        raise UsageError(f"--threads must be >= 1 (got {cfg.threads})")
    if cfg.max_episode_steps is not None and cfg.max_episode_steps < 1:
        raise UsageError(f"--max-episode-steps must be >= 1 (got {cfg.max_episode_steps})")
    if cfg.history_len is not None and cfg.history_len < 0:
        raise UsageError(f"--history-len must be >= 0 (got {cfg.history_len})")
    if cfg.generation_cache_gib < 0:
        raise UsageError(f"--generation-cache-gib must be >= 0 (got {cfg.generation_cache_gib})")
    if not (math.isfinite(cfg.eval_temperature) and cfg.eval_temperature > 0):
        raise UsageError("--eval-temperature must be > 0 (the policy records log-probs)")
    common.check_at_least(
        (
            ("--eval-batch-size", cfg.eval_batch_size, 1),
            ("--tasks-per-step", cfg.tasks_per_step, 1),
            ("--max-new-tokens", cfg.max_new_tokens, 1),
            ("--sample-group-size", cfg.sample_group_size, 0),
            ("--eval-every", cfg.eval_every, 0),
            ("--curve-episodes", cfg.curve_episodes, 1),
        )
    )
    if cfg.learning_rate is not None and not (
        math.isfinite(cfg.learning_rate) and cfg.learning_rate > 0
    ):
        raise UsageError(f"--learning-rate must be a finite number > 0 (got {cfg.learning_rate})")
    check_device(cfg.device)
    check_model_name(cfg.model)
    if cfg.model in SCRIPTED_AGENTS and trains(cfg):
        raise UsageError(
            f"--model {cfg.model} is a scripted agent and cannot be trained; "
            f"use --credit {NO_CREDIT} to evaluate it"
        )
    check_out_writable(cfg.out)
    check_run_folder(cfg)
    check_vocabulary(cfg)


def check_vocabulary(cfg: RunConfig) -> None:
    """Refuse to resume a run whose config.json records another vocabulary than the one
    `--model` reads now (`agents.models.vocabulary`: `small`'s committed tokenizer file):
    its checkpoints' token ids would mean other text. A folder that records none (written
    before runs recorded it) is resumed as before."""
    config_file = cfg.out / run_name(cfg) / records.CONFIG_FILE
    try:
        recorded = records.read_json(config_file).get("vocabulary")
    except (OSError, DamagedFileError):
        # No folder yet, or a config.json that `prepare_run_dir` rewrites anyway (a
        # damaged one is the episodes' and checkpoints' checks to report, not this one).
        return
    current = vocabulary(cfg.model)
    if recorded is not None and recorded != current:
        shown = "none" if current is None else f"{current['tokenizer']} {current['sha256'][:12]}"
        raise UsageError(
            f"{config_file.parent} was run with the vocabulary {recorded.get('tokenizer')} "
            f"{str(recorded.get('sha256'))[:12]}, this code reads {shown}; resuming would mix "
            "them: choose another --name or --out"
        )


def check_device(device: str) -> None:
    """A torch device string this machine has, or a one-line UsageError."""
    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise UsageError(
            f"--device {device!r} is not a torch device ({str(error).splitlines()[0]}); "
            "use cpu, cuda, cuda:N or mps"
        ) from error
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    if not available.get(parsed.type, False):
        raise UsageError(f"--device {device}: this machine has no {parsed.type} device")
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise UsageError(
            f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )


def check_model_name(name: str) -> None:
    """Catch a mistyped model name before the hub is asked for it.

    A name that is not registered, not a folder, not a `org/name` hub id and close to a
    registered name is a typo: refuse it at once with the close names (asking a hub first
    costs about 50 s of retries where none is reachable)."""
    if name in MODELS or name in SCRIPTED_AGENTS or "/" in name or Path(name).expanduser().exists():
        return
    hint = suggest(name, [*MODELS, *SCRIPTED_AGENTS])
    if hint:
        raise UsageError(f"unknown model {name!r}.{hint}")


def load_policy(name: str, device: str, dtype: str = "float32") -> LoadedModel:
    """`benchmarks.common.load_policy`, suggesting the scripted agents' names too."""
    return common.load_policy(name, device, dtype, also_valid=SCRIPTED_AGENTS)


def load_trained_policy(
    base: LoadedModel, final_dir: Path, device: str, dtype: str = "float32"
) -> LoadedModel:
    """The policy a finished training exported: a LoRA adapter over `base`, or a whole
    fine-tuned model (the trainers export one or the other)."""
    if (final_dir / "adapter_config.json").is_file():
        model = PeftModel.from_pretrained(base.model, str(final_dir)).to(device)
    else:
        model = load_policy(str(final_dir.resolve()), device, dtype).model
    model.eval()
    return LoadedModel(name=base.name, model=model, tokenizer=base.tokenizer)


def credit_class(name: str) -> type[CreditModule]:
    """The class of a registered credit module or of a `package.module:Class` path."""
    try:
        return credit.resolve(name)
    except KeyError as error:
        raise UsageError(str(error.args[0])) from error


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


def build_credit(
    name: str,
    policy: LoadedModel | None,
    history_len: int = 2,
    generation_cache_gib: float = 0.0,
    convention: str = DEFAULT_CONVENTION,
    options: Any = None,
    env_id: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    sampling: AgentConfig | None = None,
    reward_channel: str = DEFAULT_REWARD_CHANNEL,
) -> CreditModule:
    """Build a credit module (`credit.build`) from one context: the policy it may score
    with, the prompt history length (rebuilt prompts must match the rollout's), the
    generation-cache budget (0 where no trainer fills the cache), the convention of
    its group statistics (docs/conventions.md), the options the user named (an instance
    of the module's `Options`, `credit_options_of`; None: its defaults), and the env,
    rollout sampling and reward channel the exact-MDP oracles (`oracle`, `hca`) read."""
    context = CreditContext(
        policy=policy,
        history_len=history_len,
        generation_cache_bytes=int(generation_cache_gib * 2**30),
        convention=convention,
        options=options,
        env_id=env_id,
        env_kwargs=dict(env_kwargs or {}),
        sampling=sampling,
        reward_channel=reward_channel,
        exact_sources=exact_sources,
    )
    try:
        return credit.build(credit_class(name), context)
    except (TypeError, ValueError) as error:  # a needed policy missing, a broken plug-in
        raise UsageError(f"--credit {name}: {error}") from error


def training_sampling(cfg: RunConfig) -> AgentConfig:
    """How training rollouts (and the sample trajectories) sample the policy."""
    return AgentConfig(
        temperature=TRAIN_TEMPERATURE,
        max_new_tokens=cfg.max_new_tokens,
        history_len=prompt_history(cfg),
        constrained=cfg.constrained,
    )


def training_credit(cfg: RunConfig, env_id: str, policy: LoadedModel) -> CreditModule:
    """The credit module a run trains with: its --credit with its --credit-convention and
    --credit-options (parsed once, `credit_options_of`), on its env, sampling and channel."""
    return build_credit(
        cfg.credit,
        policy,
        prompt_history(cfg),
        cfg.generation_cache_gib,
        cfg.credit_convention,
        credit_options_of(cfg),
        env_id,
        env_kwargs_for(cfg, env_id, None),
        training_sampling(cfg),
        cfg.reward_channel,
    )


def train(cfg: RunConfig, env_id: str, run_dir: Path, policy: LoadedModel) -> LoadedModel:
    """Train (or resume training of) the policy; writes metrics.jsonl and training.json.

    The trainer checkpoints every iteration into `run_dir/checkpoints/`, so a killed run
    continues from its last iteration; the trained policy is exported to `run_dir/final/`.
    """
    trainer_cls, trainer_config = trainer_configs(cfg)[cfg.trainer]
    env_kwargs = env_kwargs_for(cfg, env_id, None)
    sampling = training_sampling(cfg)
    trainer = trainer_cls(
        policy,
        training_credit(cfg, env_id, policy),
        env_id,
        env_kwargs,
        sampling,
        trainer_config,
        run_dir,
        curve=curve_settings(cfg, env_id),
        reward_channel=REWARD_CHANNELS[cfg.reward_channel],
    )
    metrics = trainer.train()
    records.atomic_write_json(
        run_dir / records.TRAINING_FILE,
        {
            "optimizer_steps": len(metrics),
            "iterations": cfg.steps,
            "wall_seconds": records.training_clock(metrics)[-1] if metrics else 0.0,
            "rollouts": records.rollouts_used(metrics),
        },
    )
    return trainer.policy


def curve_settings(cfg: RunConfig, env_id: str) -> CurveSettings | None:
    """The learning curve's held-out tasks: the first `curve_episodes` evaluation tasks of
    the first split, one sampling seed for every point (trainers/curve.py)."""
    if cfg.eval_every == 0:
        return None
    split = eval_splits(cfg, env_id)[0]
    return CurveSettings(
        every=cfg.eval_every,
        seeds=tuple(EVAL_SEED_BASE + index for index in range(cfg.curve_episodes)),
        temperature=cfg.eval_temperature,
        agent_seed=episode_agent_seed(cfg.seed, "curve", 0),
        env_kwargs=env_kwargs_for(cfg, env_id, split),
        num_envs=cfg.eval_batch_size,
    )


def command_line(cfg: RunConfig) -> str:
    """The `python -m benchmarks.run` command that replays `cfg` (options off their
    defaults only), the same whether the run came from the shell or from a sweep."""
    words = ["python", "-m", "benchmarks.run"]
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


# What `run` (its lock) and `prepare_run_dir` write before any work: a folder holding only
# these is empty.
BOOKKEEPING_FILES = frozenset(
    {records.CONFIG_FILE, records.PROVENANCE_FILE, records.COMMANDS_FILE, lock.RUN_LOCK_FILE}
)


def prepare_run_dir(cfg: RunConfig) -> Path:
    """Create the run folder with config.json and provenance.json (kept on resume)."""
    run_dir = cfg.out / run_name(cfg)
    played = game_set(cfg)
    config = {
        **json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
        "env_id": env_id_for(cfg.env),
        "max_episode_steps": step_limit(cfg),
        # Which data was played, also where the identity leaves the default out.
        "game_set": None if played is None else played.description,
        # The vocabulary of a model whose tokenizer the repository builds (`small`): a
        # resume under another one is refused (`check_vocabulary`).
        "vocabulary": vocabulary(cfg.model),
        "run_name": run_dir.name,
        "identity": run_identity(cfg),
        "method_config": method_config(cfg),
        "method": method_label(cfg),
        **{f"method_{key}": value for key, value in method_fields(cfg).items()},
    }
    # Rewritten on resume: a rerun may extend the evaluation (more episodes, another
    # split), which the name's hash ignores; the latest request is what config.json shows.
    records.atomic_write_json(run_dir / records.CONFIG_FILE, config)
    # Every command that worked in this folder (a resume, a longer evaluation), in order.
    with open(run_dir / records.COMMANDS_FILE, "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {command_line(cfg)}\n")
    if not (run_dir / records.PROVENANCE_FILE).exists():
        records.atomic_write_json(run_dir / records.PROVENANCE_FILE, records.provenance(REPO_ROOT))
    return run_dir


def episode_record(
    trajectory: Trajectory, index: int, split: str, method: str, train_step: int
) -> records.EpisodeRecord:
    task_type_key = envs.ENVS[trajectory.env_id].task_type_key
    last_info = trajectory.steps[-1].info if trajectory.steps else {}
    return records.EpisodeRecord(
        index=index,
        env=trajectory.env_id,
        split=split,
        task_id=trajectory.task_id,
        task_type=str(last_info.get(task_type_key, "")) if task_type_key else "",
        seed=trajectory.seed,
        method=method,
        success=trajectory.success,
        episode_return=trajectory.total_return,
        steps=trajectory.length,
        truncated=trajectory.truncated,
        tokens=trajectory.num_action_tokens,
        train_step=train_step,
    )


def episode_agent_seed(run_seed: int, split: str, index: int) -> int:
    """A per-episode agent seed, stable across restarts (resume replays the same episode)."""
    digest = hashlib.sha256(f"{run_seed}/{split}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def missing_episodes(cfg: RunConfig, run_dir: Path) -> list[tuple[EvalSplit, int]]:
    """(split, episode index) pairs requested by `cfg` and not yet in episodes.jsonl."""
    done = {(r.split, r.index) for r in records.read_episodes(run_dir)}
    return [
        (split, index)
        for split in eval_splits(cfg, env_id_for(cfg.env))
        for index in range(cfg.eval_episodes)
        if (split.name, index) not in done
    ]


def is_finished(cfg: RunConfig) -> bool:
    """The run folder of `cfg` holds done.json and every requested episode."""
    run_dir = cfg.out / run_name(cfg)
    return (run_dir / records.DONE_FILE).exists() and not missing_episodes(cfg, run_dir)


def scripted_episodes(
    cfg: RunConfig, env: gym.Env, split: str, indices: Sequence[int]
) -> list[tuple[int, Trajectory]]:
    """Scripted agents play one episode at a time in-process (no model, no workers)."""
    played = []
    for index in indices:
        agent = SCRIPTED_AGENTS[cfg.model](episode_agent_seed(cfg.seed, split, index))
        played.append((index, play_episode(env, agent, seed=EVAL_SEED_BASE + index)))
    return played


def policy_rollouts(
    cfg: RunConfig,
    policy: LoadedModel,
    env_id: str,
    split: EvalSplit,
    seeds: Sequence[int],
    group_size: int,
    temperature: float,
    agent_seed: int,
) -> list[Trajectory]:
    """An LLM policy plays `group_size` episodes per seed together (batched rollouts)."""
    agent = LLMAgent(
        policy,
        temperature=temperature,
        max_new_tokens=cfg.max_new_tokens,
        history_len=prompt_history(cfg),
        constrained=cfg.constrained,
        seed=agent_seed,
    )
    trajectories, _ = collect(
        env_id,
        agent,
        seeds=list(seeds),
        group_size=group_size,
        num_envs=len(seeds) * group_size,
        env_workers=cfg.env_workers,
        env_kwargs=env_kwargs_for(cfg, env_id, split),
    )
    return trajectories


def policy_episodes(
    cfg: RunConfig, policy: LoadedModel, env_id: str, split: EvalSplit, indices: Sequence[int]
) -> list[tuple[int, Trajectory]]:
    """Evaluation episodes `indices` of `split`, played as one batch."""
    index_of_seed = {EVAL_SEED_BASE + index: index for index in indices}
    trajectories = policy_rollouts(
        cfg,
        policy,
        env_id,
        split,
        seeds=list(index_of_seed),
        group_size=1,
        temperature=cfg.eval_temperature,
        agent_seed=episode_agent_seed(cfg.seed, split.name, indices[0]),
    )
    # A crashed env drops its trajectory; that episode is played again on the next run.
    return sorted(((index_of_seed[t.seed], t) for t in trajectories), key=lambda pair: pair[0])


def evaluate(
    cfg: RunConfig, env_id: str, run_dir: Path, policy: LoadedModel | None, train_step: int
) -> None:
    """Play the missing evaluation episodes of every requested split, appending each.

    Scripted agents go one episode at a time, LLM policies in batches of
    `eval_batch_size`; every finished episode is on disk before the next batch starts.
    The batches are fixed (episodes 0..B-1, B..2B-1, ...), and a batch with any episode
    missing is played whole, writing only the missing ones: an LLM's episodes depend on
    the batch they are sampled in (its agent seed, the rows decoded beside them), so a
    batch cut short by a kill while its episodes were being written, or extended by a
    larger --eval-episodes, still writes what an uninterrupted run writes.
    """
    todo = missing_episodes(cfg, run_dir)
    method = method_label(cfg)
    batch = 1 if policy is None else cfg.eval_batch_size
    with (
        records.JsonlAppender(run_dir / records.EVAL_TRAJECTORIES_FILE) as trajectory_sink,
        records.JsonlAppender(run_dir / records.EPISODES_FILE) as sink,
        tqdm(total=len(todo), desc="evaluate", unit="ep", disable=not todo) as progress,
    ):
        for split in eval_splits(cfg, env_id):
            missing = {index for s, index in todo if s.name == split.name}
            if not missing:
                continue
            env = make_env(env_id, env_kwargs_for(cfg, env_id, split)) if policy is None else None
            try:
                for start in range(0, cfg.eval_episodes, batch):
                    chunk = list(range(start, min(start + batch, cfg.eval_episodes)))
                    if missing.isdisjoint(chunk):
                        continue
                    played = (
                        scripted_episodes(cfg, env, split.name, chunk)
                        if env is not None
                        else policy_episodes(cfg, policy, env_id, split, chunk)
                    )
                    for index, trajectory in played:
                        if index not in missing:  # written before, by the same batch
                            continue
                        record = episode_record(trajectory, index, split.name, method, train_step)
                        # Trajectory first: the episode record is what marks the episode done.
                        trajectory_sink.append(
                            records.eval_trajectory_record(trajectory, index, split.name)
                        )
                        sink.append(record.to_dict())
                        progress.update(1)
            finally:
                if env is not None:
                    env.close()


def write_samples(cfg: RunConfig, env_id: str, run_dir: Path, policy: LoadedModel | None) -> None:
    """Sample trajectories with the per-step credit of every registered module (the run's
    own module with its --credit-convention and --credit-options, `credit_settings`).

    One group of `sample_group_size` rollouts of one evaluation task, sampled at the
    training temperature (a group, so that group-relative modules have something to
    compare). Scripted runs have no policy to score hindsight with; `tiny` scores theirs.
    """
    path = run_dir / records.SAMPLES_FILE
    if path.exists() or cfg.sample_group_size < 1:
        return
    split = eval_splits(cfg, env_id)[0]
    group_id = f"{env_id}/sample"
    if policy is None:
        env = make_env(env_id, env_kwargs_for(cfg, env_id, split))
        try:
            group = [
                play_episode(
                    env,
                    SCRIPTED_AGENTS[cfg.model](episode_agent_seed(cfg.seed, "sample", k)),
                    seed=EVAL_SEED_BASE,
                    group_id=group_id,
                )
                for k in range(cfg.sample_group_size)
            ]
        finally:
            env.close()
        scorer = load_policy(SCRIPTED_SAMPLE_SCORER, cfg.device)
    else:
        group = policy_rollouts(
            cfg,
            policy,
            env_id,
            split,
            seeds=[EVAL_SEED_BASE],
            group_size=cfg.sample_group_size,
            temperature=TRAIN_TEMPERATURE,
            agent_seed=episode_agent_seed(cfg.seed, "sample", 0),
        )
        scorer = policy
    # The run's own module scores with the settings it trained with (convention, options);
    # the others at their defaults; all on the env's own rewards, as the samples record
    # them (the exact-MDP modules compute on the env's MDP, whose rewards are those).
    own = {"convention": cfg.credit_convention, "options": credit_options_of(cfg)}
    exact = {
        "env_id": env_id,
        "env_kwargs": env_kwargs_for(cfg, env_id, split),
        "sampling": None if policy is None else training_sampling(cfg),
    }
    credit_by_module = {}
    for name in sorted(credit.REGISTRY):
        try:
            module = build_credit(
                name, scorer, prompt_history(cfg), **exact, **(own if name == cfg.credit else {})
            )
        except UsageError:
            if name == cfg.credit:
                raise
            continue  # an exact-MDP oracle off a finite-MDP env or a model's exact table
        credit_by_module[name] = module(group).step_advantages
    settings = (
        {
            cfg.credit: {
                "convention": cfg.credit_convention,
                "options": dict(map(split_option, canonical_credit_options(cfg))),
            }
        }
        if cfg.credit in credit.REGISTRY
        else {}
    )
    lines = [
        json.dumps(
            {
                "trajectory": trajectory.to_dict(),
                "credit_model": scorer.name,
                "credit": {name: values[i].tolist() for name, values in credit_by_module.items()},
                "credit_settings": settings,
            },
            ensure_ascii=False,
        )
        for i, trajectory in enumerate(group)
    ]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def summarize(episodes: Sequence[records.EpisodeRecord]) -> list[dict[str, Any]]:
    """Per split: episodes, success % with standard error, return, length, tokens."""
    rows = []
    for split in sorted({e.split for e in episodes}):
        chosen = [e for e in episodes if e.split == split]
        n = len(chosen)
        rate = sum(e.success for e in chosen) / n
        rows.append(
            {
                "split": split,
                "episodes": n,
                "success_pct": 100 * rate,
                "success_se_pct": 100 * math.sqrt(rate * (1 - rate) / n),
                "mean_return": sum(e.episode_return for e in chosen) / n,
                "mean_steps": sum(e.steps for e in chosen) / n,
                "truncated_pct": 100 * sum(e.truncated for e in chosen) / n,
                "tokens_per_episode": sum(e.tokens for e in chosen) / n,
            }
        )
    return rows


def format_summary(run: str, method: str, rows: Sequence[Mapping[str, Any]]) -> str:
    header = (
        f"{'split':<22}{'episodes':>9}{'success %':>16}{'return':>9}"
        f"{'steps':>8}{'trunc %':>9}{'tokens':>9}"
    )
    lines = [f"run {run}  method {method}", header, "-" * len(header)]
    for row in rows:
        success = f"{row['success_pct']:.1f} ± {row['success_se_pct']:.1f}"
        lines.append(
            f"{row['split']:<22}{row['episodes']:>9}{success:>16}{row['mean_return']:>9.3f}"
            f"{row['mean_steps']:>8.1f}{row['truncated_pct']:>9.1f}{row['tokens_per_episode']:>9.1f}"
        )
    return "\n".join(lines)


# Policies this large take tens of minutes per training step on a CPU (smollm2-135m,
# docs/running.md); `tiny` and `small` take seconds.
SLOW_ON_CPU_PARAMETERS = 50_000_000


def plan_line(cfg: RunConfig, env_id: str, policy: LoadedModel | None) -> str:
    """What the run will do, printed before it starts: model, steps, rollouts, evaluation
    episodes and device, and on a CPU with a large policy that it takes tens of minutes."""
    episodes = cfg.eval_episodes * len(eval_splits(cfg, env_id))
    if trains(cfg):
        settings = trainer_configs(cfg)[cfg.trainer][1]
        rollouts = settings.num_tasks * settings.group_size
        work = (
            f"train {cfg.model} on {env_id} with {cfg.trainer} + {cfg.credit}: "
            f"{records.plural(settings.iterations, 'step')} of {rollouts} rollouts "
            f"(G = {settings.group_size}), then evaluate {records.plural(episodes, 'episode')}"
        )
    else:
        work = f"evaluate {cfg.model} on {env_id}: {records.plural(episodes, 'episode')}"
    line = f"{work}, on {cfg.device}"
    if cfg.dtype == "fast":
        line += f", --dtype fast: {common.describe_precision(model_dtype(cfg))}"
    parameters = 0 if policy is None else policy.model.num_parameters()
    if torch.device(cfg.device).type == "cpu" and parameters >= SLOW_ON_CPU_PARAMETERS:
        line += f"; a {parameters / 1e6:.0f} M-parameter policy on a CPU: expect tens of minutes"
    return line


class IncompleteRunError(RuntimeError):
    """A run whose evaluation lost episodes: it is left unfinished, to be resumed."""


def run(cfg: RunConfig) -> Path:
    """Validate, train (or resume), evaluate, write samples and the summary; returns the
    run folder."""
    validate(cfg)
    # The options as parsed, in their one spelling, from here on: config.json, the
    # replay command and the study's row names show what the run identity hashes.
    cfg = dataclasses.replace(cfg, credit_options=canonical_credit_options(cfg))
    torch.set_num_threads(cfg.threads)
    env_id = env_id_for(cfg.env)
    run_dir = cfg.out / run_name(cfg)
    fresh = not run_dir.exists()
    # One writer per run folder, taken before any work: a second invocation of the same
    # run exits 2 naming this one (benchmarks/lock.py).
    with lock.hold(lock.run_folder_lock(run_dir), str(run_dir)):
        try:
            policy = (
                None
                if cfg.model in SCRIPTED_AGENTS
                else load_policy(cfg.model, cfg.device, model_dtype(cfg))
            )
            print(plan_line(cfg, env_id, policy), flush=True)
            return run_in(cfg, env_id, prepare_run_dir(cfg), policy)
        except BaseException:
            # A run that fails before producing anything (a bad model path) leaves no folder
            # behind that would look like a started run to the leaderboard or a sweep.
            if fresh and {p.name for p in run_dir.iterdir()} <= BOOKKEEPING_FILES:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise


def run_in(cfg: RunConfig, env_id: str, run_dir: Path, policy: LoadedModel | None) -> Path:
    """Train (or resume), evaluate, write samples and the summary in `run_dir`."""
    if policy is not None and trains(cfg):
        final_dir = run_dir / "final"
        trained = None
        if (run_dir / records.TRAINING_FILE).exists() and final_dir.is_dir():
            try:
                trained = load_trained_policy(policy, final_dir, cfg.device, model_dtype(cfg))
            # A damaged export (a disk error, a file cut short) fails in whichever reader
            # meets it first (safetensors, json, peft): any of them means unreadable. The
            # last checkpoint holds the same weights, so training resumes there and exports
            # them again.
            except Exception as error:
                logger.warning(
                    "the exported policy %s cannot be loaded (%s: %s); exporting it again "
                    "from the newest checkpoint",
                    final_dir,
                    type(error).__name__,
                    (str(error).splitlines() or [""])[0],
                )
                shutil.rmtree(final_dir)
                # peft wraps the base model in place before it reads the adapter.
                policy = load_policy(cfg.model, cfg.device, model_dtype(cfg))
        policy = trained if trained is not None else train(cfg, env_id, run_dir, policy)
    train_step = len(records.read_metrics(run_dir))
    evaluate(cfg, env_id, run_dir, policy, train_step)
    missing = missing_episodes(cfg, run_dir)
    if missing:  # dropped by a crashed or timed-out env: never summarise a partial set
        requested = cfg.eval_episodes * len(eval_splits(cfg, env_id))
        raise IncompleteRunError(
            f"{len(missing)} of {requested} evaluation episodes were dropped (the log above "
            f"says why); run the same command again to play them ({run_dir})"
        )
    write_samples(cfg, env_id, run_dir, policy)
    requested = {s.name for s in eval_splits(cfg, env_id)}
    episodes = [
        e
        for e in records.read_episodes(run_dir)
        if e.split in requested and e.index < cfg.eval_episodes
    ]
    rows = summarize(episodes)
    records.atomic_write_json(
        run_dir / records.DONE_FILE, {"summary": rows, "train_step": train_step}
    )
    print(format_summary(run_dir.name, method_label(cfg), rows))
    for row in rows:
        if row["truncated_pct"] > 50:
            print(
                f"warning: {row['truncated_pct']:.0f} % of {row['split']} episodes hit the step "
                f"limit T = {step_limit(cfg)} before ending; a longer --max-episode-steps "
                "may be needed to measure success"
            )
    print(f"run folder: {run_dir}")
    return run_dir


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m benchmarks.run`."""
    try:
        run(parse_config(argv))
    except NonFiniteError as error:  # a NaN reward or loss is bad input: one line, exit 2
        raise UsageError(str(error)) from error
    except DamagedFileError as error:  # a corrupt record or checkpoint: one line, exit 2
        raise UsageError(str(error)) from error
    except IncompleteRunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
