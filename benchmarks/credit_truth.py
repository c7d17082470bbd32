"""Score every credit module against exact ground truth: `creditgym credit-truth`.

    creditgym credit-truth --env keydoor --credit all --model smollm2-135m
    creditgym credit-truth --env umbrella --sweep-kwarg length --sweep 2 4 8 \\
        --model uniform --noise independent

For each value of the swept env option (KeyDoor's `delay`, Umbrella's `length`), the
measurement of `measure.pools`: the policy's exact table and ground truth on each of
`--tasks` tasks (an LLM's constrained-decoding distribution, or the uniform policy with
`--model uniform`), a pool of `--pool` trajectories of that same policy (`--noise shared`
or `independent`), every distinct view the hindsight modules score scored once
(`measure.prefetch`), then per credit module and batch size B its credit over the pool's
batches scored against the truth (`measure.pools.score_module`: Pearson / Spearman with
A(s_t, a_t) and key-step sign agreement from the smallest B; per B the mean cosine of
the batch gradient with the exact one, the cosine of the mean, and the SNR).

Writes `results/credit_truth/<name>.csv`, `.md` (with the command) and `.png` (every
metric against the swept option, one line per module), after every swept value. Run
again, the same command skips the values its csv already holds (the configuration is
read back from the command in the .md and must match; `--fresh` recomputes).
Usage errors: one line, exit 2.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt
import tyro

from creditgym import credit, envs
from creditgym.benchmarks import common, lock
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, lookup
from creditgym.credit.base import build
from creditgym.measure.pools import (
    ROLLOUT_SEED_BASE,
    PoolError,
    PoolSettings,
    check_finite_mdp,
    prepare_pool,
    score_module,
)
from creditgym.measure.prefetch import prefetch_modules
from creditgym.models.registry import LoadedModel
from creditgym.report.tables import mapping_table

UNIFORM = "uniform"


@dataclass(frozen=True)
class CreditTruthArgs:
    """Score credit modules against the exact ground truth of a finite-MDP env."""

    env: str = "keydoor"
    """Environment (short name or registered id); it must describe itself as a finite MDP
    (`EnvInfo.finite_mdp`: KeyDoor, Umbrella)."""
    credit: str = "all"
    """Comma-separated credit modules, or `all` (modules that score with a model are
    skipped with --model uniform)."""
    model: str = "smollm2-135m"
    """Policy: a model name (smollm2-135m, tiny), a local folder, or `uniform` (the
    uniform table policy, no model)."""
    sweep_kwarg: str | None = None
    """Env option swept along the x axis; unset: the env's horizon option
    (`EnvInfo.horizon_option`: KeyDoor's delay, Umbrella's length)."""
    sweep: tuple[int, ...] = (1, 2, 4)
    """Values of the swept option."""
    env_kwargs: tuple[str, ...] = ()
    """Further env options as key=value, the env's declared options (`EnvInfo.options`,
    as `creditgym run`'s --env-options), e.g. variance=high."""
    tasks: int = 2
    """Distinct tasks (each needs its own ground truth); groups cycle through them."""
    pool: int = 256
    """Trajectories sampled per swept value (cut into batches of each size)."""
    group_size: int = 8
    """G: rollouts per group (GRPO / GiGPO / HCAPO groups)."""
    batch_sizes: tuple[int, ...] = (8, 32, 128)
    """Trajectories per batch (multiples of the group size)."""
    noise: Literal["shared", "independent"] = "shared"
    """shared: a group's rollouts share one reset seed, as a trainer's do; independent:
    each rollout its own seed (see the module docstring)."""
    temperature: float = 1.0
    """Sampling temperature of the LLM policy (the training temperature)."""
    gamma: float = 1.0
    """Discount of the ground truth."""
    max_new_tokens: int = 48
    """Token limit of one response (a command longer than this is refused)."""
    num_envs: int = 8
    """Parallel environments of the rollout."""
    seed: int = 0
    """Seed of the tasks, rollouts and sampling."""
    out: Path = Path("results/credit_truth")
    """Folder receiving the csv, md and png."""
    name: str | None = None
    """File name stem; derived from the configuration when unset."""
    fresh: bool = False
    """Recompute every swept value. By default a value whose rows (for every requested
    module) the csv of this file name already holds, written by the same configuration,
    is kept, so an interrupted sweep resumes where it stopped."""

    def pool_settings(self) -> PoolSettings:
        """The options the tasks and the pool are drawn with (`measure.pools`)."""
        return PoolSettings(
            **{field.name: getattr(self, field.name) for field in dataclasses.fields(PoolSettings)}
        )


def parse_kwargs(env_id: str, pairs: Sequence[str]) -> dict[str, Any]:
    """`("variance=high", "num_objects=2")` -> {"variance": "high", "num_objects": 2}
    (`benchmarks.common.env_options`, the one parser of env options)."""
    return common.env_options(env_id, pairs, "--env-kwargs").kwargs()


def swept_option(args: CreditTruthArgs, env_id: str) -> str:
    """--sweep-kwarg, else the env's horizon option; UsageError where it is none of the
    env's options or a swept value is out of its range."""
    options = envs.ENVS[env_id].options
    name = args.sweep_kwarg or envs.ENVS[env_id].horizon_option
    if name is None:
        raise UsageError(f"{env_id} has no horizon option: name one with --sweep-kwarg")
    lookup(f"option of {env_id}", name, {option: option for option in options.names()})
    for value in args.sweep:
        try:
            options(**{name: value})
        except ValueError as error:
            raise UsageError(f"--sweep: {error}") from None
    return name


def env_and_modules(args: CreditTruthArgs) -> tuple[str, list[str]]:
    """(env id, credit module names) after checking every option; UsageError otherwise."""
    env_id = common.env_id(args.env)
    try:
        check_finite_mdp(env_id)
    except PoolError as error:
        raise UsageError(str(error)) from None
    parse_kwargs(env_id, args.env_kwargs)
    swept_option(args, env_id)
    names = sorted(credit.REGISTRY) if args.credit == "all" else args.credit.split(",")
    for name in names:
        lookup("credit module", name, credit.REGISTRY)
    if args.group_size < 1 or args.tasks < 1 or not args.sweep:
        raise UsageError("--group-size and --tasks must be >= 1 and --sweep non-empty")
    for size in args.batch_sizes:
        if size < args.group_size or size % args.group_size:
            raise UsageError(f"batch size {size} is not a multiple of --group-size")
        if size > args.pool:
            raise UsageError(f"batch size {size} exceeds --pool {args.pool}")
    if args.pool % args.group_size:
        raise UsageError(f"--pool {args.pool} is not a multiple of --group-size")
    if args.temperature <= 0 or not 0 <= args.gamma <= 1:
        raise UsageError("--temperature must be > 0 and --gamma in [0, 1]")
    return env_id, names


def truth_policy(args: CreditTruthArgs) -> LoadedModel | None:
    """The LLM policy, or None for the uniform table."""
    return None if args.model == UNIFORM else common.load_policy(args.model, also_valid=[UNIFORM])


def truth_stem(args: CreditTruthArgs, env_id: str) -> str:
    """The output files' name without suffix: env, model, sweep, noise, G, pool, tasks, seed."""
    # The further options in their parsed form (`EnvOptions.canonical`): two spellings of
    # one setting write one file.
    options = common.env_options(env_id, args.env_kwargs, "--env-kwargs").canonical()
    extra = "".join(f"_{text.replace('=', '-')}" for text in options)
    sweep = f"{args.sweep_kwarg}{'-'.join(map(str, args.sweep))}{extra}"
    parts = [args.model, sweep, args.noise, f"G{args.group_size}", f"pool{args.pool}"]
    return common.output_name(args.name, env_id, [*parts, f"tasks{args.tasks}", f"seed{args.seed}"])


def format_value(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:.3g}"


def plot(rows: Sequence[Mapping[str, Any]], args: CreditTruthArgs, title: str, path: Path) -> None:
    """Every metric against the swept option, one line per module; SNR on a log axis."""
    metrics = ["pearson", "spearman", "key_sign"]
    metrics += [f"cos@{b}" for b in sorted(args.batch_sizes)]
    metrics += [f"snr@{b}" for b in sorted(args.batch_sizes)]
    columns = 3
    rows_of_panels = -(-len(metrics) // columns)
    figure, axes = plt.subplots(
        rows_of_panels, columns, figsize=(4.2 * columns, 3.2 * rows_of_panels), squeeze=False
    )
    modules = list(dict.fromkeys(row["module"] for row in rows))
    # One colour per registered module, the same in every plot.
    colours = {name: f"C{k}" for k, name in enumerate(sorted(credit.REGISTRY))}
    for axis, metric in zip(axes.flat, metrics, strict=False):
        for module in modules:
            chosen = [row for row in rows if row["module"] == module]
            axis.plot(
                [row[args.sweep_kwarg] for row in chosen],
                [row[metric] for row in chosen],
                marker="o",
                label=module,
                color=colours.get(module),
            )
        axis.set_title(metric)
        axis.set_xlabel(args.sweep_kwarg)
        if metric.startswith("snr"):
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(metrics) :]:
        axis.axis("off")
    axes.flat[0].legend(fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def score_value(
    args: CreditTruthArgs,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy: LoadedModel | None,
    names: Sequence[str],
    sweep_value: int,
) -> list[dict[str, Any]]:
    """Ground truth, pool and every module's scores at one value of the swept option."""
    try:
        prepared = prepare_pool(
            args.pool_settings(),
            env_id,
            env_kwargs,
            policy,
            f"{args.sweep_kwarg}={sweep_value}",
            ROLLOUT_SEED_BASE * (args.seed + 1) + 10_000 * sweep_value,
        )
    except PoolError as error:
        raise UsageError(str(error)) from error
    context, pool = prepared.context, prepared.pool
    if policy is not None:
        start = time.perf_counter()
        modules = [build(credit.resolve(name), context) for name in names]
        views = prefetch_modules(context.score_memo, policy, modules, pool, history_len=0)
        print(f"  {views} distinct views scored in {time.perf_counter() - start:.0f} s", flush=True)
    rows = []
    for name in names:
        start = time.perf_counter()
        scores = score_module(name, context, pool, prepared.truths, args.batch_sizes)
        seconds = time.perf_counter() - start
        rows.append(
            {
                args.sweep_kwarg: sweep_value,
                "module": name,
                **scores,
                "exact_return": prepared.exact_return,
                "sampled_return": prepared.sampled_return,
                "seconds": seconds,
            }
        )
        print(f"  {name}: {seconds:.0f} s", flush=True)
    return rows


def write_outputs(
    rows: Sequence[Mapping[str, Any]], args: CreditTruthArgs, env_id: str, argv: Sequence[str]
) -> Path:
    """Print the table; write it as csv and md (with the command), and the plot as png."""
    columns = [args.sweep_kwarg, "module", "pearson", "spearman", "key_sign", "key_steps"]
    for size in sorted(args.batch_sizes):
        columns += [f"cos@{size}", f"cos_mean@{size}", f"snr@{size}", f"batches@{size}"]
    table = mapping_table(rows, columns, format_value)
    print(table)
    stem = args.out / truth_stem(args, env_id)
    with open(stem.with_suffix(".csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    command = "creditgym credit-truth " + shlex.join(argv)
    title = f"{env_id}, {args.model}, noise {args.noise}, G={args.group_size}, pool {args.pool}"
    stem.with_suffix(".md").write_text(
        f"# Credit against exact ground truth: {title}\n\nProduced by `{command}`.\n\n{table}\n",
        encoding="utf-8",
    )
    plot(rows, args, title, stem.with_suffix(".png"))
    print(f"wrote {stem}.csv, .md, .png")
    return stem


# Options that change neither a row's numbers nor which rows a value has: a finished
# value may be kept when only these differ from the run that wrote it.
RESUME_FREE = ("sweep", "credit", "out", "name", "fresh")
# The command a report records: `creditgym credit-truth ...`, or in reports written before
# it was so named, `python -m benchmarks.credit_truth ...`.
COMMAND = re.compile(
    r"^Produced by `(?:creditgym credit-truth|python -m benchmarks\.credit_truth) ?(.*)`\.$", re.M
)


def finished_rows(
    args: CreditTruthArgs, env_id: str, names: Sequence[str]
) -> dict[int, list[dict[str, Any]]]:
    """Rows of the swept values this file name already holds, for a resumed run.

    {value: rows in the order of `names`} for each value whose rows cover every requested
    module; {} with `--fresh` or no csv yet. UsageError when the files were written by a
    different configuration, are corrupt, or hold values outside `--sweep` (a resumed file
    would drop them)."""
    stem = args.out / truth_stem(args, env_id)
    table = stem.with_suffix(".csv")
    if args.fresh or not table.exists():
        return {}
    retry = "pass --fresh to recompute it, or --name for a new file"
    try:
        found = COMMAND.search(stem.with_suffix(".md").read_text(encoding="utf-8"))
        if found is None:
            raise ValueError("its .md records no command")
        try:
            before = tyro.cli(CreditTruthArgs, args=shlex.split(found.group(1)))
        except SystemExit as error:
            raise ValueError("its .md records a command that no longer parses") from error
        before = dataclasses.replace(
            before, sweep_kwarg=swept_option(before, common.env_id(before.env))
        )
        with open(table, newline="", encoding="utf-8") as handle:
            stored = list(csv.DictReader(handle))
        by_value: dict[int, dict[str, dict[str, Any]]] = {}
        for row in stored:
            value = int(row[args.sweep_kwarg])
            parsed = {k: v if k == "module" else float(v) for k, v in row.items()}
            by_value.setdefault(value, {})[row["module"]] = {**parsed, args.sweep_kwarg: value}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{table} cannot be resumed ({error}); {retry}") from error
    changed = [
        f.name
        for f in dataclasses.fields(CreditTruthArgs)
        if f.name not in RESUME_FREE and getattr(before, f.name) != getattr(args, f.name)
    ]
    if changed:
        options = ", ".join("--" + name.replace("_", "-") for name in changed)
        raise UsageError(f"{table} was written with other {options}; {retry}")
    outside = sorted(set(by_value) - set(args.sweep))
    if outside:
        raise UsageError(
            f"{table} holds {args.sweep_kwarg} {outside} outside --sweep; add them to "
            f"--sweep or {retry}"
        )
    return {
        value: [modules[name] for name in names]
        for value, modules in by_value.items()
        if set(names) <= set(modules)
    }


def run(args: CreditTruthArgs, argv: Sequence[str]) -> Path:
    """Ground truth, pool and module scores for every swept value; writes the outputs."""
    env_id, names = env_and_modules(args)
    # The swept option resolved once: everything below reads it from `args`.
    args = dataclasses.replace(args, sweep_kwarg=swept_option(args, env_id))
    extra_kwargs = parse_kwargs(env_id, args.env_kwargs)
    if args.model == UNIFORM:
        skipped = [n for n in names if credit.resolve(n).needs_policy]
        names = [n for n in names if n not in skipped]
        if skipped:
            print(f"skipped (they score with a model): {', '.join(skipped)}")
    if not names:
        raise UsageError("no credit module left to score")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--out {args.out} cannot be written: {error}") from error
    stem = args.out / truth_stem(args, env_id)
    # One writer per output (benchmarks/lock.py): a second invocation exits 2 naming this one.
    with lock.hold(lock.output_lock(stem), f"{stem}.csv"):
        done = finished_rows(args, env_id, names)
        policy = None if all(v in done for v in args.sweep) else truth_policy(args)
        rows: list[dict[str, Any]] = []
        for value in args.sweep:
            if value in done:
                rows.extend(done[value])
                print(f"{args.sweep_kwarg}={value}: kept from the csv (--fresh recomputes)")
            else:
                env_kwargs = {**extra_kwargs, args.sweep_kwarg: value}
                rows.extend(score_value(args, env_id, env_kwargs, policy, names, value))
            # Written after every value, so an interrupted sweep keeps what it finished.
            stem = write_outputs(rows, args, env_id, argv)
    return stem


@exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym credit-truth`."""
    return common.run_scoring_command(CreditTruthArgs, "credit_truth", __doc__, run, argv)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
