"""HCAPO and its seed variant fed exact hindsight instead of the policy's hindsight pass.

The formula of `credit.hcapo` is unchanged (ratio, clipping, gamma, micro / macro terms,
do-no-harm, every option); only the per-token log-probabilities it reads change source.
On an env that describes itself as a finite MDP (`envs.mdp`), for step t of a trajectory:

- hindsight: log h(y_j | y_<j, s_t, V) along the action's token path, V the episode's
  verdict on the reward channel (`credit.base.verdict`, return > 0: what HCAPO's block
  states), exact by Bayes' rule on the return-to-go law of the policy's exact table
  (`credit.exact_hindsight.ExactHindsight.verdict_row`, `trie_conditionals`);
- causal (the seed variant's denominator, `causal_contrast`): log pi(y_j | y_<j, s_t), the
  constrained sampler's own conditionals.

So the difference between `hcapo` and `hcapo_exact` (or `hcapo_seed` and
`hcapo_seed_exact`) is the model's read of the outcome alone (issue 32; Harutyunyan et al.
2019, arXiv 1912.02503, for the hindsight distribution; Tan et al. 2026, arXiv
2603.08754, for the formula).

Classes beside HCAPO rather than an option of it, because reading the exact state makes a
module an oracle (`credit.base.is_oracle`, a property of the class): `hcapo` keeps its
place among the compared methods. Named by path, `--credit credit.hcapo_exact:HCAPOExact`
(or `:HCAPOSeedExact`), not registered: they need the policy's own constrained rollouts
on a finite MDP (a step's tokens must be its command's path in the trie), which the
registry-wide contract cases (scripted episodes) are not; tests/test_credit_oracle.py
checks the contract for them on `small`'s KeyDoor rollouts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agents.constrained import action_token_sequences
from agents.models import LoadedModel
from agents.trajectory import Trajectory
from credit.base import CreditContext, verdict
from credit.exact_hindsight import ExactHindsight, exact_hindsight, exact_step_logprobs
from credit.ground_truth import TableSource, exact_sources, task_truths
from credit.hcapo import HCAPO, SEED_DEFAULTS
from credit.options import parse_options
from credit.views import TeacherForced
from envs.mdp import FiniteMDP


class HCAPOExact(HCAPO):
    """HCAPO (paper form) with exact hindsight (see the module docstring).

    Args:
        model: the policy (its tokenizer spells the commands; its exact table is `tables`').
        mdps: task id -> its exact MDP (`credit.ground_truth.TaskMDPs`).
        tables: MDP -> the current policy's exact table on it, computed when called.
        kwargs: `HCAPO`'s options.
    """

    name = "hcapo_exact"
    # Besides HCAPO's own: each step's exact state (its info) and the MDP.
    reads = HCAPO.reads | {"mdp_state", "env_labels"}

    def __init__(
        self,
        model: LoadedModel,
        mdps: Callable[[str], FiniteMDP],
        tables: TableSource,
        **kwargs: Any,
    ) -> None:
        # Nothing is teacher-forced, so nothing is cached from generation.
        super().__init__(model, **{**kwargs, "generation_cache_bytes": 0})
        self.mdps = mdps
        self.tables = tables

    @classmethod
    def from_context(cls, context: CreditContext) -> HCAPOExact:
        """On the run's env and the policy as its rollout samples it; ValueError (one line)
        where the env is not a finite MDP or the sampling is not exact."""
        mdps, tables = exact_sources(context, cls.name)
        return cls(
            context.policy,
            mdps,
            tables,
            history_len=context.history_len,
            memory_budget_bytes=context.memory_budget_bytes,
            **parse_options(cls, context.options),
        )

    def view_logprobs(
        self,
        steps: Sequence[tuple[Trajectory, int]],
        hindsight_views: Sequence[TeacherForced],
        causal_views: Sequence[TeacherForced],
    ) -> list[np.ndarray]:
        """Exact per-token log-probs in `HCAPO.view_logprobs`' order (the views unused)."""
        del hindsight_views
        laws: dict[str, ExactHindsight] = {
            task_id: exact_hindsight(mdp, table, "return")
            for task_id, (mdp, table) in task_truths(
                (trajectory.task_id for trajectory, _ in steps), self.mdps, self.tables
            ).items()
        }
        sequences: dict[tuple[str, str], dict[str, list[int]]] = {}
        hindsight, causal = [], []
        for trajectory, t in steps:
            law = laws[trajectory.task_id]
            state = trajectory.steps[t].info["mdp_state"]
            key = (trajectory.task_id, state)
            if key not in sequences:
                commands = list(law.policy[state])
                spelled = action_token_sequences(self.model.tokenizer, commands)
                sequences[key] = dict(zip(commands, spelled, strict=True))
            h, c = exact_step_logprobs(trajectory, t, sequences[key], law, verdict(trajectory))
            hindsight.append(h.astype(np.float32))
            causal.append(c.astype(np.float32))
        return [*hindsight, *(causal if causal_views else [])]


class HCAPOSeedExact(HCAPOExact):
    """HCAPO's seed variant (`credit.hcapo.HCAPOSeed`) with exact hindsight."""

    name = "hcapo_seed_exact"

    def __init__(
        self,
        model: LoadedModel,
        mdps: Callable[[str], FiniteMDP],
        tables: TableSource,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, mdps, tables, **{**SEED_DEFAULTS, **kwargs})
