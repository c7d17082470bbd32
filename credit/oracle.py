"""The oracle ceiling: the exact advantage of the current policy on a finite-MDP env.

    credit_t = A(s_t, a_t) = Q(s_t, a_t) - V(s_t),

with V and Q of the policy that generated the batch, by dynamic programming on each
task's exact MDP (`credit.policy_evaluation.evaluate_policy`; the true state s_t from
`step.info["mdp_state"]`, `envs.mdp`). The policy's exact action table is recomputed at
every call (`CreditContext.exact_sources`, filled by the entry point with
`measure.ground_truth`'s: constrained decoding, no history), so
a trainer, whose weights change every update, always gets the advantage of the weights
that sampled the batch. Every action token of step t gets credit_t.

It is the policy-gradient theorem's own weight (Sutton et al. 2000; COCOA, Meulemans et
al. 2023, arXiv 2306.16803, scores estimators against it): no estimator of credit can do
better in expectation, so a run trained with it shows what the policy and the budget can
learn when credit is perfect. It reads ground truth (the env's exact state and
dynamics): an oracle, listed apart and never ranked with the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import (
    CreditContext,
    CreditModuleBase,
    CreditOutput,
    broadcast_to_tokens,
    exact_sources_of,
)
from creditgym.credit.policy_evaluation import (
    TableSource,
    evaluate_policy,
    task_truths,
    true_advantages,
)
from creditgym.envs.mdp import FiniteMDP


class Oracle(CreditModuleBase):
    """Exact A(s_t, a_t) of the current policy at every step (see the module docstring).

    Args:
        mdps: task id -> its exact MDP (`measure.ground_truth.TaskMDPs`).
        tables: MDP -> the current policy's exact table on it, computed when called.

    Metrics: `exact_return` (mean over the batch's tasks of the policy's exact expected
    return, J = sum_s0 P(s0) V(s0)).
    """

    name = "oracle"
    # The step's true state is in its info (`mdp_state`), matched with the action taken.
    reads = frozenset({"mdp_state", "env_labels", "actions"})
    needs_policy = True

    def __init__(self, mdps: Callable[[str], FiniteMDP], tables: TableSource) -> None:
        self.mdps = mdps
        self.tables = tables

    @classmethod
    def from_context(cls, context: CreditContext) -> Oracle:
        """Built on the run's env and the policy as its rollout samples it; ValueError
        (one line) where the env is not a finite MDP or the sampling is not exact."""
        return cls(*exact_sources_of(context, cls.name))

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        truths = {
            task_id: evaluate_policy(mdp, table)
            for task_id, (mdp, table) in task_truths(
                (traj.task_id for traj in trajectories if traj.length), self.mdps, self.tables
            ).items()
        }
        step_advantages = [
            true_advantages(traj, truths[traj.task_id]).astype(np.float32)
            if traj.length
            else np.zeros(0, dtype=np.float32)
            for traj in trajectories
        ]
        metrics = (
            {"exact_return": float(np.mean([t.expected_return for t in truths.values()]))}
            if truths
            else {}
        )
        return CreditOutput(
            step_advantages, broadcast_to_tokens(trajectories, step_advantages), metrics
        )
