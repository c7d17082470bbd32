"""Formula or model: `creditgym decomposition`.

    creditgym decomposition                       # every setting, both models
    creditgym decomposition --settings keydoor:delay=4 --models small-warm

HCAPO, its seed variant and HP-RLVR turn the policy's own hindsight, p(a | s, outcome),
into credit. Their error against the exact advantage A(s, a) has two causes: the formula
(how a hindsight ratio or divergence becomes an advantage) and the model (how well the
policy reads the outcome). On an env that describes itself as a finite MDP the hindsight
distribution is exact (Harutyunyan et al. 2019, arXiv 1912.02503;
`credit.exact_hindsight`), so the two separate. Per setting (an env and one option, e.g.
`keydoor:delay=4`) and per policy model, on one pool of that model's rollouts and that
model's exact ground truth (`measure.pools.prepare_pool`):

1. each hindsight module twice, with the same formula and options: its `exact` source
   (`credit.exact_source.EXACT_CLASSES`: exact per-token hindsight from the return-to-go
   law) and its `model` source (the registered module: the policy's own hindsight pass).
   Both are scored against A as `benchmarks.credit_truth` scores them (Pearson of credit
   with A over every step, key-step sign agreement, mean cosine of one batch's gradient
   with the exact gradient; `measure.truth_metrics`). The exact row measures the formula;
   the drop from it to the model row measures the model;
2. the model's hindsight calibration over the pool's visited steps (an estimate of E_s
   under the policy's visit distribution): KL(h_exact(. | s_t, V) || h_model(. | s_t, V)),
   with h_model the constrained distribution over the state's commands that the model
   gives under HCAPO's hindsight prompt (the verdict V of the episode and its final
   action; `measure.ground_truth.trie_action_logprobs` at the rollout's sampling settings,
   as the policy table is built), beside KL(h_exact || pi) (what ignoring the outcome
   would cost); and the agreement of the ratios h / pi at the taken action: Pearson of
   log(h_model / pi) with log(h_exact / pi), and the fraction of steps with
   |log(h_exact / pi)| > `measure.decomposition.RATIO_SIGN_TOL` whose model log-ratio
   has the same sign (`measure.decomposition`).

Standard errors: the correlations, sign agreements and KLs by a bootstrap over the pool's
groups (`--bootstrap` resamples; steps of one group share a task and the env's draws, so
they are not independent), the cosine as the standard deviation over batches / sqrt(batches).

Writes `<out>/cells.jsonl` (one record per setting and model, fsynced: an interrupted run
keeps every finished cell), and from it `<out>/decomposition.csv` and `.md` (with the
command) after every cell. The same command run again skips the cells the record holds;
a cell written with other numeric options is a usage error (`--fresh` starts afresh).
One writer at a time (`benchmarks.lock`). Usage errors: one line, exit 2.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from creditgym import credit, envs
from creditgym.agents.atomic import DamagedFileError, atomic_write_text
from creditgym.agents.trajectory import REWARD_CHANNELS
from creditgym.benchmarks import common, lock
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error
from creditgym.credit.base import build
from creditgym.credit.exact_source import EXACT_CLASSES, EXACT_OPTIONS
from creditgym.envs.options import EnvOptions
from creditgym.measure.decomposition import agreement_row, calibration, calibration_row, on_channel
from creditgym.measure.ground_truth import TaskMDPs
from creditgym.measure.pools import (
    ROLLOUT_SEED_BASE,
    PoolError,
    PoolSettings,
    check_finite_mdp,
    module_credits,
    prepare_pool,
)
from creditgym.measure.prefetch import prefetch_modules
from creditgym.models.registry import LoadedModel
from creditgym.report.records import JsonlAppender, iter_jsonl
from creditgym.report.tables import mapping_table

CELLS_FILE = "cells.jsonl"
STEM = "decomposition"
SOURCES = ("exact", "model")


@dataclass(frozen=True)
class DecompositionArgs:
    """Separate a hindsight method's formula error from its model's (exact hindsight)."""

    settings: tuple[str, ...] = (
        "keydoor:delay=1",
        "umbrella:length=2",
        "keydoor:delay=4",
        "umbrella:length=4",
        "keydoor:delay=8",
        "umbrella:length=8",
    )
    """Instrument settings, each `env:key=value[,key=value]` (a finite-MDP env); run in
    this order (cheapest first), each model in turn."""
    models: tuple[str, ...] = ("small-warm", "smollm2-135m")
    """Policy models; each is both the policy and the hindsight reader."""
    pools: tuple[int, ...] = (128, 32)
    """Trajectories per setting, one per model in the order of --models."""
    modules: tuple[str, ...] = ("hcapo", "hcapo_seed", "hp_rlvr")
    """Hindsight modules (each needs an exact-source class)."""
    channels: tuple[str, ...] = ("outcome", "return")
    """Reward channels (`agents.trajectory.REWARD_CHANNELS`), each scored on the same pool:
    the trajectories paid on it, the truth of the MDP paid on it, the verdict V it gives."""
    group_size: int = 8
    """G: rollouts per group; the batch is one group (the most batches for the cosine)."""
    tasks: int = 2
    """Distinct tasks per setting; groups cycle through them."""
    bootstrap: int = 200
    """Resamples of the pool's groups for the standard errors."""
    seed: int = 0
    """Seed of the tasks, rollouts and bootstrap."""
    out: Path = Path("results/decomposition")
    """Folder of cells.jsonl, decomposition.csv and decomposition.md."""
    fresh: bool = False
    """Discard the cells already written and compute every one again."""


@dataclass(frozen=True)
class Setting:
    """One instrument setting: an env and the options it is made with."""

    label: str
    env: str
    options: EnvOptions

    @property
    def kwargs(self) -> dict[str, Any]:
        """The env's constructor kwargs: its options off their defaults."""
        return self.options.kwargs()


def parse_setting(text: str) -> Setting:
    """`keydoor:delay=4` -> Setting("keydoor:delay=4", "keydoor", KeyDoorOptions(delay=4))."""
    env, sep, options = text.partition(":")
    if not sep or not env or not options:
        raise UsageError(f"--settings takes env:key=value[,key=value], got {text!r}")
    env_id = common.env_id(env)
    return Setting(text, env, common.env_options(env_id, options.split(","), "--settings"))


def pool_option(setting: Setting) -> tuple[str, int]:
    """The setting's horizon option (`EnvInfo.horizon_option`) and its value, which seeds
    the pool."""
    info = envs.ENVS[setting_env_id(setting)]
    value = info.horizon(setting.options)
    if info.horizon_option is None or value is None:
        raise UsageError(f"{setting.label}: the env has no horizon option to seed the pool")
    return info.horizon_option, value


def pool_settings(args: DecompositionArgs, pool: int) -> PoolSettings:
    """How a cell's tasks are drawn and its pool sampled (`measure.pools`)."""
    return PoolSettings(
        tasks=args.tasks,
        pool=pool,
        group_size=args.group_size,
        noise="shared",
        temperature=1.0,
        gamma=1.0,
        max_new_tokens=48,
        num_envs=8,
        seed=args.seed,
    )


def setting_env_id(setting: Setting) -> str:
    """The setting's registered env id; UsageError unless it is a finite MDP."""
    env_id = common.env_id(setting.env)
    try:
        check_finite_mdp(env_id)
    except PoolError as error:
        raise UsageError(str(error)) from None
    return env_id


def validate_args(args: DecompositionArgs) -> list[tuple[Setting, str, int]]:
    """The cells (setting, model, pool) in run order; UsageError on any bad option."""
    if len(args.pools) != len(args.models):
        raise UsageError(f"--pools needs one size per model ({len(args.models)}), got {args.pools}")
    if args.bootstrap < 2:
        raise UsageError("--bootstrap must be >= 2")
    for channel in args.channels:
        if channel not in REWARD_CHANNELS:
            raise UsageError(
                f"unknown reward channel {channel!r}; valid: {', '.join(REWARD_CHANNELS)}"
            )
    for name in args.modules:
        if name not in EXACT_CLASSES:
            raise UsageError(
                f"no exact-source class for {name!r}; valid: {', '.join(sorted(EXACT_CLASSES))}"
            )
    if args.group_size < 1 or args.tasks < 1:
        raise UsageError("--group-size and --tasks must be >= 1")
    settings = [parse_setting(text) for text in args.settings]
    for setting in settings:
        setting_env_id(setting)
        pool_option(setting)
    for pool in args.pools:
        if pool < 2 * args.group_size or pool % args.group_size:
            raise UsageError(f"pool {pool} must be a multiple of --group-size, at least two groups")
    return [
        (setting, model, pool)
        for model, pool in zip(args.models, args.pools, strict=True)
        for setting in settings
    ]


def class_path(cls: type) -> str:
    """`package.module:Class`, as `--credit` names a class that is not registered: by its
    folder (`credit.exact_source:HCAPOExact`), as typed at the repository root and as the
    committed cells and configs name it (`credit.import_module` finds it installed too)."""
    return f"{cls.__module__.removeprefix('creditgym.')}:{cls.__qualname__}"


# The options a cell's numbers depend on (besides its setting, model and pool).
NUMERIC_OPTIONS = ("modules", "channels", "group_size", "tasks", "bootstrap", "seed")
# How a cell is scored, recorded in its config: 2 = exact divergences below
# `credit.exact_hindsight.DIVERGENCE_TOL` are 0 (`credit.exact_source.EXACT_OPTIONS`) and
# key steps whose |credit| <= `measure.truth_metrics.CREDIT_SIGN_TOL` are left out of the
# sign agreement and counted apart. A cell without it was scored before (signed float
# noise in the divergences, a zero credit counted as a disagreement): the command
# computes it again instead of keeping it.
SCORING_RULE = 2


def cell_config(args: DecompositionArgs, pool: int) -> dict[str, Any]:
    """The options a cell's numbers depend on, as its JSON record reads back (lists)."""
    options = {"pool": pool, **{name: asdict(args)[name] for name in NUMERIC_OPTIONS}}
    return json.loads(json.dumps({**options, "rule": SCORING_RULE}))


def current(record: Mapping[str, Any]) -> bool:
    """Whether a cell was scored by the current `SCORING_RULE`."""
    return record["config"].get("rule") == SCORING_RULE


def run_cell(
    args: DecompositionArgs, setting: Setting, model: str, pool: int, policy: LoadedModel
) -> dict[str, Any]:
    """One record: every module with both sources, and the model's calibration."""
    env_id = setting_env_id(setting)
    key, value = pool_option(setting)
    start = time.perf_counter()
    kwargs = dict(setting.kwargs)
    try:
        sampled = prepare_pool(
            pool_settings(args, pool),
            env_id,
            kwargs,
            policy,
            f"{key}={value}",
            ROLLOUT_SEED_BASE * (args.seed + 1) + 10_000 * value,
        )
    except PoolError as error:
        raise UsageError(str(error)) from error
    mdps = TaskMDPs(env_id, kwargs)
    rng = np.random.default_rng(args.seed)
    rows, calibrations = [], []
    for channel in args.channels:
        prepared = on_channel(sampled, channel, mdps)
        context = prepared.context
        readers = [build(credit.resolve(name), context) for name in args.modules]
        views = prefetch_modules(context.score_memo, policy, readers, prepared.pool, history_len=0)
        print(
            f"  {channel}: {views} distinct views scored by {time.perf_counter() - start:.0f} s",
            flush=True,
        )
        for name in args.modules:
            classes = (EXACT_CLASSES[name], credit.resolve(name))
            for source, cls in zip(SOURCES, classes, strict=True):
                options = EXACT_OPTIONS.get(name) if source == "exact" else None
                scored = context if options is None else replace(context, options=options)
                credits = module_credits(cls, scored, prepared.pool, args.group_size)
                rows.append(
                    {
                        "channel": channel,
                        "module": name,
                        "source": source,
                        "credit": name if source == "model" else class_path(cls),
                        **agreement_row(prepared, credits, args.group_size, args.bootstrap, rng),
                    }
                )
        steps = calibration(prepared, policy)
        calibrations.append(
            {"channel": channel, **calibration_row(prepared, steps, args.bootstrap, rng)}
        )
    record = {
        "setting": setting.label,
        "model": model,
        "config": cell_config(args, pool),
        "exact_return": sampled.exact_return,
        "sampled_return": sampled.sampled_return,
        "rows": rows,
        "calibration": calibrations,
        "seconds": time.perf_counter() - start,
    }
    print(f"  {setting.label} with {model}: {record['seconds']:.0f} s", flush=True)
    return record


def read_cells(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(setting, model) -> its record; UsageError on a damaged file."""
    if not path.exists():
        return {}
    try:
        return {(record["setting"], record["model"]): record for record in iter_jsonl(path)}
    except (DamagedFileError, KeyError, TypeError) as error:
        raise UsageError(f"{path} cannot be resumed ({error}); pass --fresh") from error


def plus_minus(value: float, error: float) -> str:
    if not math.isfinite(value):
        return UNDEFINED
    return f"{value:.2f} ± {error:.2f}" if math.isfinite(error) else f"{value:.2f}"


# A metric with nothing to measure (the tables' note says when).
UNDEFINED = "–"
UNDEFINED_NOTE = (
    f"{UNDEFINED}: undefined. `key steps` counts the pool's key steps (KeyDoor: taking "
    "the key); with none, there is no key step to sign. A pool in which no rollout "
    "succeeds pays 0 on the outcome channel at every step, so every module's credit is "
    "0 there: nothing to correlate, no gradient to compare. `small credit exact / model`: "
    "key steps whose |credit| <= 1e-6 (`measure.truth_metrics.CREDIT_SIGN_TOL`), left out "
    "of `key_sign` (no sign to agree with); exact divergences below 1e-12 bits are 0 "
    "(`credit.exact_hindsight.DIVERGENCE_TOL`)."
)
STALE_NOTE = (
    "Rows marked `(earlier rule)` come from cells scored before that rule (signed float "
    "noise in the exact divergences, a zero credit counted as a disagreement; no count of "
    "small credit): this command computes them again when their model is run."
)


def table_rows(cells: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[dict]]:
    """The agreement rows and the calibration rows, flattened for the csv and the tables."""
    agreement, calibrated = [], []
    for cell in cells:
        key = {"setting": cell["setting"], "model": cell["model"], "pool": cell["config"]["pool"]}
        agreement.extend({**key, **row, "current": current(cell)} for row in cell["rows"])
        calibrated.extend({**key, **row} for row in cell["calibration"])
    return agreement, calibrated


def markdown(cells: Sequence[Mapping[str, Any]], command: str) -> str:
    """Two tables: agreement with A per source, and the model's calibration."""
    if not cells:
        return "No cell finished yet.\n"
    agreement, calibrated = table_rows(cells)
    wide: dict[tuple, dict[str, Any]] = {}
    for row in agreement:
        entry = wide.setdefault(
            (row["channel"], row["setting"], row["model"], row["module"]),
            {
                "channel": row["channel"],
                "setting": row["setting"],
                "model": row["model"] + ("" if row["current"] else " (earlier rule)"),
                "pool": str(row["pool"]),
                "module": row["module"],
                "key steps": str(int(row["key_steps"])),
            },
        )
        for metric in ("pearson", "key_sign", "cos"):
            entry[f"{metric} {row['source']}"] = plus_minus(row[metric], row[f"{metric}_se"])
        small = row.get("key_small_credit")
        entry[f"small credit {row['source']}"] = UNDEFINED if small is None else str(int(small))
    columns = ["channel", "setting", "model", "pool", "module", "key steps"]
    columns += [f"{m} {s}" for m in ("pearson", "key_sign", "cos") for s in SOURCES]
    columns += [f"small credit {s}" for s in SOURCES]
    calibration_table = [
        {
            "channel": row["channel"],
            "setting": row["setting"],
            "model": row["model"],
            "steps": str(int(row["steps"])),
            "KL(h_exact ‖ h_model)": plus_minus(row["kl_model"], row["kl_model_se"]),
            "KL(h_exact ‖ pi)": plus_minus(row["kl_policy"], row["kl_policy_se"]),
            "ratio pearson": plus_minus(row["ratio_pearson"], row["ratio_pearson_se"]),
            "ratio sign": plus_minus(row["ratio_sign"], row["ratio_sign_se"]),
            "signed steps": str(int(row["ratio_signed_steps"])),
        }
        for row in calibrated
    ]
    return (
        "# Formula or model: hindsight credit with exact and with the model's hindsight\n\n"
        f"Produced by `{command}` (method: benchmarks/decomposition.py, "
        "docs/exact_hindsight.md). Value ± standard error (bootstrap over groups; the "
        "cosine over batches of one group).\n\n"
        "## Agreement with the exact advantage A (exact source / model source)\n\n"
        f"{mapping_table(list(wide.values()), columns)}\n\n"
        f"{UNDEFINED_NOTE}\n\n"
        + (f"{STALE_NOTE}\n\n" if not all(current(cell) for cell in cells) else "")
        + "## The model's hindsight against the exact one (visited steps)\n\n"
        f"{mapping_table(calibration_table, list(calibration_table[0]))}\n"
    )


# The csv's columns, in this order whichever way the records were read back.
CELL_KEY = ["setting", "model", "pool", "channel"]
AGREEMENT_COLUMNS = [*CELL_KEY, "module", "source", "credit", "pearson", "pearson_se"]
AGREEMENT_COLUMNS += ["key_sign", "key_sign_se", "key_steps", "key_small_credit", "cos"]
AGREEMENT_COLUMNS += ["cos_se", "batches", "current"]
CALIBRATION_COLUMNS = [*CELL_KEY, "steps", "kl_model", "kl_model_se", "kl_policy"]
CALIBRATION_COLUMNS += ["kl_policy_se", "ratio_pearson", "ratio_pearson_se", "ratio_sign"]
CALIBRATION_COLUMNS += ["ratio_sign_se", "ratio_signed_steps"]


def write_tables(cells: Sequence[Mapping[str, Any]], out: Path, command: str) -> None:
    agreement, calibrated = table_rows(cells)
    buffer = io.StringIO()
    for rows, columns in ((agreement, AGREEMENT_COLUMNS), (calibrated, CALIBRATION_COLUMNS)):
        if rows:
            writer = csv.DictWriter(buffer, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
            buffer.write("\n")
    atomic_write_text(out / f"{STEM}.csv", buffer.getvalue())
    atomic_write_text(out / f"{STEM}.md", markdown(cells, command))


def run(args: DecompositionArgs, argv: Sequence[str]) -> Path:
    """Every cell not yet written, in order; the tables rewritten after each."""
    cells = validate_args(args)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--out {args.out} cannot be written: {error}") from error
    path = args.out / CELLS_FILE
    command = " ".join(["creditgym decomposition", *([shlex.join(argv)] if argv else [])])
    with lock.hold(lock.output_lock(args.out / STEM), str(path)):
        if args.fresh and path.exists():
            path.unlink()
        done = read_cells(path)
        pools = dict(zip(args.models, args.pools, strict=True))
        for key, record in list(done.items()):
            if key[1] in pools and not current(record):
                del done[key]  # scored by an earlier rule: computed again below
        for (setting, model), record in done.items():
            pool = pools.get(model)
            if pool is not None and record["config"] != cell_config(args, pool):
                raise UsageError(
                    f"{path}: {setting} with {model} was written with other options "
                    f"({record['config']}); pass --fresh to recompute"
                )
        policies: dict[str, LoadedModel] = {}
        with JsonlAppender(path) as appender:
            for setting, model, pool in cells:
                if (setting.label, model) in done:
                    print(f"{setting.label} with {model}: kept from {path}")
                    continue
                if model not in policies:
                    policies.clear()  # one model in memory at a time
                    policies[model] = common.load_policy(model)
                print(f"{setting.label} with {model} (pool {pool}):", flush=True)
                record = run_cell(args, setting, model, pool, policies[model])
                appender.append(record)
                done[(setting.label, model)] = record
                write_tables(ordered(done, cells), args.out, command)
        write_tables(ordered(done, cells), args.out, command)
    print((args.out / f"{STEM}.md").read_text(encoding="utf-8"))
    return args.out / f"{STEM}.md"


def ordered(
    done: Mapping[tuple[str, str], Mapping[str, Any]], cells: Sequence[tuple[Setting, str, int]]
) -> list[Mapping[str, Any]]:
    """The finished cells in run order, then the record's other cells (another model's,
    kept in the tables when only some models run) in the record's order."""
    keys = [(setting.label, model) for setting, model, _ in cells]
    return [done[key] for key in keys if key in done] + [
        record for key, record in done.items() if key not in keys
    ]


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym decomposition`."""
    return common.run_scoring_command(DecompositionArgs, "decomposition", __doc__, run, argv)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
