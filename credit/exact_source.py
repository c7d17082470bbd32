"""HCAPO, its seed variant and HP-RLVR fed exact hindsight instead of the policy's pass.

Each method's formula is unchanged (every option too); only what it reads of the
hindsight changes source. On an env that describes itself as a finite MDP (`envs.mdp`),
for step t of a trajectory, with V the episode's verdict on the reward channel
(`credit.base.verdict`, return > 0: what the hindsight block states) and the trie of the
step's commands (`credit.exact_hindsight.step_trie`):

- HCAPO (`HCAPOExact`, `HCAPOSeedExact`): the per-token log-probs
  log h(y_j | y_<j, s_t, V) for the hindsight view and log pi(y_j | y_<j, s_t) for the
  causal one (the constrained sampler's own conditionals), exact by Bayes' rule on the
  return-to-go law of the policy's exact table (`ExactHindsight.verdict_row`,
  `trie_conditionals`);
- HP-RLVR (`HPRLVRExact`): the per-token divergence JS(pi(. | y_<j) || h(. | y_<j, V)) / ln 2
  between those two distributions over the children of the trie node (every other token
  has probability 0 under both: `trie_divergences`).

So `hcapo` against `hcapo_exact` (or `hcapo_seed` / `hp_rlvr` against theirs) differs
only in the model's read of the outcome (docs/exact_hindsight.md; Harutyunyan et al. 2019, arXiv
1912.02503, for the hindsight distribution; Tan et al. 2026, arXiv 2603.08754, and
docs/methods.md for the formulas). Exact hindsight conditions on the verdict alone: what
HP-RLVR's block adds (the realised future) is not conditioned on.

Classes beside the methods rather than an option of them, because reading the exact state
makes a module an oracle (`credit.base.is_oracle`, a property of the class): `hcapo` and
`hp_rlvr` keep their places among the compared methods. Named by path
(`--credit credit.exact_source:HCAPOExact`, `:HCAPOSeedExact`, `:HPRLVRExact`), not
registered: they need the policy's own constrained rollouts on a finite MDP (a step's
tokens must be its command's path in the trie), which the registry-wide contract cases
(scripted episodes) are not; tests/test_credit_oracle.py checks the contract for them on
`small`'s KeyDoor rollouts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from creditgym.agents.constrained import action_token_sequences
from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import CreditContext, exact_sources_of, options_of, verdict
from creditgym.credit.exact_hindsight import (
    DIVERGENCE_TOL,
    ExactHindsight,
    StepTrie,
    exact_hindsight,
    exact_step_logprobs,
    step_trie,
    trie_divergences,
)
from creditgym.credit.hcapo import HCAPO, HCAPOSeed, HCAPOSeedOptions
from creditgym.credit.hp_rlvr import HPRLVR, HPRLVROptions
from creditgym.credit.options import doc
from creditgym.credit.policy_evaluation import TableSource, task_truths
from creditgym.envs.mdp import FiniteMDP
from creditgym.models.registry import LoadedModel

# Besides a method's own reads: each step's exact state (its info) and the MDP, and the
# rewards of the steps before it on the run's channel (the return so far, r_<t, on which
# `ExactHindsight.verdict_row` conditions the verdict: `step_trie`). HP-RLVR's own credit
# reads no per-step reward; its exact class does.
EXACT_READS = frozenset({"mdp_state", "env_labels", "step_rewards"})


class ExactSource:
    """What the exact classes share: the tasks' MDPs, the policy's exact table, and each
    step's trie with its exact hindsight (mixed in before the method's class, whose
    options and formula it keeps).

    Args:
        model: the policy (its tokenizer spells the commands).
        mdps: task id -> its exact MDP (`measure.ground_truth.TaskMDPs`).
        tables: MDP -> the current policy's exact table on it, computed when called.
        options: the method's options (an instance of its `Options`; None: the defaults).
        kwargs: the method's other arguments (`history_len`, `memory_budget_bytes`).
    """

    name: ClassVar[str]
    model: LoadedModel
    mdps: Callable[[str], FiniteMDP]
    tables: TableSource

    def __init__(
        self,
        model: LoadedModel,
        mdps: Callable[[str], FiniteMDP],
        tables: TableSource,
        options: Any = None,
        **kwargs: Any,
    ) -> None:
        # Nothing is teacher-forced, so nothing is cached from generation.
        super().__init__(model, options, **{**kwargs, "generation_cache_bytes": 0})
        self.mdps = mdps
        self.tables = tables

    @classmethod
    def from_context(cls, context: CreditContext) -> Any:
        """On the run's env and the policy as its rollout samples it; ValueError (one line)
        where the env is not a finite MDP or the sampling is not exact."""
        mdps, tables = exact_sources_of(context, cls.name)
        return cls(
            context.policy,
            mdps,
            tables,
            options_of(cls, context),
            history_len=context.history_len,
            memory_budget_bytes=context.memory_budget_bytes,
        )

    def step_tries(self, steps: Iterable[tuple[Trajectory, int]]) -> list[StepTrie]:
        """`step_trie` of every (trajectory, t), the laws computed once per task."""
        steps = list(steps)
        laws: dict[str, ExactHindsight] = {
            task_id: exact_hindsight(mdp, table, "return")
            for task_id, (mdp, table) in task_truths(
                (trajectory.task_id for trajectory, _ in steps), self.mdps, self.tables
            ).items()
        }
        spelled: dict[tuple[str, str], dict[str, list[int]]] = {}
        tries = []
        for trajectory, t in steps:
            law = laws[trajectory.task_id]
            key = (trajectory.task_id, trajectory.steps[t].info["mdp_state"])
            if key not in spelled:
                commands = list(law.policy[key[1]])
                sequences = action_token_sequences(self.model.tokenizer, commands)
                spelled[key] = dict(zip(commands, sequences, strict=True))
            tries.append(step_trie(trajectory, t, spelled[key], law, verdict(trajectory)))
        return tries


class HCAPOExact(ExactSource, HCAPO):
    """HCAPO (paper form) with exact hindsight log-probs (see the module docstring);
    arguments as `ExactSource`, options `credit.hcapo.HCAPOOptions`."""

    name = "hcapo_exact"
    reads = HCAPO.reads | EXACT_READS

    def view_logprobs(
        self, steps: Sequence[tuple[Trajectory, int]], causal: bool
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Exact per-token log-probs in `HCAPO.view_logprobs`' order (nothing scored)."""
        pairs = [exact_step_logprobs(trie) for trie in self.step_tries(steps)]
        hindsight = [h.astype(np.float32) for h, _ in pairs]
        return hindsight, [c.astype(np.float32) for _, c in pairs] if causal else []


class HCAPOSeedExact(HCAPOExact):
    """HCAPO's seed variant (`credit.hcapo.HCAPOSeed`) with exact hindsight log-probs."""

    name = "hcapo_seed_exact"
    Options = HCAPOSeedOptions


@dataclass(frozen=True)
class HPRLVRExactOptions(HPRLVROptions):
    """The options of `HPRLVRExact`: HP-RLVR's, and the divergence's tolerance."""

    divergence_tol: float = field(
        default=0.0,
        metadata=doc(
            "exact divergences below it are 0, never negative (1e-12: the stated "
            "tolerance, credit.exact_hindsight.DIVERGENCE_TOL); 0: as computed, float "
            "noise included (the committed hp_rlvr_exact runs), >= 0"
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.divergence_tol >= 0.0:
            raise ValueError(f"divergence_tol must be >= 0, got {self.divergence_tol}")


class HPRLVRExact(ExactSource, HPRLVR):
    """HP-RLVR with the exact per-token divergence (see the module docstring); arguments
    as `ExactSource`, options `HPRLVRExactOptions`."""

    name = "hp_rlvr_exact"
    reads = HPRLVR.reads | EXACT_READS
    Options = HPRLVRExactOptions

    def divergences(self, trajectories: Sequence[Trajectory]) -> list[list[np.ndarray]]:
        """d_j per trajectory, per step ([A_t] each), exact (`trie_divergences`)."""
        tries = iter(
            self.step_tries((traj, t) for traj in trajectories for t in range(traj.length))
        )
        return [
            [
                trie_divergences(
                    trie.sequences,
                    trie.policy,
                    trie.hindsight,
                    trie.taken,
                    self.options.divergence_tol,
                )
                for trie in (next(tries) for _ in traj.steps)
            ]
            for traj in trajectories
        ]


# Registered method name -> the options its exact class is scored with by the
# decomposition (benchmarks/decomposition.py): the stated divergence tolerance.
EXACT_OPTIONS: dict[str, Any] = {"hp_rlvr": HPRLVRExactOptions(divergence_tol=DIVERGENCE_TOL)}

# Registered method name -> its exact-source class: what a decomposition of a method's
# error (formula against model, benchmarks/decomposition.py) pairs.
EXACT_CLASSES: dict[str, type] = {
    HCAPO.name: HCAPOExact,
    HCAPOSeed.name: HCAPOSeedExact,
    HPRLVR.name: HPRLVRExact,
}
