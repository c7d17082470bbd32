"""Score every credit module against exact ground truth: `python -m benchmarks.credit_truth`.

    python -m benchmarks.credit_truth --env keydoor --credit all --model smollm2-135m
    python -m benchmarks.credit_truth --env umbrella --sweep-kwarg length --sweep 2 4 8 \\
        --model uniform --noise independent

For each value of the swept env option (KeyDoor's `delay`, Umbrella's `length`):
1. the policy's exact action table on each of `--tasks` tasks (`credit.ground_truth`:
   an LLM's constrained-decoding distribution, or the uniform policy with
   `--model uniform`), then V, Q, A and the exact logit gradient by dynamic programming;
2. a pool of `--pool` trajectories from that same policy through the rollout engine
   (`agents.rollout.collect`; G = `--group-size` rollouts per group, groups cycling
   through the tasks), the LLM prompting without history (the envs are Markov);
3. every distinct view the hindsight modules score, scored once (one memo for all
   modules and batch sizes: the weights never change); then per credit module and
   batch size B: the pool cut into consecutive disjoint batches of
   B trajectories (whole groups), the module called on each in turn as a trainer would
   (so stateful modules carry their state from batch to batch), and
   `credit.truth_metrics` against the truth: Pearson / Spearman of credit with
   A(s_t, a_t) and key-step sign agreement (from the batches of the smallest B), and per
   B the mean cosine of the batch gradient with the exact one, the cosine of the mean,
   and the SNR over the batches.

`--noise shared` plays a group's G rollouts from one reset seed, as a trainer's
`collect` does: they share the env's random draws (KeyDoor's apples, Umbrella's noise
and forecast), common random numbers that a group baseline subtracts for free.
`--noise independent` gives every rollout its own seed on the same task
(`options={"task_id": ...}`), i.i.d. samples of the task's MDP, as the truth assumes.

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

import gymnasium as gym
import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt
import numpy as np
import tyro

import credit
import envs
from agents.episode import play_episode
from agents.llm import LLMAgent
from agents.models import LoadedModel
from agents.rollout import collect
from agents.tabular import TableAgent
from agents.trajectory import Trajectory
from benchmarks import common, lock
from benchmarks.cli import UsageError, exit_on_usage_error, lookup
from credit.base import CreditContext, build
from credit.policy_evaluation import GroundTruth, evaluate_policy, reachable_states
from credit.scoring import ScoreMemo
from measure.ground_truth import exact_sources, llm_policy_table, uniform_policy
from measure.prefetch import prefetch_modules
from measure.truth_metrics import TruthSet, gradient_estimate, gradient_stats, step_agreement

UNIFORM = "uniform"
# Task seeds (for drawing the tasks) and rollout seeds are far apart, so no rollout
# replays the draw that chose a task.
ROLLOUT_SEED_BASE = 1_000_000


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
    sweep_kwarg: str = "delay"
    """Env option swept along the x axis (KeyDoor: delay; Umbrella: length)."""
    sweep: tuple[int, ...] = (1, 2, 4)
    """Values of the swept option."""
    env_kwargs: tuple[str, ...] = ()
    """Further env options as key=value (values read as JSON, else as text, as
    `benchmarks.run`'s --env-options), e.g. variance=high."""
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


def parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """`("variance=high", "num_objects=2")` -> {"variance": "high", "num_objects": 2}
    (`benchmarks.common.env_options`, the one parser of env options)."""
    return common.env_options(pairs, "--env-kwargs")


def validate(args: CreditTruthArgs) -> tuple[str, list[str]]:
    """(env id, credit module names) after checking every option; UsageError otherwise."""
    env_id = common.env_id(args.env)
    if not envs.ENVS[env_id].finite_mdp:
        raise UsageError(f"{env_id} does not describe itself as a finite MDP (EnvInfo.finite_mdp)")
    parse_kwargs(args.env_kwargs)
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


def load_policy(args: CreditTruthArgs) -> LoadedModel | None:
    """The LLM policy, or None for the uniform table."""
    return None if args.model == UNIFORM else common.load_policy(args.model, also_valid=[UNIFORM])


def make_env(env_id: str, kwargs: Mapping[str, Any]) -> gym.Env:
    try:
        return gym.make(env_id, **kwargs)
    except (TypeError, ValueError) as error:
        raise UsageError(
            f"cannot create {env_id} with {dict(kwargs)} ({error}); --sweep-kwarg names the "
            "option swept (KeyDoor: delay, Umbrella: length)"
        ) from error


def rollout_agent(policy: LoadedModel, args: CreditTruthArgs, seed: int) -> LLMAgent:
    """The LLM as the rollout runs it: constrained, no history (the truth needs both)."""
    return LLMAgent(
        policy,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        history_len=0,
        constrained=True,
        seed=seed,
    )


@dataclass(frozen=True)
class TaskTruth:
    """One task's exact table and ground truth, and what computing them cost."""

    task_id: str
    table: Mapping[str, Mapping[str, float]]
    truth: GroundTruth
    seconds: float


def task_truth(
    env: gym.Env,
    env_id: str,
    seed: int,
    policy: LoadedModel | None,
    args: CreditTruthArgs,
    memo: ScoreMemo | None = None,
) -> TaskTruth:
    """Reset `env` with `seed`, describe its task as an MDP, and evaluate the policy on it
    (the table's views kept in `memo`, where the exact-MDP modules read them again)."""
    _, info = env.reset(seed=seed)
    mdp = env.unwrapped.finite_mdp()  # `validate` checked EnvInfo.finite_mdp
    start = time.perf_counter()
    if policy is None:
        table = uniform_policy(mdp, reachable_states(mdp))
    else:
        table = llm_policy_table(rollout_agent(policy, args, args.seed), env_id, mdp, memo=memo)
    truth = evaluate_policy(mdp, table, args.gamma)
    return TaskTruth(str(info["task_id"]), table, truth, time.perf_counter() - start)


def sample_pool(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    task_ids: Sequence[str],
    tables: Mapping[str, Mapping[str, Mapping[str, float]]],
    policy: LoadedModel | None,
    args: CreditTruthArgs,
    seed: int,
) -> list[Trajectory]:
    """`args.pool` trajectories of the policy; group j plays task j mod len(task_ids).

    Each group's rollouts share a reset seed (`shared`, as `collect` gives a trainer) or
    each has its own (`independent`); either way `group_id` names the group. The LLM
    plays through the batched rollout engine (`agents.rollout.collect`); the table
    policy through its reference loop (`agents.episode.play_episode`, which `collect`
    equals for scripted agents), in this process: worker start-up would cost more than
    its episodes.
    """
    num_groups = args.pool // args.group_size
    shared = args.noise == "shared"
    replicas = args.group_size if shared else 1
    per_group = 1 if shared else args.group_size
    seeds = [seed + k for k in range(num_groups * per_group)]
    options = [{"task_id": task_ids[(k // per_group) % len(task_ids)]} for k in range(len(seeds))]
    if policy is None:
        agent = TableAgent(tables, seed=seed)
        env = make_env(env_id, env_kwargs)
        try:
            trajectories = [
                play_episode(env, agent, seed=s, options=o)
                for s, o in zip(seeds, options, strict=True)
                for _ in range(replicas)
            ]
        finally:
            env.close()
    else:
        trajectories, stats = collect(
            env_id,
            rollout_agent(policy, args, seed),
            seeds,
            group_size=replicas,
            num_envs=args.num_envs,
            env_kwargs=env_kwargs,
            options=options,
            progress=False,
        )
        if stats.dropped:
            raise RuntimeError(f"rollout dropped episodes: {stats.dropped[0]}")
    # In (seed, replica) order, trajectory k belongs to group k // G.
    return [
        dataclasses.replace(
            trajectory, group_id=f"{env_id}/{trajectory.task_id}/group{k // args.group_size}"
        )
        for k, trajectory in enumerate(trajectories)
    ]


def module_credits(
    cls: type, context: CreditContext, pool: Sequence[Trajectory], size: int
) -> list[np.ndarray]:
    """Per-step credit ([T_i] each) of the first len(pool) // size * size trajectories.

    A fresh module is called on the pool's consecutive disjoint batches of `size`
    trajectories (whole groups) in turn, as a trainer would, so a stateful module carries
    its state from batch to batch.
    """
    module = build(cls, context)
    credits: list[np.ndarray] = []
    for start in range(0, len(pool) - size + 1, size):
        credits.extend(module(pool[start : start + size]).step_advantages)
    return credits


def score_module(
    module_name: str,
    context: CreditContext,
    pool: Sequence[Trajectory],
    truths: TruthSet,
    batch_sizes: Sequence[int],
) -> dict[str, float]:
    """One table row: correlations, key-step sign agreement and per-B gradient statistics."""
    cls = credit.resolve(module_name)
    exact = truths.exact_gradient()
    row: dict[str, float] = {}
    for size in sorted(batch_sizes):
        credits = module_credits(cls, context, pool, size)
        trajectories = pool[: len(credits)]
        estimates = [
            gradient_estimate(trajectories[s : s + size], credits[s : s + size], truths)
            for s in range(0, len(credits), size)
        ]
        stats = gradient_stats(np.stack(estimates), exact)
        if not row:  # correlations from the smallest batch size: the most batches
            agreement = step_agreement(trajectories, credits, truths)
            row.update(
                pearson=agreement.pearson,
                spearman=agreement.spearman,
                key_sign=agreement.key_sign_agreement,
                key_steps=float(agreement.key_steps),
            )
        row.update(
            {
                f"cos@{size}": stats.cosine,
                f"cos_mean@{size}": stats.cosine_of_mean,
                f"snr@{size}": stats.snr,
                f"batches@{size}": float(stats.batches),
            }
        )
    return row


def run_name(args: CreditTruthArgs, env_id: str) -> str:
    extra = "".join(f"_{pair.replace('=', '-')}" for pair in args.env_kwargs)
    sweep = f"{args.sweep_kwarg}{'-'.join(map(str, args.sweep))}{extra}"
    parts = [args.model, sweep, args.noise, f"G{args.group_size}", f"pool{args.pool}"]
    return common.output_name(args.name, env_id, [*parts, f"tasks{args.tasks}", f"seed{args.seed}"])


def format_value(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:.3g}"


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A markdown table (also readable as plain text)."""
    return common.markdown_table(columns, common.mapping_rows(rows, columns, format_value))


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


@dataclass(frozen=True)
class PreparedValue:
    """One swept value's tasks, truth and pool, and the context modules are built from.

    Attributes:
        truths: every task's exact ground truth.
        pool: the sampled trajectories (whole groups, `sample_pool`).
        context: what a run offers a module; its `score_memo` holds every score (the
            weights never change here), so each distinct view is scored once.
        exact_return: the policy's expected return by dynamic programming (task mean).
        sampled_return: the pool's mean return.
    """

    truths: TruthSet
    pool: list[Trajectory]
    context: CreditContext
    exact_return: float
    sampled_return: float


def prepare_value(
    args: CreditTruthArgs,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy: LoadedModel | None,
    sweep_value: int,
) -> PreparedValue:
    """Ground truth of `args.tasks` tasks and a pool of the policy at one swept value."""
    # One memo for the tables and every module and batch size: the weights never change
    # here, so each distinct view is scored once.
    memo = ScoreMemo()
    env = make_env(env_id, env_kwargs)
    try:
        task_truths = [
            task_truth(env, env_id, args.seed + k, policy, args, memo) for k in range(args.tasks)
        ]
    finally:
        env.close()
    truths = TruthSet(
        {t.task_id: t.truth for t in task_truths},
        {t.task_id: 1.0 / len(task_truths) for t in task_truths},
    )
    if len(truths.truths) < len(task_truths):
        raise UsageError(f"the {args.tasks} task seeds drew the same task twice")
    start = time.perf_counter()
    pool = sample_pool(
        env_id,
        env_kwargs,
        [t.task_id for t in task_truths],
        {t.task_id: t.table for t in task_truths},
        policy,
        args,
        ROLLOUT_SEED_BASE * (args.seed + 1) + 10_000 * sweep_value,
    )
    rollout_seconds = time.perf_counter() - start
    sampled_return = float(np.mean([t.total_return for t in pool]))
    exact_return = float(np.mean([t.truth.expected_return for t in task_truths]))
    print(
        f"{args.sweep_kwarg}={sweep_value}: {len(pool)} trajectories in {rollout_seconds:.0f} s, "
        f"mean return {sampled_return:.3f} (exact {exact_return:.3f}); ground truth of "
        f"{len(task_truths)} tasks ({sum(len(t.truth.states) for t in task_truths)} states) "
        f"in {sum(t.seconds for t in task_truths):.1f} s",
        flush=True,
    )
    # In one batched pass, a view's prompt prefix shared by the modules' views; a batch
    # size after the first reads its scores from the memo.
    context = CreditContext(
        policy=policy,
        history_len=0,
        generation_cache_bytes=0,
        score_memo=memo,
        # The exact-MDP modules (oracle, hca) read the env and the rollout's sampling.
        env_id=env_id,
        env_kwargs=env_kwargs,
        sampling=None if policy is None else rollout_agent(policy, args, args.seed).config,
        exact_sources=exact_sources,
    )
    return PreparedValue(truths, pool, context, exact_return, sampled_return)


def score_value(
    args: CreditTruthArgs,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy: LoadedModel | None,
    names: Sequence[str],
    sweep_value: int,
) -> list[dict[str, Any]]:
    """Ground truth, pool and every module's scores at one value of the swept option."""
    prepared = prepare_value(args, env_id, env_kwargs, policy, sweep_value)
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
    table = format_table(rows, columns)
    print(table)
    stem = args.out / run_name(args, env_id)
    with open(stem.with_suffix(".csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    command = "python -m benchmarks.credit_truth " + shlex.join(argv)
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
COMMAND = re.compile(r"^Produced by `python -m benchmarks\.credit_truth ?(.*)`\.$", re.M)


def finished_rows(
    args: CreditTruthArgs, env_id: str, names: Sequence[str]
) -> dict[int, list[dict[str, Any]]]:
    """Rows of the swept values this file name already holds, for a resumed run.

    {value: rows in the order of `names`} for each value whose rows cover every requested
    module; {} with `--fresh` or no csv yet. UsageError when the files were written by a
    different configuration, are corrupt, or hold values outside `--sweep` (a resumed file
    would drop them)."""
    stem = args.out / run_name(args, env_id)
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
    env_id, names = validate(args)
    extra_kwargs = parse_kwargs(args.env_kwargs)
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
    stem = args.out / run_name(args, env_id)
    # One writer per output (benchmarks/lock.py): a second invocation exits 2 naming this one.
    with lock.hold(lock.output_lock(stem), f"{stem}.csv"):
        done = finished_rows(args, env_id, names)
        policy = None if all(v in done for v in args.sweep) else load_policy(args)
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
    """Entry point of `python -m benchmarks.credit_truth`."""
    return common.run_scoring_command(CreditTruthArgs, "credit_truth", __doc__, run, argv)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
