"""Credit quality: do a module's highest-credited steps match the env's ground-truth key steps?

Key-action identification (docs/methods.md, "How credit is judged"); no anchor paper
reports it. Environments that label `key_step` (SysDiag: the step revealed
the root cause or fixed it; ALFWorld: the step made a goal-relevant fact true) make it
measurable:

- AUROC: within one trajectory, the probability that a key step gets more credit than a
  non-key step (ties count 1/2), averaged over trajectories that have both kinds of step,
  separately for successful and failed trajectories. 0.5 = no information (GRPO gives
  every step of a trajectory the same value, so exactly 0.5).
- AUROC |credit|: the same on the magnitude, for modules (HP-RLVR) whose sign comes from
  the outcome and whose magnitude marks where the outcome was decided.
- P@k: precision of the k top-credited steps of a trajectory, k = its number of key steps
  (R-precision), ties broken uniformly at random in expectation; `chance` is the fraction
  of key steps, what a random ranking gets.

Trajectories come from a mix of scripted agents so that there are successes and failures:
the expert, noisy experts (a random admissible action with probability `noise`), and a
random agent, all on the same tasks (one group per task, as GRPO and GiGPO expect).

    creditgym credit-quality --env sysdiag --credit all --model tiny --episodes 32

(the command line lives in `benchmarks/credit_quality.py`, with the other entry points).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from creditgym import envs
from creditgym.agents.base import ExpertAgent, NoisyExpertAgent, RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.agents.trajectory import Trajectory
from creditgym.credit import resolve
from creditgym.credit.base import CreditContext, CreditModule, CreditOutput, build
from creditgym.models.registry import LoadedModel
from creditgym.models.scoring import ScoreMemo


@dataclass(frozen=True)
class ScriptedPool:
    """A pool of scripted episodes with both outcomes: which env, how many, how noisy.

    `benchmarks/credit_quality.py`'s command-line class extends it with the modules to
    score and the model that scores hindsight views.
    """

    env: str = "sysdiag"
    """environment: a short name (sysdiag, alfworld) or a registered id"""
    episodes: int = 32
    """number of episodes to collect (rounded up to whole groups)"""
    group_size: int = 4
    """rollouts per task; the agents cycle through expert, noisy experts and random"""
    noise: float = 0.3
    """probability that a noisy expert takes a random admissible action (the second noisy
    expert uses twice this, capped at 1)"""
    seed: int = 0
    """base seed: task g is played with seed `seed + g`"""


def collect(args: ScriptedPool) -> list[Trajectory]:
    """Play `episodes` episodes (whole groups of `group_size` on the same task seed)."""
    env_id = envs.SHORT_NAMES.get(args.env, args.env)
    # The expert agents read `expert_action`, which some envs publish only when asked.
    env = gym.make(env_id, **envs.ENVS[env_id].expert_kwargs)
    agents = [
        ExpertAgent(),
        NoisyExpertAgent(args.noise, seed=args.seed),
        NoisyExpertAgent(min(1.0, 2 * args.noise), seed=args.seed + 1),
        RandomAgent(seed=args.seed),
    ]
    num_groups = -(-args.episodes // args.group_size)
    trajectories = []
    for g in range(num_groups):
        task_seed = args.seed + g
        for r in range(args.group_size):
            agent = agents[r % len(agents)]
            trajectory = play_episode(env, agent, seed=task_seed, group_id=f"{env_id}/{task_seed}")
            trajectories.append(trajectory)
    env.close()
    return trajectories


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties 1/2 (Mann-Whitney U / n1 n0).

    Args:
        scores: [T] credit values. labels: [T] bool, both classes present.
    """
    positives, negatives = scores[labels], scores[~labels]
    greater = (positives[:, None] > negatives[None, :]).sum()
    ties = (positives[:, None] == negatives[None, :]).sum()
    return float((greater + 0.5 * ties) / (positives.size * negatives.size))


def ranked_trajectories(
    trajectories: Sequence[Trajectory], success: bool
) -> list[tuple[int, np.ndarray]]:
    """(index, key-step labels [T] bool) of each trajectory with outcome `success` that can
    be ranked: it has at least one key step and one non-key step."""
    ranked = []
    for index, trajectory in enumerate(trajectories):
        labels = np.array([step.key_step for step in trajectory.steps], dtype=bool)
        if trajectory.success == success and labels.any() and not labels.all():
            ranked.append((index, labels))
    return ranked


def per_trajectory_auroc(
    trajectories: Sequence[Trajectory], credits: Sequence[np.ndarray], success: bool
) -> list[float]:
    """Key-step AUROC of each ranked trajectory with the given outcome, in pool order."""
    return [
        auroc(np.asarray(credits[index], dtype=np.float64), labels)
        for index, labels in ranked_trajectories(trajectories, success)
    ]


def precision_at_k(scores: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Expected fraction of key steps among the k top-scored, ties broken at random."""
    threshold = np.sort(scores)[::-1][k - 1]
    above = scores > threshold
    at = scores == threshold
    slots_at_threshold = k - int(above.sum())
    expected_keys = labels[above].sum() + slots_at_threshold * labels[at].mean()
    return float(expected_keys / k)


@dataclass(frozen=True)
class QualityRow:
    """Credit-quality figures over one set of trajectories (successful or failed)."""

    trajectories: int
    ranked: int
    auroc: float
    auroc_magnitude: float
    precision: float
    chance: float


def credit_quality(
    trajectories: Sequence[Trajectory], output: CreditOutput
) -> dict[str, QualityRow]:
    """Per outcome ("success", "failure"), the mean per-trajectory AUROC and P@k.

    Only trajectories with at least one key step and one non-key step are ranked; figures
    are NaN when none is.
    """
    rows = {}
    for outcome, wanted in (("success", True), ("failure", False)):
        chosen = [i for i, traj in enumerate(trajectories) if traj.success == wanted]
        credits = output.step_advantages
        ranked = ranked_trajectories(trajectories, wanted)
        aurocs = per_trajectory_auroc(trajectories, credits, wanted)
        magnitudes = per_trajectory_auroc(trajectories, [np.abs(c) for c in credits], wanted)
        precisions = [
            precision_at_k(credits[i].astype(np.float64), labels, int(labels.sum()))
            for i, labels in ranked
        ]
        chances = [labels.mean() for _, labels in ranked]
        rows[outcome] = QualityRow(
            trajectories=len(chosen),
            ranked=len(aurocs),
            auroc=float(np.mean(aurocs)) if aurocs else float("nan"),
            auroc_magnitude=float(np.mean(magnitudes)) if magnitudes else float("nan"),
            precision=float(np.mean(precisions)) if precisions else float("nan"),
            chance=float(np.mean(chances)) if chances else float("nan"),
        )
    return rows


def build_module(
    name: str, model: LoadedModel | None, history_len: int = 2, memo: ScoreMemo | None = None
) -> CreditModule:
    """A credit module by name (`credit.build`); hindsight modules score with `model`,
    rebuilding prompts with `history_len` steps, and read `memo` when given.

    Scripted agents generate here, so no generation cache is kept (nothing would fill it).
    """
    context = CreditContext(
        policy=model, history_len=history_len, generation_cache_bytes=0, score_memo=memo
    )
    return build(resolve(name), context)
