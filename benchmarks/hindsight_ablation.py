"""Every open choice of hindsight credit, scored on one fixed set of trajectories.

    creditgym hindsight-ablation --env sysdiag --model smollm2-135m --episodes 32
    creditgym hindsight-ablation --env keydoor --env-kwargs delay=2 --pool 64

HCAPO (arXiv 2603.08754) and HP-RLVR (Chen et al. 2026) leave choices open
(docs/hindsight_ablation.md): what the hindsight block shows and where it sits, HCAPO's
temperature, clip, gamma^(T-t) factor, do-no-harm, length normalisation and whether
the ratio is taken against the causal view, HP-RLVR's weight normalisation and eligible
tokens. `measure.variants.VARIANTS` names each as (module, `--credit-options` pairs);
every variant scores the SAME trajectories:

- SysDiag, ALFWorld (`measure.key_steps.collect`: expert, noisy experts, random agent): the
  per-trajectory key-step AUROC within successful (and failed) trajectories, as
  `benchmarks.credit_quality` computes it, with a bootstrap 95 % interval over
  trajectories;
- KeyDoor, Umbrella (finite MDPs, `measure.pools`): a pool sampled from the
  policy itself, with its exact ground truth; the modules called batch after batch as
  a trainer would; Pearson and Spearman of credit with A(s_t, a_t) (bootstrap over
  trajectories), key-step sign agreement, the mean cosine of the batch gradient with the
  exact one (bootstrap over batches), and the key-step AUROC where the pool has ranked
  trajectories.

Cost: one teacher-forced pass per distinct view. The variants that only post-process
scores (temperature, clip, gamma, do-no-harm, normalisations) reuse their base views
through a `models.scoring.ScoreMemo`; the block variants of one step are scored together
with their common prompt prefix run once (`measure.prefetch`).

Writes `results/hindsight_ablation/<name>.csv` and `.md` (with the command). Usage errors:
one line, exit 2.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from creditgym import credit, envs
from creditgym.agents.trajectory import Trajectory
from creditgym.benchmarks import common, lock
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, lookup
from creditgym.credit.base import CreditContext, CreditModule, build
from creditgym.credit.options import parse_options
from creditgym.measure.ablation import auroc_row, truth_row
from creditgym.measure.bootstrap import CONFIDENCE
from creditgym.measure.key_steps import ScriptedPool, collect
from creditgym.measure.pools import (
    ROLLOUT_SEED_BASE,
    PoolError,
    PoolSettings,
    batch_credits,
    draw_task_truths,
    sample_task_pool,
)
from creditgym.measure.prefetch import prefetch_modules
from creditgym.measure.truth_metrics import TruthSet
from creditgym.measure.variants import POSITION, VARIANTS, VARIANTS_BY_NAME, Variant
from creditgym.models.registry import LoadedModel
from creditgym.models.scoring import ScoreMemo
from creditgym.report.tables import markdown_table


@dataclass(frozen=True)
class AblationArgs:
    """Score every variant of hindsight credit on one fixed set of trajectories."""

    env: str = "sysdiag"
    """Environment, short name or registered id: one that labels key steps (sysdiag,
    alfworld: scripted trajectories, key-step AUROC) or a finite MDP (`EnvInfo.finite_mdp`:
    keydoor, umbrella: policy samples, exact ground truth)."""
    model: str = "smollm2-135m"
    """Policy that scores the hindsight views (and, on keydoor / umbrella, samples the pool)."""
    variants: str = "all"
    """Comma-separated variant names (`VARIANTS`), or `all`."""
    skip: str = ""
    """Comma-separated variant names left out (e.g. the costly after_task ones)."""
    episodes: int = 32
    """sysdiag / alfworld: scripted episodes (whole groups of --group-size)."""
    noise: float = 0.3
    """sysdiag / alfworld: the noisy experts' random-action probability (measure.key_steps)."""
    env_kwargs: tuple[str, ...] = ()
    """keydoor / umbrella: env options as key=value, e.g. delay=2 or length=4."""
    pool: int = 64
    """keydoor / umbrella: trajectories sampled from the policy."""
    tasks: int = 2
    """keydoor / umbrella: distinct tasks (each with its own ground truth)."""
    group_size: int = 8
    """Rollouts per task group (sysdiag / alfworld: agents cycle through expert, noisy
    experts and random; keydoor / umbrella: G of the pool)."""
    batch_size: int = 16
    """keydoor / umbrella: trajectories per module call (whole groups); the gradient
    cosine is over these batches."""
    bootstrap: int = 2000
    """Bootstrap resamples of each interval."""
    seed: int = 0
    """Seed of the tasks, trajectories, sampling and bootstrap."""
    out: Path = Path("results/hindsight_ablation")
    """Folder receiving the csv and md."""
    name: str | None = None
    """File name stem; derived from the configuration when unset."""


def chosen_variants(args: AblationArgs) -> list[Variant]:
    """The variants to score, each checked (module and options) before any work."""
    names = [v.name for v in VARIANTS] if args.variants == "all" else args.variants.split(",")
    skipped = {name for name in args.skip.split(",") if name}
    for name in [*names, *skipped]:
        lookup("variant", name, VARIANTS_BY_NAME)
    chosen = [VARIANTS_BY_NAME[name] for name in names if name not in skipped]
    if not chosen:
        raise UsageError("no variant left to score")
    for variant in chosen:
        try:
            parse_options(credit.resolve(variant.module).Options, variant.options)
        except (KeyError, ValueError) as error:
            raise UsageError(f"variant {variant.name}: {error}") from error
    return chosen


def truth_env(env_id: str) -> bool:
    """Whether the ablation samples from the policy and scores against exact ground truth:
    the env describes itself as a finite MDP."""
    return envs.ENVS[env_id].finite_mdp


def env_and_variants(args: AblationArgs) -> tuple[str, list[Variant]]:
    """(env id, the chosen variants) after checking every option; UsageError otherwise."""
    env_id = common.env_id(args.env)
    if args.episodes < 1 or args.group_size < 1 or args.bootstrap < 10:
        raise UsageError("--episodes and --group-size must be >= 1 and --bootstrap >= 10")
    if truth_env(env_id):
        if args.pool % args.group_size or args.batch_size % args.group_size:
            raise UsageError("--pool and --batch-size must be multiples of --group-size")
        if not args.group_size <= args.batch_size <= args.pool:
            raise UsageError("need --group-size <= --batch-size <= --pool")
        if args.pool % args.batch_size:
            # Credit is computed in whole batches, as a trainer would (batch_credits).
            raise UsageError("--pool must be a multiple of --batch-size")
    return env_id, chosen_variants(args)


# --- trajectories, modules, scoring --------------------------------------------------------


@dataclass(frozen=True)
class Collected:
    """The fixed trajectories every variant scores, and what they are scored against."""

    trajectories: list[Trajectory]
    history_len: int
    truths: TruthSet | None
    description: str


def collect_scripted(args: AblationArgs, env_id: str) -> Collected:
    evaluate_args = ScriptedPool(
        env=env_id,
        episodes=args.episodes,
        group_size=args.group_size,
        noise=args.noise,
        seed=args.seed,
    )
    trajectories = collect(evaluate_args)
    # measure.key_steps rebuilds prompts with K = 2 (its CreditContext default), as here.
    return Collected(trajectories, 2, None, "scripted: expert, noisy experts, random")


def collect_policy(args: AblationArgs, env_id: str, policy: LoadedModel) -> Collected:
    """A pool of the policy's own trajectories and the exact truth of their tasks."""
    settings = PoolSettings(
        tasks=args.tasks,
        pool=args.pool,
        group_size=args.group_size,
        noise="shared",
        temperature=1.0,
        gamma=1.0,
        max_new_tokens=48,
        num_envs=8,
        seed=args.seed,
    )
    env_kwargs = common.env_options(env_id, args.env_kwargs, "--env-kwargs").kwargs()
    try:
        task_truths, truths = draw_task_truths(env_id, env_kwargs, policy, settings)
        seed = ROLLOUT_SEED_BASE * (args.seed + 1)
        pool = sample_task_pool(env_id, env_kwargs, task_truths, policy, settings, seed)
    except PoolError as error:
        raise UsageError(str(error)) from error
    return Collected(pool, 0, truths, f"policy samples ({args.model}, shared noise per group)")


def build_variant(variant: Variant, context: CreditContext) -> CreditModule:
    """The variant's module (`credit.build` with its options); hindsight modules read the
    context's shared memo, so views scored once serve every variant."""
    cls = credit.resolve(variant.module)
    options = parse_options(cls.Options, variant.options)
    return build(cls, dataclasses.replace(context, options=options))


def score_variants(
    args: AblationArgs,
    collected: Collected,
    variants: Sequence[Variant],
    policy: LoadedModel,
) -> list[dict[str, Any]]:
    """One row per variant: its figures with bootstrap intervals, on the same trajectories."""
    memo = ScoreMemo()
    context = CreditContext(
        policy=policy,
        history_len=collected.history_len,
        generation_cache_bytes=0,
        score_memo=memo,
    )
    modules = [build_variant(variant, context) for variant in variants]
    start = time.perf_counter()
    views = prefetch_modules(memo, policy, modules, collected.trajectories, collected.history_len)
    print(f"scored {views} distinct views in {time.perf_counter() - start:.0f} s", flush=True)
    rng = np.random.default_rng(args.seed)
    count = len(collected.trajectories)
    resamples = rng.integers(0, 2**31 - 1, size=(args.bootstrap, count))
    rows = []
    # Reference row: credit = the step's index, what a factor rising with t (gamma^(T-t))
    # ranks by on its own.
    position = [np.arange(t.length, dtype=np.float64) for t in collected.trajectories]
    # Scripted trajectories are scored in one call; a policy's pool batch after batch.
    size = count if collected.truths is None else args.batch_size
    for variant, module in [(POSITION, None), *zip(variants, modules, strict=True)]:
        start = time.perf_counter()
        credits = (
            position if module is None else batch_credits(module, collected.trajectories, size)
        )
        row: dict[str, Any] = {
            "variant": variant.name,
            "module": variant.module,
            "options": " ".join(f"{k}={v}" for k, v in variant.options),
            "what": variant.what,
            **auroc_row(collected.trajectories, credits, resamples),
        }
        if collected.truths is not None:
            row.update(
                truth_row(
                    collected.trajectories, credits, collected.truths, args.batch_size, resamples
                )
            )
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
    return rows


# --- output --------------------------------------------------------------------------------


def interval_cell(row: Mapping[str, Any], key: str) -> str:
    value, low, high = row[key], row[f"{key}_lo"], row[f"{key}_hi"]
    if not math.isfinite(value):
        return "nan"
    if not math.isfinite(low):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def variant_table(rows: Sequence[Mapping[str, Any]], truth: bool) -> str:
    """The variants' figures as a markdown table, with the truth columns where `truth`."""
    columns = ["variant", "AUROC success [95% CI]", "n", "AUROC failure", "AUROC |c| success"]
    if truth:
        columns += ["Pearson [95% CI]", "Spearman [95% CI]", "key sign", "cos [95% CI]"]
    table = []
    for row in rows:
        cells = [
            f"`{row['variant']}`",
            interval_cell(row, "auroc_success"),
            f"{row['auroc_success_n']:.0f}",
            interval_cell(row, "auroc_failure"),
            f"{row['auroc_abs_success']:.3f}",
        ]
        if truth:
            cells += [
                interval_cell(row, "pearson"),
                interval_cell(row, "spearman"),
                f"{row['key_sign']:.3f}",
                interval_cell(row, "cos"),
            ]
        table.append(cells)
    return markdown_table(columns, table)


def ablation_stem(args: AblationArgs, env_id: str) -> str:
    """The output files' name without suffix: env (with its options), model, sizes, seed."""
    if truth_env(env_id):
        parsed = common.env_options(env_id, args.env_kwargs, "--env-kwargs")
        options = [text.replace("=", "") for text in parsed.canonical()]
        size = f"pool{args.pool}_G{args.group_size}_B{args.batch_size}_tasks{args.tasks}"
    else:
        options, size = [], f"episodes{args.episodes}_G{args.group_size}"
    return common.output_name(args.name, env_id, [args.model, size, f"seed{args.seed}"], options)


def describe(collected: Collected) -> str:
    trajectories = collected.trajectories
    return (
        f"{len(trajectories)} trajectories ({collected.description}; "
        f"{sum(t.success for t in trajectories)} successful), "
        f"{sum(t.length for t in trajectories)} steps, "
        f"{sum(s.key_step for t in trajectories for s in t.steps)} key steps"
    )


def write_outputs(
    rows: Sequence[Mapping[str, Any]],
    args: AblationArgs,
    env_id: str,
    collected: Collected,
    argv: Sequence[str],
    seconds: float,
) -> Path:
    truth = collected.truths is not None
    table = variant_table(rows, truth)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / ablation_stem(args, env_id)
    with open(stem.with_suffix(".csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    command = "creditgym hindsight-ablation " + shlex.join(argv)
    notes = [
        f"# Hindsight-credit ablation: {env_id}, {args.model}",
        "",
        f"Produced by `{command}` in {seconds / 60:.0f} min.",
        "",
        f"{describe(collected)}. Intervals: bootstrap {CONFIDENCE:.0%} percentile intervals "
        f"({args.bootstrap} resamples) over trajectories (AUROC, correlations) or over "
        f"batches of {args.batch_size} (cos). `n`: successful trajectories ranked (with both "
        "key and non-key steps). Chance AUROC 0.5. What each variant changes: the csv's "
        "`what` and `options` columns, docs/hindsight_ablation.md.",
        "",
        table,
        "",
    ]
    stem.with_suffix(".md").write_text("\n".join(notes), encoding="utf-8")
    print(f"wrote {stem}.csv, .md")
    return stem


def run(args: AblationArgs, argv: Sequence[str]) -> Path:
    env_id, variants = env_and_variants(args)
    stem = args.out / ablation_stem(args, env_id)
    # One writer per output (benchmarks/lock.py): a second invocation exits 2 naming this one.
    with lock.hold(lock.output_lock(stem), f"{stem}.csv"):
        policy = common.load_policy(args.model)
        start = time.perf_counter()
        collected = (
            collect_policy(args, env_id, policy)
            if truth_env(env_id)
            else collect_scripted(args, env_id)
        )
        print(f"{describe(collected)} in {time.perf_counter() - start:.0f} s", flush=True)
        rows = score_variants(args, collected, variants, policy)
        return write_outputs(rows, args, env_id, collected, argv, time.perf_counter() - start)


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym hindsight-ablation`."""
    return common.run_scoring_command(AblationArgs, "hindsight_ablation", __doc__, run, argv)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
