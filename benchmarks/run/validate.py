"""Checks of a run's plan before any work starts: every name, number, path and device
that resolving it (`benchmarks/run/plan.py`) did not already look up, and a run folder
that holds another configuration or vocabulary; each problem one `UsageError` line
(exit status 2).
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from pathlib import Path

import torch

from creditgym.agents.atomic import DamagedFileError
from creditgym.benchmarks import common
from creditgym.benchmarks.cli import UsageError, lookup, suggest
from creditgym.benchmarks.run.build import SCRIPTED_AGENTS, TRAINERS, credit_class, make_env
from creditgym.benchmarks.run.config import EVAL_ONLY, NO_CREDIT
from creditgym.benchmarks.run.identity import method_label
from creditgym.benchmarks.run.plan import RunPlan
from creditgym.credit.base import DEFAULT_CONVENTION
from creditgym.models.registry import (
    MODELS,
    hub_lookups_allowed,
    in_hub_cache,
    unknown_model_message,
    vocabulary,
)
from creditgym.report import records


def validate(plan: RunPlan) -> None:
    """Check every name and path before any work starts (one clear line per problem)."""
    cfg, env_id = plan.config, plan.env_id
    check_run_name(cfg.name)
    # Each module declares the conventions it can follow (a `package.module:Class` plug-in
    # is imported and checked against the contract here); `none` computes no credit.
    offered = (
        credit_class(cfg.credit).conventions if cfg.credit != NO_CREDIT else (DEFAULT_CONVENTION,)
    )
    lookup(f"--credit-convention of {cfg.credit}", cfg.credit_convention, {c: c for c in offered})
    lookup("trainer", cfg.trainer, {name: name for name in (*TRAINERS, EVAL_ONLY)})
    if cfg.update_distinct_rows and not (plan.trains and cfg.trainer == "policy_gradient"):
        raise UsageError("--update-distinct-rows changes the policy_gradient trainer's update")
    if cfg.eval_episodes < 0 or cfg.steps < 0 or plan.group_size < 1:
        raise UsageError("--eval-episodes and --steps must be >= 0 and --group-size >= 1")
    if cfg.env_options:  # parsed by the env's options class; building it checks the rest
        make_env(env_id, plan.env_kwargs()).close()
    families = plan.env.task_families
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
            ("--seed", cfg.seed, 0),
        )
    )
    if cfg.learning_rate is not None and not (
        math.isfinite(cfg.learning_rate) and cfg.learning_rate > 0
    ):
        raise UsageError(f"--learning-rate must be a finite number > 0 (got {cfg.learning_rate})")
    check_device(cfg.device)
    check_model_name(cfg.model)
    if cfg.model in SCRIPTED_AGENTS and plan.trains:
        raise UsageError(
            f"--model {cfg.model} is a scripted agent and cannot be trained; "
            f"use --credit {NO_CREDIT} to evaluate it"
        )
    check_out_writable(cfg.out)
    check_run_folder(plan)
    check_vocabulary(plan)


def check_vocabulary(plan: RunPlan) -> None:
    """Refuse to resume a run whose config.json records another vocabulary than the one
    `--model` reads now (`models.registry.vocabulary`: `small`'s committed tokenizer file):
    its checkpoints' token ids would mean other text. A folder that records none (written
    before runs recorded it) is resumed as before."""
    config_file = plan.run_dir / records.CONFIG_FILE
    try:
        recorded = records.read_json(config_file).get("vocabulary")
    except (OSError, DamagedFileError):
        # No folder yet, or a config.json that `prepare_run_dir` rewrites anyway (a
        # damaged one is the episodes' and checkpoints' checks to report, not this one).
        return
    current = vocabulary(plan.config.model)
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
    """Refuse a model name found nowhere before any work, in one line.

    A name that is not registered, not a folder and close to a registered name is a typo:
    refused with the close names. With hub lookups off (the default,
    `models.registry.hub_lookups_allowed`), a name not in the local Hugging Face cache is
    refused too (asking a hub costs about 50 s of retries where none is reachable); with
    them on, an `org/name` id is left for the hub to find."""
    if name in MODELS or name in SCRIPTED_AGENTS or Path(name).expanduser().exists():
        return
    hint = suggest(name, [*MODELS, *SCRIPTED_AGENTS])
    if hint and "/" not in name:
        raise UsageError(f"unknown model {name!r}.{hint}")
    if not hub_lookups_allowed() and not in_hub_cache(name):
        raise UsageError(unknown_model_message(name) + hint)


def check_out_writable(out: Path) -> None:
    """Write a probe file in `out`, or raise a one-line UsageError. Folders created for the
    probe are removed again: a check writes nothing (the run creates its folder when it
    starts, and a sweep validates every run before the first starts)."""
    created = [folder for folder in (out, *out.parents) if not folder.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-probe-"):
            pass
    except OSError as error:
        raise UsageError(f"--out {out} cannot be written: {error.strerror or error}") from error
    finally:
        for folder in created:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()


def check_run_name(name: str | None) -> None:
    """A `--name` that names one folder inside `--out`, or a one-line UsageError: no
    separator, no `.` or `..`, nothing absolute, no leading dot (the staging folders'
    mark), printable characters only."""
    if name is None:
        return
    problem = None
    if not name:
        problem = "is empty"
    elif "/" in name or "\\" in name or os.sep in name or (os.altsep and os.altsep in name):
        problem = "holds a path separator"
    elif name.startswith("."):
        problem = "starts with a dot (`.`, `..` and hidden folders are not run folders)"
    elif not name.isprintable():
        problem = "holds a control character"
    if problem:
        raise UsageError(
            f"--name {name!r} {problem}; a run name is one folder inside --out, e.g. "
            "--name my-run (put the folder's parent in --out)"
        )


# Files a run writes once its work begins; a folder holding any of them is a run's.
RECORD_FILES = (
    records.EPISODES_FILE,
    records.METRICS_FILE,
    records.SAMPLES_FILE,
    records.TRAINING_FILE,
    records.DONE_FILE,
    records.EVAL_TRAJECTORIES_FILE,
    records.CURVE_FILE,
    "checkpoints",
    "final",
)


def check_run_folder(plan: RunPlan) -> None:
    """Refuse a run whose folder holds another configuration, judged from what the folder
    holds: records without a config.json (nothing says whose they are), a config.json of
    another identity (a reused `--name`), or episodes labelled with another env or method.
    Resuming would add this configuration's work to the other's and relabel it."""
    run_dir = plan.run_dir
    if not run_dir.is_dir():
        return
    held = sorted(name for name in RECORD_FILES if (run_dir / name).exists())
    if not (run_dir / records.CONFIG_FILE).is_file():
        if held:
            raise UsageError(
                f"{run_dir} holds run records ({', '.join(held[:3])}) but no "
                f"{records.CONFIG_FILE}, so whose they are cannot be checked; choose "
                "another --name or --out, or delete the folder to run afresh"
            )
        return
    try:
        recorded = records.read_json(run_dir / records.CONFIG_FILE).get("identity")
    except DamagedFileError as error:
        raise UsageError(str(error)) from error
    # A derived name hashes the identity: the same name is the same configuration.
    if plan.config.name:
        check_identity(run_dir, recorded, plan.identity)
    check_episode_labels(plan, run_dir)


def check_identity(
    run_dir: Path, recorded: dict[str, object] | None, identity: dict[str, object]
) -> None:
    """A UsageError naming up to three fields where `recorded` and `identity` differ."""
    if recorded is None:
        raise UsageError(
            f"{run_dir} records no configuration identity (written by an older creditgym); "
            "choose another --name"
        )
    keys = {*recorded, *identity}
    differing = sorted(key for key in keys if recorded.get(key) != identity.get(key))
    if differing:
        shown = "; ".join(
            f"{key} {recorded.get(key, 'unset')} there, {identity.get(key, 'unset')} here"
            for key in differing[:3]
        )
        raise UsageError(f"{run_dir} holds another configuration ({shown}); choose another --name")


def check_episode_labels(plan: RunPlan, run_dir: Path) -> None:
    """The folder's episodes were played on this run's env by this run's method (a
    config.json copied over another run's records is caught here)."""
    expected = (plan.env_id, method_label(plan))
    try:
        episodes = records.read_episodes(run_dir)
    except DamagedFileError:
        # The run reports it in one line where it reads its records, and a sweep skips
        # that run and goes on (benchmarks/sweep.py): no verdict on whose they are here.
        return
    for number, episode in enumerate(episodes, start=1):
        if (episode.env, episode.method) != expected:
            raise UsageError(
                f"{run_dir / records.EPISODES_FILE}: episode {number} was played by "
                f"{episode.method!r} on {episode.env}, this run is {expected[1]!r} on "
                f"{expected[0]}; choose another --name or --out"
            )
