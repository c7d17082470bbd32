"""runs.csv: one line per trained run of a study's run folders (`run_row`), and the
rows' names (`method_name`).

Area under the curve: the trapezoid area of held-out success over rollouts used,
divided by the rollouts of the last point, so 1.0 is a policy at 100 % from the start.
Rollouts to a threshold: those used before the first curve point at or above it (None:
never reached; such runs count as not reaching it, never as fast).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from creditgym import credit
from creditgym.agents.trajectory import DEFAULT_REWARD_CHANNEL
from creditgym.cli import UsageError
from creditgym.credit.base import is_oracle
from creditgym.envs import ENVS
from creditgym.report import records

THRESHOLDS = (0.5, 0.8)

# The option that sets each instrument's horizon (`EnvInfo.horizon_option`), by the env's
# name as run records give it (`KeyDoor-v0`), in registration order.
HORIZON_OPTIONS = {
    info.id.split("/")[-1]: info.horizon_option for info in ENVS.values() if info.horizon_option
}


def option(config: Mapping[str, Any], key: str) -> Any:
    """One env option of a run, parsed by its env's options class (`EnvInfo.options`): the
    default where the run left it unset."""
    options = ENVS[config["env_id"]].options.parse(config.get("env_options", ()))
    return getattr(options, key)


def method_name(config: Mapping[str, Any]) -> str:
    """The study's row name: `method_form`, and the reward channel it trained on when not
    the default (`grpo on outcome`)."""
    channel = config.get("reward_channel", DEFAULT_REWARD_CHANNEL)
    name = method_form(config)
    return name if channel == DEFAULT_REWARD_CHANNEL else f"{name} on {channel}"


def method_form(config: Mapping[str, Any]) -> str:
    """Credit module, its convention when not creditgym's, the credit options it names,
    and the trainer when not policy gradient (`gigpo (verl-agent)`, `hcapo
    [do_no_harm=false]`, `sft+grpo`)."""
    name = config["credit"]
    if ":" in name:  # a module named by path is shown by its own name (`hcapo_exact`)
        name = credit.resolve(name).name
    if config.get("credit_convention", "creditgym") != "creditgym":
        name += f" ({config['credit_convention']})"
    if config.get("credit_options"):
        name += f" [{' '.join(sorted(config['credit_options']))}]"
    if config["trainer"] != "policy_gradient":
        name = f"{config['trainer']}+{name}"
    return name


def area_under_curve(points: Sequence[records.CurvePoint]) -> float:
    """Trapezoid area of success over rollouts, normalised by the last point's rollouts."""
    if len(points) < 2 or points[-1].rollouts == 0:
        return float("nan")
    x = np.array([p.rollouts for p in points], dtype=float)
    y = np.array([p.success_rate for p in points])
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / x[-1])


def first_reaching(
    points: Sequence[records.CurvePoint], threshold: float
) -> records.CurvePoint | None:
    return next((p for p in points if p.success_rate >= threshold), None)


def run_row(run: records.RunData) -> dict[str, Any]:
    """One trained run's line of runs.csv."""
    config = run.config
    env = str(config["env_id"]).split("/")[-1]
    points = records.curve_points(run)
    test = [e for e in run.episodes if e.index < config["eval_episodes"]]
    iterations = {}
    for record in run.metrics:  # one value per iteration (repeated on its optimiser steps)
        iterations[record["iteration"]] = record
    group = int(config["method_group_size"])
    success = np.array([r["rollout/success_rate"] for r in iterations.values()])
    zero_std = [r.get("credit/frac_reward_zero_std") for r in iterations.values()]
    row = {
        "run": run.run_dir.name,
        "task": run.env,
        "env": env,
        "horizon": option(config, HORIZON_OPTIONS[env]) if env in HORIZON_OPTIONS else None,
        "method": method_name(config),
        "form": method_form(config),
        # Rows are compared only on one channel, and oracles (credit.base.is_oracle) never.
        "channel": config.get("reward_channel", DEFAULT_REWARD_CHANNEL),
        "oracle": is_oracle(credit.resolve(config["credit"])),
        "seed": run.seed,
        "steps": int(config["steps"]),
        "learning_rate": config.get("learning_rate"),
        # The arithmetic the policy computed in, resolved (`float32`, `bfloat16-products`;
        # benchmarks/common.py resolve_dtype): `dtype = "fast"` resolves per processor.
        "precision": config.get("method_config", {}).get("dtype"),
        "group_size": group,
        "final_success": float(np.mean([e.success for e in test])),
        "eval_episodes": len(test),
        "auc": area_under_curve(points),
        "curve_points": len(points),
        "rollouts": records.rollouts_used(run.metrics),
        "train_seconds": records.training_clock(run.metrics)[-1] if run.metrics else 0.0,
        "zero_grad_fraction": float(np.mean([r["charts/grad_norm_is_zero"] for r in run.metrics])),
        # Groups whose rewards are all equal, measured, and predicted from the iteration's
        # success rate as if the reward were success alone: p^G + (1 - p)^G.
        "zero_std_groups": float(np.mean(zero_std)) if None not in zero_std else float("nan"),
        "predicted_zero_std": float(np.mean(success**group + (1 - success) ** group))
        if group > 1
        else float("nan"),
    }
    for threshold in THRESHOLDS:
        reached = first_reaching(points, threshold)
        percent = round(threshold * 100)
        row[f"rollouts_to_{percent}"] = reached.rollouts if reached else None
        row[f"seconds_to_{percent}"] = reached.train_seconds if reached else None
    return row


def runs_table(runs: Sequence[records.RunData]) -> pd.DataFrame:
    """runs.csv: trained runs with a learning curve (evaluation-only runs are baselines)."""
    rows = [run_row(run) for run in runs if run.training is not None and run.curve]
    if not rows:
        raise UsageError("no finished training run with a learning curve there yet")
    frame = name_budgets(pd.DataFrame(rows))
    twins = frame[frame.duplicated(["task", "method", "seed"], keep=False)]
    if not twins.empty:
        raise UsageError(f"two runs with the same task, method and seed: {twins.iloc[0].to_dict()}")
    return frame.sort_values(["env", "horizon", "task", "method", "seed"], na_position="first")


def name_budgets(frame: pd.DataFrame) -> pd.DataFrame:
    """Where one task's runs differ in iterations or learning rate (a calibration trying a
    larger budget), each row's name carries its own: `grpo (60 iterations) on outcome`;
    likewise where they differ in precision (a sweep continued on a processor where
    `dtype = "fast"` resolves otherwise), so that no row mixes arithmetic across its seeds:
    `grpo (float32)`. Rows of a task run at one budget and precision keep their plain names."""
    frame = frame.copy()
    names = []
    for row in frame.itertuples(index=False):
        same_task = frame[frame.task == row.task]
        budget = []
        if same_task.steps.nunique() > 1:
            budget.append(f"{row.steps} iterations")
        if same_task.learning_rate.nunique(dropna=False) > 1:
            budget.append(f"lr {row.learning_rate:g}")
        if same_task.precision.nunique(dropna=False) > 1:
            budget.append(str(row.precision))
        name = row.form + (f" ({', '.join(budget)})" if budget else "")
        names.append(name if row.channel == DEFAULT_REWARD_CHANNEL else f"{name} on {row.channel}")
    frame["method"] = names
    return frame


def baselines(runs: Sequence[records.RunData]) -> dict[str, float]:
    """Task -> the untrained policy's final success (its evaluation-only run)."""
    return {
        run.env: float(np.mean([e.success for e in run.episodes]))
        for run in runs
        if run.training is None and run.config["credit"] == "none"
    }


def type_success(runs: Sequence[records.RunData], frame: pd.DataFrame) -> pd.DataFrame:
    """Final success per task type (Umbrella's forecast, SysDiag's fault family): one line
    per run of `frame` (its row names) and type; empty for envs whose episodes carry no
    type."""
    method_of = dict(zip(frame.run, frame.method, strict=True))
    lines = []
    for run in runs:
        if run.run_dir.name not in method_of:
            continue
        test = [e for e in run.episodes if e.index < run.config["eval_episodes"] and e.task_type]
        for kind in sorted({e.task_type for e in test}):
            lines.append(
                {
                    "task": run.env,
                    "method": method_of[run.run_dir.name],
                    "seed": run.seed,
                    "type": kind,
                    "success": float(np.mean([e.success for e in test if e.task_type == kind])),
                }
            )
    return pd.DataFrame(lines, columns=["task", "method", "seed", "type", "success"])
