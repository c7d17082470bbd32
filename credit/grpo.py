"""GRPO: group-normalised trajectory advantage, broadcast to every action token.

A_i = (R_i - mean_j R_j) / (std_j R_j + eps), j over the rollouts of the same task
(Shao et al. 2024, DeepSeekMath, arXiv 2402.03300; verl-agent; TRL `GRPOTrainer`).
R_i is the trajectory's total return (the sum of its step rewards, so the env's terminal
success reward plus any per-step or invalid-action penalties) -- the same scalar every
module in this package calls R.

The formula leaves six choices open, and TRL, verl and verl-agent each make them their
own way (docs/conventions.md has the table, with where each lives in the peer's code):
what one sample of the mean and std is (a trajectory or a step), whether near-uniform
groups are zeroed, eps, what a group of one gets, float32 or float64 (and whether returns
are summed step by step in float32, as verl-agent's are), and how the zero-std fraction
is counted. `Convention` holds one choice of each; `CONVENTIONS` names
one per peer, and `creditgym` is the default.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import (
    CreditContext,
    CreditModuleBase,
    CreditOutput,
    broadcast_to_tokens,
    options_of,
)
from creditgym.credit.options import check_choices, doc

ScaleRewards = Literal["group", "batch", "none"]
Rows = Literal["trajectories", "steps"]
Singleton = Literal["return", "mean0_std1", "zero"]
ZeroStdCount = Literal["groups", "rows"]

EPS = 1e-6
# A group whose reward std is below this counts as uniform: its advantages are set to 0
# rather than dividing a ~1e-9 spread by ~1e-9 and blowing it up to O(1)
# (docs/conventions.md: which peers guard this, and why creditgym does).
ZERO_STD_TOL = 1e-6
# TRL divides by std + 1e-4 (grpo_trainer.py), and counts a std as zero with
# torch.isclose(std, 0), whose default absolute tolerance is 1e-8.
TRL_EPS = 1e-4
TRL_ZERO_STD_ATOL = 1e-8


@dataclass(frozen=True)
class Convention:
    """How group-relative advantages are computed: one choice per open point of GRPO.

    The defaults are creditgym's; docs/conventions.md says why each is what it is.

    Attributes:
        rows: what one sample of a group's mean and std is. "trajectories": each rollout
            once (the GRPO formula; TRL and verl, whose batch has one row per rollout).
            "steps": each step of each rollout (verl-agent, whose batch has one row per
            step and `compute_mean_std_cross_steps=True` pools them), so a trajectory of
            T steps weighs T in its group's baseline.
        uniform_tol: a group whose std is below this gets A = 0 (the uniform-group
            guard); None: no guard, the formula is applied to whatever spread float
            rounding leaves (the peers).
        eps: added to the std in the denominator.
        singleton: a group with one row. "return": A = R, no baseline. "mean0_std1": the
            group's mean taken as 0 and its std as 1 (verl, verl-agent), so A = R / (1 + eps)
            when scaling by the group std. "zero": A = 0, the row is its own mean (TRL).
        float32: compute in float32 with torch, as the peers do (the rounding of a mean
            of identical values then shows where there is no guard); False: float64.
        float32_sums: round each step reward to float32 and sum returns step by step in
            float32 (verl-agent: `episode_rewards` accumulated in a float32 array by its
            rollout loop, `compute_step_discounted_returns` in a float32 array), so two
            returns equal in exact arithmetic can differ by an ulp; False: sum in float64
            and round once (`Convention.float32` then rounds the sum).
        zero_std_count: definition of `frac_reward_zero_std`. "groups": the fraction of
            groups of two or more rows whose std is below `zero_std_tol`. "rows": the
            fraction of rows whose scaling std (the batch std under scale "batch", the
            group std otherwise, 0 for a group of one) is at most `zero_std_tol` (TRL).
        zero_std_tol: the tolerance of that count.
    """

    rows: Rows = "trajectories"
    uniform_tol: float | None = ZERO_STD_TOL
    eps: float = EPS
    singleton: Singleton = "return"
    float32: bool = False
    float32_sums: bool = False
    zero_std_count: ZeroStdCount = "groups"
    zero_std_tol: float = ZERO_STD_TOL


# One setting per peer, named as the peer is (docs/conventions.md). verl and verl-agent
# log no zero-std fraction; theirs keep creditgym's definition of it.
CONVENTIONS: dict[str, Convention] = {
    "creditgym": Convention(),
    "trl": Convention(
        uniform_tol=None,
        eps=TRL_EPS,
        singleton="zero",
        float32=True,
        zero_std_count="rows",
        zero_std_tol=TRL_ZERO_STD_ATOL,
    ),
    "verl": Convention(uniform_tol=None, singleton="mean0_std1", float32=True),
    "verl-agent": Convention(
        rows="steps", uniform_tol=None, singleton="mean0_std1", float32=True, float32_sums=True
    ),
}


def convention_named(name: str, valid: Sequence[str]) -> Convention:
    """`CONVENTIONS[name]`, or a ValueError listing the names in `valid`."""
    if name not in valid:
        raise ValueError(f"convention must be one of {', '.join(valid)}; got {name!r}")
    return CONVENTIONS[name]


def torch_dtype(convention: Convention) -> torch.dtype:
    return torch.float32 if convention.float32 else torch.float64


def episode_returns(trajectories: Sequence[Trajectory], convention: Convention) -> np.ndarray:
    """[N] float64 returns R_i: exact sums rounded once, or, with `convention.float32_sums`,
    each reward rounded to float32 and added in float32 in step order (verl-agent's
    `episode_rewards[active_masks] += rewards` on a float32 array)."""
    if not convention.float32_sums:
        return np.array([traj.total_return for traj in trajectories], dtype=np.float64)
    totals = []
    for traj in trajectories:
        total = np.float32(0.0)
        for step in traj.steps:
            total = np.float32(total + np.float32(step.reward))
        totals.append(float(total))
    return np.array(totals, dtype=np.float64)


def group_members(trajectories: Sequence[Trajectory]) -> dict[str, list[int]]:
    """group_id -> indices of its trajectories, in input order."""
    groups: dict[str, list[int]] = defaultdict(list)
    for index, trajectory in enumerate(trajectories):
        groups[trajectory.group_id].append(index)
    return dict(groups)


def statistics_rows(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[sum(weights)] values[j] repeated weights[j] times, trajectory-major: every row of
    the first trajectory, then every row of the second, ... -- the order of verl-agent's
    batch (`gather_rollout_data` emits each environment's steps in turn), which a float32
    sum depends on. With unit weights, `values` in its own order."""
    return values.repeat_interleave(weights)


def group_normalised(
    returns: np.ndarray,
    groups: Mapping[str, list[int]],
    scale: ScaleRewards = "group",
    convention: Convention = CONVENTIONS["creditgym"],
    lengths: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """Group-relative advantages of scalar returns.

    Args:
        returns: [N] returns R_i.
        groups: group id -> indices into `returns`.
        scale: divide by the group std ("group", GRPO), the std of all rows in the batch
            ("batch", TRL's `scale_rewards="batch"`), or not at all ("none", Dr. GRPO,
            arXiv 2503.20783). Stds are unbiased (ddof=1), as in TRL, verl and verl-agent.
        convention: how the statistics are computed (`Convention`).
        lengths: [N] steps T_i per trajectory; read when `convention.rows` is "steps",
            where trajectory i is T_i rows of value R_i.
    Returns:
        ([N] float64 advantages, computed in the convention's precision;
        `frac_reward_zero_std` as `convention.zero_std_count` defines it).
    """
    dtype = torch_dtype(convention)
    values = torch.as_tensor(np.asarray(returns, dtype=np.float64), dtype=dtype)
    if convention.rows == "steps":
        if lengths is None:
            raise ValueError("statistics over steps need the trajectories' lengths")
        weights = torch.as_tensor(np.asarray(lengths, dtype=np.int64))
    else:
        weights = torch.ones(values.shape[0], dtype=torch.int64)
    all_rows = statistics_rows(values, weights)
    batch_std = all_rows.std() if all_rows.numel() > 1 else torch.zeros((), dtype=dtype)
    advantages = torch.zeros_like(values)
    zero_std = counted = 0
    for members in groups.values():
        index = torch.as_tensor(members, dtype=torch.int64)
        member_values = values[index]
        rows = statistics_rows(member_values, weights[index])
        num_rows = rows.numel()
        if num_rows == 0:
            continue  # only empty trajectories: no step receives an advantage
        spread = rows.std() if num_rows > 1 else torch.zeros((), dtype=dtype)
        if convention.zero_std_count == "rows":
            row_std = batch_std if scale == "batch" else spread
            counted += num_rows
            zero_std += num_rows * int(float(row_std) <= convention.zero_std_tol)
        elif num_rows > 1:
            counted += 1
            zero_std += int(float(spread) < convention.zero_std_tol)
        if num_rows == 1:
            if convention.singleton == "return":
                advantages[index] = member_values
            if convention.singleton != "mean0_std1":
                continue  # "return" is set, "zero" stays 0
            mean, group_std = torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)
        else:
            if convention.uniform_tol is not None and float(spread) < convention.uniform_tol:
                continue
            mean, group_std = rows.mean(), spread
        centred = member_values - mean
        if scale == "group":
            advantages[index] = centred / (group_std + convention.eps)
        elif scale == "batch":
            advantages[index] = centred / (batch_std + convention.eps)
        else:
            advantages[index] = centred
    return advantages.to(torch.float64).numpy(), (zero_std / counted if counted else 0.0)


@dataclass(frozen=True)
class GRPOOptions:
    """The options of `GRPO` (`credit.options`)."""

    scale_rewards: ScaleRewards = field(
        default="group",
        metadata=doc(
            "divide by the group std (GRPO), the batch std (TRL's scale_rewards=batch) or "
            "nothing (Dr. GRPO, arXiv 2503.20783)"
        ),
    )

    def __post_init__(self) -> None:
        check_choices(self)


class ConventionModule(CreditModuleBase):
    """Base of the modules whose group statistics follow a `Convention` (GRPO, GiGPO).

    Args:
        options: the module's `Options`; None: its defaults.
        convention: how the group statistics are computed: a name of `CONVENTIONS` the
            module offers (its `conventions`; creditgym, the default) or a `Convention`.
    Raises:
        ValueError: a convention name the module does not offer.
    """

    def __init__(self, options: Any = None, convention: str | Convention = "creditgym") -> None:
        self.options = self.Options() if options is None else options
        self.convention = (
            convention
            if isinstance(convention, Convention)
            else convention_named(convention, self.conventions)
        )

    @classmethod
    def from_context(cls, context: CreditContext) -> ConventionModule:
        """The module with the run's options, in the convention the run names."""
        return cls(options_of(cls, context), context.convention)


class GRPO(ConventionModule):
    """Trajectory-level GRPO credit; every action token of trajectory i gets A_i.

    Arguments as `ConventionModule`: options `GRPOOptions` (`scale_rewards`: "group", the
    default, the GRPO paper and verl-agent; "batch"; "none" -- see `group_normalised`);
    conventions creditgym, trl, verl, verl-agent.

    Metrics: `frac_reward_zero_std` (creditgym: the fraction of groups with >= 2 rollouts
    whose rewards are all equal, whose gradient vanishes; see `Convention.zero_std_count`),
    `num_singleton_groups`.
    """

    name = "grpo"
    reads = frozenset({"return"})
    conventions = ("creditgym", "trl", "verl", "verl-agent")
    Options = GRPOOptions
    options: GRPOOptions

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        groups = group_members(trajectories)
        returns = episode_returns(trajectories, self.convention)
        lengths = np.array([traj.length for traj in trajectories], dtype=np.int64)
        advantages, zero_std = group_normalised(
            returns, groups, self.options.scale_rewards, self.convention, lengths
        )
        step_advantages = [
            np.full(traj.length, advantage, dtype=np.float32)
            for traj, advantage in zip(trajectories, advantages, strict=True)
        ]
        return CreditOutput(
            step_advantages=step_advantages,
            token_advantages=broadcast_to_tokens(trajectories, step_advantages),
            metrics={
                "frac_reward_zero_std": zero_std,
                "num_singleton_groups": float(sum(len(m) == 1 for m in groups.values())),
            },
        )
