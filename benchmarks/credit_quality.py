"""Key-step credit quality of every credit module: `creditgym credit-quality`.

    creditgym credit-quality --env sysdiag --credit all --model smollm2-135m

Scripted trajectories (expert, noisy experts, random; `measure.key_steps.collect`) scored by
each module, then the per-trajectory AUROC and P@k of its credit against the env's
`key_step` labels (`measure/key_steps.py` defines the metrics). Same conventions as
`benchmarks.run`: names checked before any work, bad input one line and exit status 2.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import gymnasium as gym
import torch

from creditgym import credit, envs
from creditgym.benchmarks import common
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, parse_arguments, prog_of
from creditgym.credit.base import NonFiniteError
from creditgym.measure.key_steps import (
    QualityRow,
    ScriptedPool,
    build_module,
    collect,
    credit_quality,
)
from creditgym.measure.prefetch import prefetch_modules
from creditgym.models.scoring import ScoreMemo
from creditgym.report.tables import markdown_table


@dataclass(frozen=True)
class EvaluateArgs(ScriptedPool):
    """Measure how well each credit module's per-step credit finds the key steps."""

    credit: str = "all"
    """comma-separated credit module names or `module:Class` paths, or `all`"""
    model: str = "tiny"
    """policy model that scores hindsight views (HCAPO, HP-RLVR): tiny, smollm2-135m, or a path"""


def module_names(spec: str) -> list[str]:
    """`all` or a comma-separated list -> names, each one resolvable (else UsageError)."""
    # `all`: every module that can score scripted episodes; those reading the exact MDP
    # state (oracle, hca) need the policy's own rollouts (measure.pools).
    scoring = sorted(n for n, cls in credit.REGISTRY.items() if "mdp_state" not in cls.reads)
    names = scoring if spec == "all" else [n for n in spec.split(",") if n]
    if not names:
        raise UsageError("--credit names no module")
    for name in names:
        try:
            credit.resolve(name)
        except KeyError as error:
            raise UsageError(str(error.args[0])) from error
    return names


def checked_args(args: EvaluateArgs) -> EvaluateArgs:
    """Check every name and number before any work; returns `args` with the env's id."""
    env_id = common.env_id(args.env)
    if args.episodes < 1 or args.group_size < 1:
        raise UsageError("--episodes and --group-size must be >= 1")
    if not 0.0 <= args.noise <= 1.0:
        raise UsageError(f"--noise is a probability in [0, 1] (got {args.noise})")
    return EvaluateArgs(**{**args.__dict__, "env": env_id})


def quality_table(name: str, rows: dict[str, QualityRow]) -> str:
    """`== name`, then a markdown table of one module's figures per outcome."""
    columns = ["outcome", "trajs", "ranked", "AUROC", "AUROC|c|", "P@k", "chance"]
    cells = [
        [outcome, str(row.trajectories), str(row.ranked)]
        + [f"{value:.3f}" for value in (row.auroc, row.auroc_magnitude, row.precision, row.chance)]
        for outcome, row in rows.items()
    ]
    return f"== {name}\n" + markdown_table(columns, cells)


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym credit-quality`."""
    args = checked_args(parse_arguments(EvaluateArgs, argv, prog_of("credit_quality")))
    names = module_names(args.credit)
    torch.set_num_threads(1)
    model = None
    if any(credit.resolve(name).needs_policy for name in names):
        model = common.load_policy(args.model)
    try:
        trajectories = collect(args)
    except (gym.error.Error, ValueError, OSError) as error:
        raise UsageError(f"cannot play {args.env}: {error}") from error
    successes = sum(traj.success for traj in trajectories)
    print(
        f"{len(trajectories)} trajectories on {args.env} ({successes} successful), "
        f"{sum(traj.length for traj in trajectories)} steps, "
        f"{sum(step.key_step for traj in trajectories for step in traj.steps)} key steps; "
        f"model {args.model}"
    )
    # The prompt the policy would see: no history on Markov envs (KeyDoor, Umbrella), as
    # `benchmarks.run` prompts them; the weights stay fixed, so one memo serves every
    # module, filled by one pass over all their views.
    history_len = 0 if envs.ENVS[args.env].markov else 2
    memo = ScoreMemo()
    modules = {}
    for name in names:
        try:
            modules[name] = build_module(name, model, history_len, memo)
        except (TypeError, ValueError) as error:  # a broken plug-in
            raise UsageError(f"{name}: {error}") from error
    if model is not None:
        start = time.perf_counter()
        views = prefetch_modules(memo, model, list(modules.values()), trajectories, history_len)
        print(f"{views} distinct views scored in {time.perf_counter() - start:.0f} s")
    for name, module in modules.items():
        try:
            output = module(trajectories)
        except (TypeError, ValueError, NonFiniteError) as error:  # a broken plug-in, a NaN
            raise UsageError(f"{name}: {error}") from error
        print(quality_table(name, credit_quality(trajectories, output)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
