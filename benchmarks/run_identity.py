"""A run's identity and name: the result-deciding fields of a `RunConfig`, resolved
(`benchmarks/run_settings.py`), hashed into the run folder's name (same configuration,
same folder, so a rerun resumes), and the leaderboard row derived from them
(`method_config`, `method_fields`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from creditgym.benchmarks import common
from creditgym.benchmarks.run_config import NON_IDENTITY_FIELDS, RunConfig
from creditgym.benchmarks.run_settings import (
    EVAL_ONLY,
    NO_CREDIT,
    canonical_credit_options,
    game_set,
    group_size,
    model_dtype,
    prompt_history,
    step_limit,
    trains,
)
from creditgym.report import records


def run_identity(cfg: RunConfig) -> dict[str, Any]:
    """Every result-deciding field of `cfg`, as JSON values: what the run name hashes and
    config.json records (so that a folder reused under `--name` can be checked)."""
    identity = {
        key: value
        for key, value in dataclasses.asdict(cfg).items()
        if key not in NON_IDENTITY_FIELDS
    }
    identity["env"] = common.env_id(cfg.env)
    identity["group_size"] = group_size(cfg)
    identity["max_episode_steps"] = step_limit(cfg)
    # Named credit options as parsed values: off their defaults, sorted, one spelling each
    # (`credit.options.canonical_texts`), so `x=true`, `x=True` and `x=1` are one run and
    # an option spelled out at its default is the run without it.
    identity["credit_options"] = list(canonical_credit_options(cfg))
    # The resolved K: an unset K and the K it resolves to on that env are one run.
    identity["history_len"] = prompt_history(cfg)
    # The dtype decides results, the device alone does not: hash the resolved dtype.
    identity["dtype"] = model_dtype(cfg)
    # Another summation order only when on: left out at its default, so the runs made
    # before the option keep their names.
    if not cfg.update_distinct_rows:
        del identity["update_distinct_rows"]
    # The data played decides results (ALFWorld: which game set), so a run on other data
    # gets another folder.
    played = game_set(cfg)
    if played is not None:
        identity["game_set"] = played.description
    return json.loads(json.dumps(identity, default=str))


def run_name(cfg: RunConfig) -> str:
    """Readable name plus a hash of every result-deciding field (same config, same name)."""
    if cfg.name:
        return cfg.name
    return hashed_name(cfg, run_identity(cfg))


def hashed_name(cfg: RunConfig, identity: Mapping[str, Any]) -> str:
    """The derived run name: the readable fields of `cfg` (env, faults, env options, model,
    method, seed) and the first hex digits of the SHA-256 of `identity` as sorted JSON."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    what = (
        f"{cfg.trainer}-{cfg.credit}-G{group_size(cfg)}-{cfg.steps}steps"
        if trains(cfg)
        else EVAL_ONLY
    )
    options = [re.sub(r"[^A-Za-z0-9.]+", "", option) for option in cfg.env_options]
    parts = [cfg.model, what, f"seed{cfg.seed}", digest[:6]]
    variant = [*cfg.faults, *options]
    return _slug(common.output_name(None, common.env_id(cfg.env), parts, variant, "-"))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


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

    Derived from the identity alone, so every result-deciding setting it keeps is in the
    row, at its default too: two runs share a row exactly when they differ in nothing else
    than what is dropped here."""
    dropped = {
        "seed",
        *TASK_FIELDS,
        *MEASUREMENT_FIELDS,
        *(() if trains(cfg) else TRAINING_ONLY_FIELDS),
    }
    kept = {key: value for key, value in run_identity(cfg).items() if key not in dropped}
    return {**kept, **method_fields(cfg)}


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
