"""GiGPO: episode-level group advantage plus an anchor-state step-level advantage.

Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
arXiv 2505.10978 (verl-agent). Within one task group:
- episode term A^E_i = (R_i - mean_j R_j) / F (the GRPO term, `credit.grpo`);
- anchor states: every step of every rollout of the group whose current observation is
  identical (exact string match) forms one anchor group; step return
  R_t = sum_{k>=t} gamma^{k-t} r_k; step term A^S = (R_t - mean_anchor) / F_anchor, and a
  singleton anchor group gives 0;
- A = A^E + omega * A^S, broadcast to every action token of the step.
When no state repeats, every A^S is 0 and GiGPO reduces to GRPO.

Both terms follow a `credit.grpo.Convention`: `creditgym` (the default) or `verl-agent`,
whose episode term pools step rows (`compute_mean_std_cross_steps=True` in
`gigpo/core_gigpo.py: episode_norm_reward`), has no uniform-group guard and computes in
float32, its returns summed step by step in float32 (docs/conventions.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import CreditOutput, broadcast_to_tokens
from creditgym.credit.grpo import (
    ConventionModule,
    episode_returns,
    group_members,
    group_normalised,
    torch_dtype,
)
from creditgym.credit.options import doc


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """R_t = sum_{k>=t} gamma^{k-t} r_k, shape [T] float64."""
    returns = np.zeros(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def discounted_returns_float32(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """R_t = r_t + gamma R_{t+1} with every operand and every result rounded to float32,
    shape [T] float32: verl-agent's `compute_step_discounted_returns` (its rewards cast
    to float32, its `running_return` a float32 scalar, gamma a Python float that NumPy 2
    rounds to float32 against it)."""
    factor = np.float32(gamma)
    returns = np.zeros(len(rewards), dtype=np.float32)
    running = np.float32(0.0)
    for t in range(len(rewards) - 1, -1, -1):
        running = np.float32(np.float32(rewards[t]) + np.float32(factor * running))
        returns[t] = running
    return returns


@dataclass(frozen=True)
class GiGPOOptions:
    """The options of `GiGPO` (`credit.options`)."""

    gamma: float = field(
        default=0.95, metadata=doc("discount of the step return, in [0, 1] (GiGPO's ALFWorld 0.95)")
    )
    omega: float = field(
        default=1.0, metadata=doc("weight of the anchor-state step term (the paper's 1)")
    )
    normalise_by_std: bool = field(
        default=True,
        metadata=doc(
            "F = std (true, verl-agent's mean_std_norm, its ALFWorld example) or F = 1 (false, "
            "mean_norm) in both terms"
        ),
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")


class GiGPO(ConventionModule):
    """Episode + anchor-state step credit.

    Arguments as `credit.grpo.ConventionModule`:
        options: `GiGPOOptions`: gamma, the discount of the step return (0.95, GiGPO's
            ALFWorld config); omega, the weight of the step term (1.0, the paper);
            normalise_by_std, F = std ("with std") or F = 1 ("without std") in both terms.
            verl-agent's switch for the last is `algorithm.gigpo.mode`: "mean_std_norm"
            (with std) in its ALFWorld example (examples/gigpo_trainer/run_alfworld.sh),
            "mean_norm" (without) as its trainer config's default
            (verl/trainer/config/ppo_trainer.yaml) and in its WebShop example. The default
            here is with std: the ALFWorld setting.
        convention: how the group statistics of both terms are computed: "creditgym"
            (default) or "verl-agent" (`credit.grpo.CONVENTIONS`), or a `Convention`.

    Metrics: `frac_reward_zero_std` (of the episode term, `Convention.zero_std_count`),
    `frac_steps_in_anchor_groups` (steps whose state repeats in their group, i.e. that
    receive a step term), `num_anchor_groups`.
    """

    name = "gigpo"
    # Observations: the anchor states; step rewards: the step returns.
    reads = frozenset({"return", "step_rewards", "observations"})
    conventions = ("creditgym", "verl-agent")
    Options = GiGPOOptions
    options: GiGPOOptions

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        convention, options = self.convention, self.options
        dtype = torch_dtype(convention)
        np_dtype = np.float32 if convention.float32 else np.float64
        groups = group_members(trajectories)
        returns = episode_returns(trajectories, convention)
        lengths = np.array([traj.length for traj in trajectories], dtype=np.int64)
        scale = "group" if options.normalise_by_std else "none"
        episode, zero_std = group_normalised(returns, groups, scale, convention, lengths)
        step_terms = [np.zeros(traj.length, dtype=np_dtype) for traj in trajectories]
        # verl-agent sums the step returns in float32 (`compute_step_discounted_returns`);
        # otherwise they are summed in float64 and rounded once to the convention's dtype.
        discount = discounted_returns_float32 if convention.float32_sums else discounted_returns
        step_returns = [
            discount([step.reward for step in traj.steps], options.gamma).astype(np_dtype)
            for traj in trajectories
        ]
        anchored_steps = num_anchor_groups = 0
        for members in groups.values():
            anchors: dict[str, list[tuple[int, int]]] = defaultdict(list)
            # Trajectory-major, the order of verl-agent's batch rows (its rollout loop emits
            # each environment's steps in turn; a float32 mean depends on the order).
            for i in members:
                for t, step in enumerate(trajectories[i].steps):
                    anchors[step.observation].append((i, t))
            for positions in anchors.values():
                if len(positions) < 2:
                    continue  # a singleton anchor group: its step term is 0 (the paper)
                num_anchor_groups += 1
                anchored_steps += len(positions)
                values = torch.from_numpy(
                    np.array([step_returns[i][t] for i, t in positions], dtype=np_dtype)
                )
                spread = values.std()
                if convention.uniform_tol is not None and float(spread) < convention.uniform_tol:
                    continue  # all equal: the step term is 0 (see credit.grpo.ZERO_STD_TOL)
                centred = values - values.mean()
                terms = centred / (spread + convention.eps) if options.normalise_by_std else centred
                for (i, t), term in zip(positions, terms.numpy(), strict=True):
                    step_terms[i][t] = term
        # Summed in the convention's precision, as verl-agent adds its two float32 terms.
        step_advantages = [
            (
                torch.as_tensor(episode[i], dtype=dtype)
                + options.omega * torch.from_numpy(step_terms[i])
            )
            .to(torch.float32)
            .numpy()
            for i in range(len(trajectories))
        ]
        total_steps = sum(traj.length for traj in trajectories)
        return CreditOutput(
            step_advantages=step_advantages,
            token_advantages=broadcast_to_tokens(trajectories, step_advantages),
            metrics={
                "frac_reward_zero_std": zero_std,
                "frac_steps_in_anchor_groups": anchored_steps / total_steps if total_steps else 0.0,
                "num_anchor_groups": float(num_anchor_groups),
            },
        )
