"""A run's identity and name: the result-deciding values of its plan
(`benchmarks/run/plan.py`), hashed into the run folder's name (same configuration, same
folder, so a rerun resumes), and the leaderboard row derived from them (`method_config`,
`method_fields`). Pure functions of the plan: nothing here parses an option.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from creditgym.benchmarks import common
from creditgym.benchmarks.run.config import EVAL_ONLY, NO_CREDIT, NON_IDENTITY_FIELDS
from creditgym.report import records

if TYPE_CHECKING:  # the plan names itself by these functions (`RunPlan.name`)
    from creditgym.benchmarks.run.plan import RunPlan


def run_identity(plan: RunPlan) -> dict[str, Any]:
    """Every result-deciding value of `plan`, as JSON values: what the run name hashes and
    config.json records (so that a folder reused under `--name` can be checked)."""
    cfg = plan.config
    # The env and credit options among them as parsed values (`RunPlan.config`): off
    # their defaults, one spelling each, in a fixed order (env options in their class's
    # declaration order, credit options sorted), so `x=true`, `x=True` and `x=1` are one
    # run, and so are `delay=16 variance=high`, `variance=high delay=16` and either with
    # the default `num_keys=1`.
    identity = {
        key: value
        for key, value in dataclasses.asdict(cfg).items()
        if key not in NON_IDENTITY_FIELDS
    }
    identity["env"] = plan.env_id
    identity["group_size"] = plan.group_size
    identity["max_episode_steps"] = plan.step_limit
    identity["credit_options"] = list(cfg.credit_options)
    # The resolved K: an unset K and the K it resolves to on that env are one run.
    identity["history_len"] = plan.history_len
    # The dtype decides results, the device alone does not: hash the resolved dtype.
    identity["dtype"] = plan.dtype
    # Another summation order only when on: left out at its default, so the runs made
    # before the option keep their names.
    if not cfg.update_distinct_rows:
        del identity["update_distinct_rows"]
    # The data played decides results (ALFWorld: which game set), so a run on other data
    # gets another folder.
    if plan.game_set is not None:
        identity["game_set"] = plan.game_set.description
    return json.loads(json.dumps(identity, default=str))


def run_name(plan: RunPlan) -> str:
    """Readable name plus a hash of every result-deciding value (same plan, same name)."""
    if plan.config.name:
        return plan.config.name
    return hashed_name(plan, plan.identity)


def hashed_name(plan: RunPlan, identity: Mapping[str, Any]) -> str:
    """The derived run name: the readable fields of `plan` (env, faults, env options, model,
    method, seed) and the first hex digits of the SHA-256 of `identity` as sorted JSON."""
    cfg = plan.config
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    what = (
        f"{cfg.trainer}-{cfg.credit}-G{plan.group_size}-{cfg.steps}steps"
        if plan.trains
        else EVAL_ONLY
    )
    options = [re.sub(r"[^A-Za-z0-9.]+", "", option) for option in cfg.env_options]
    parts = [cfg.model, what, f"seed{cfg.seed}", digest[:6]]
    variant = [*cfg.faults, *options]
    return _slug(common.output_name(None, plan.env_id, parts, variant, "-"))


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


def method_config(plan: RunPlan) -> dict[str, Any]:
    """A run's leaderboard row: its identity less the seed (a row averages over seeds) and
    the task fields, with the display fields of `method_fields` (eval-only: no training).

    Derived from the identity alone, so every result-deciding setting it keeps is in the
    row, at its default too: two runs share a row exactly when they differ in nothing else
    than what is dropped here."""
    dropped = {
        "seed",
        *TASK_FIELDS,
        *MEASUREMENT_FIELDS,
        *(() if plan.trains else TRAINING_ONLY_FIELDS),
    }
    kept = {key: value for key, value in plan.identity.items() if key not in dropped}
    return {**kept, **method_fields(plan)}


def method_fields(plan: RunPlan) -> dict[str, Any]:
    """Leaderboard row identity (`records.METHOD_FIELDS`): model, trainer, credit, G, steps."""
    cfg = plan.config
    if not plan.trains:
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
        "group_size": plan.group_size,
        "steps": cfg.steps,
    }


def method_label(plan: RunPlan) -> str:
    return records.method_label(method_fields(plan))
