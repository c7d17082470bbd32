"""Return-conditional Hindsight Credit Assignment with exact hindsight (Harutyunyan et al.
2019, arXiv 1912.02503), a reference for the hindsight methods.

At a visited step, with Z the episode's own outcome from that step on,

    credit_t = (1 - pi(a_t|s_t) / h(a_t | s_t, Z)) Z,
    pi(a|s) / h(a | s, z) = P(Z = z | s) / P(Z = z | s, a),

an estimate of A(s_t, a_t) for the value of that outcome: averaged over Z ~ P(. | s, a)
it is E[Z | s, a] - sum_{z: P(z|s,a) > 0} P(z | s) z, which is Q(s, a) - V(s) when every
nonzero outcome reachable from s can also follow a (the paper's positivity assumption,
h(a | s, z) > 0). Where it cannot (KeyDoor: the top return needs the key, so taking a
distractor cannot reach it), the mean is off by exactly
`ExactHindsight.hca_bias(s, a)` = sum_{z: P(z|s,a) = 0} P(z | s) z, which the module
reports (`mean_abs_bias`) rather than hides. The hindsight
distribution h is exact (`credit.exact_hindsight`: dynamic programming on each task's
MDP under the policy's exact table, recomputed every call as the oracle's is), so what
is left is the estimator's own variance: the method with perfect hindsight, beside the
policy's read of the outcome that HCAPO and HP-RLVR use.

Outcome (`--credit-options outcome=...`, `HCAOptions`): `return` (default), the return-to-go, so the
credit estimates the same A(s_t, a_t) as `oracle` and `measure.truth_metrics`; or
`success`, the env's success verdict, estimating the advantage of the success
probability. It reads ground truth (the exact state and dynamics): an oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import (
    CreditContext,
    CreditModuleBase,
    CreditOutput,
    broadcast_to_tokens,
    exact_sources_of,
    options_of,
)
from creditgym.credit.exact_hindsight import OUTCOMES, ExactHindsight, exact_hindsight
from creditgym.credit.options import check_choices, doc
from creditgym.credit.policy_evaluation import TableSource, task_truths
from creditgym.envs.mdp import FiniteMDP

# The keys of `credit.exact_hindsight.OUTCOMES` (tests/test_credit_options.py checks it).
Outcome = Literal["return", "success"]


def hca_credit(trajectory: Trajectory, hindsight: ExactHindsight) -> tuple[np.ndarray, np.ndarray]:
    """(credit (1 - pi / h) Z, the ratio pi / h) at every step of `trajectory`, each [T] float64.

    Raises:
        ValueError: a step's outcome cannot follow its (state, action) under the MDP (the
            trajectory is not of this task's dynamics).
    """
    outcomes = OUTCOMES[hindsight.outcome].sampled(trajectory, hindsight.gamma)
    ratios = np.array(
        [
            hindsight.ratio(step.info["mdp_state"], step.action, z)
            for step, z in zip(trajectory.steps, outcomes, strict=True)
        ],
        dtype=np.float64,
    )
    return (1.0 - ratios) * outcomes, ratios


@dataclass(frozen=True)
class HCAOptions:
    """The options of `HCA` (`credit.options`)."""

    outcome: Outcome = field(
        default="return",
        metadata=doc(
            "the Z conditioned on: the return-to-go (estimates the oracle's A(s, a)) or the "
            "env's success verdict (credit.exact_hindsight)"
        ),
    )

    def __post_init__(self) -> None:
        check_choices(self)


class HCA(CreditModuleBase):
    """Return-conditional HCA with exact hindsight (see the module docstring).

    Args:
        mdps: task id -> its exact MDP (`measure.ground_truth.TaskMDPs`).
        tables: MDP -> the current policy's exact table on it, computed when called.
        options: `HCAOptions` (the outcome Z conditioned on, `return` or `success`).

    Metrics: `mean_abs_ratio_gap` (mean over steps of |1 - pi / h|: how far hindsight
    moves from the policy) and `mean_abs_bias` (mean over steps of |hca_bias(s_t, a_t)|,
    the exact bias of the estimator at the visited pairs).
    """

    name = "hca"
    # The state from each step's info, the action, and Z: the rewards (return) or the
    # env's verdict (success).
    reads = frozenset({"mdp_state", "env_labels", "actions", "step_rewards", "outcome"})
    needs_policy = True
    Options = HCAOptions

    def __init__(
        self,
        mdps: Callable[[str], FiniteMDP],
        tables: TableSource,
        options: HCAOptions | None = None,
    ) -> None:
        self.mdps = mdps
        self.tables = tables
        self.options = HCAOptions() if options is None else options

    @classmethod
    def from_context(cls, context: CreditContext) -> HCA:
        """Built on the run's env and the policy as its rollout samples it; ValueError
        (one line) where the env is not a finite MDP or the sampling is not exact."""
        return cls(*exact_sources_of(context, cls.name), options_of(cls, context))

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        hindsights = {
            task_id: exact_hindsight(mdp, table, self.options.outcome)
            for task_id, (mdp, table) in task_truths(
                (traj.task_id for traj in trajectories if traj.length), self.mdps, self.tables
            ).items()
        }
        step_advantages, gaps, biases = [], [], []
        for traj in trajectories:
            if not traj.length:
                step_advantages.append(np.zeros(0, dtype=np.float32))
                continue
            hindsight = hindsights[traj.task_id]
            credit, ratios = hca_credit(traj, hindsight)
            step_advantages.append(credit.astype(np.float32))
            gaps.extend(np.abs(1.0 - ratios))
            biases.extend(
                abs(hindsight.hca_bias(step.info["mdp_state"], step.action)) for step in traj.steps
            )
        metrics = (
            {"mean_abs_ratio_gap": float(np.mean(gaps)), "mean_abs_bias": float(np.mean(biases))}
            if gaps
            else {}
        )
        return CreditOutput(
            step_advantages, broadcast_to_tokens(trajectories, step_advantages), metrics
        )
