"""Formula or model: a hindsight method's error against the exact advantage, split in two.

HCAPO, its seed variant and HP-RLVR turn the policy's own hindsight into credit; on a
finite MDP the hindsight distribution is exact (Harutyunyan et al. 2019, arXiv
1912.02503; `credit.exact_hindsight`), so each method can be scored twice on one pool
(`measure.pools`): with its exact source (`credit.exact_source`) and with the model's
(`agreement_row`: Pearson with A, key-step sign agreement, batch-gradient cosine), and
the model's hindsight compared with the exact one at every visited step (`calibration`,
`calibration_row`: KL(h_exact || h_model), KL(h_exact || pi), agreement of the ratios
h / pi). Standard errors by a bootstrap over the pool's groups (`measure.bootstrap`):
steps of one group share a task and the env's draws, so they are not independent.
`benchmarks.decomposition` is the command.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from creditgym.agents.trajectory import REWARD_CHANNELS, Trajectory
from creditgym.credit.base import build
from creditgym.credit.exact_source import HCAPOExact
from creditgym.credit.hcapo import HCAPO
from creditgym.credit.policy_evaluation import evaluate_policy, true_advantages
from creditgym.measure.bootstrap import block_bootstrap_se
from creditgym.measure.ground_truth import MDP_CHANNELS, TaskMDPs, trie_action_logprobs
from creditgym.measure.pools import PreparedPool
from creditgym.measure.truth_metrics import (
    CREDIT_SIGN_TOL,
    TruthSet,
    cosine,
    gradient_estimate,
    pearson,
    sign_agreement,
    step_agreement,
)
from creditgym.models.registry import LoadedModel
from creditgym.models.scoring import TeacherForced, score_logprobs

# Below this |log(h_exact / pi)| the outcome says nothing about the action (a forced step,
# or an action with no effect on the verdict): no sign for the model's ratio to agree with.
RATIO_SIGN_TOL = 1e-6


def group_blocks(pool: Sequence[Trajectory]) -> list[list[int]]:
    """Indices of the pool's trajectories, one list per group (in pool order)."""
    blocks: dict[str, list[int]] = {}
    for index, trajectory in enumerate(pool):
        blocks.setdefault(str(trajectory.group_id), []).append(index)
    return list(blocks.values())


def agreement_row(
    prepared: PreparedPool,
    credits: Sequence[np.ndarray],
    batch_size: int,
    resamples: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    """Pearson, key-step sign agreement and batch-gradient cosine with their errors.

    Sign agreement leaves out the key steps whose |credit| <= `CREDIT_SIGN_TOL` (no sign:
    float noise of a zero) and counts them apart (`key_small_credit`)."""
    pool, truths = prepared.pool[: len(credits)], prepared.truths
    agreement = step_agreement(pool, credits, truths, CREDIT_SIGN_TOL)
    advantages = [true_advantages(traj, truths.truth_of(traj)) for traj in pool]
    keys = [np.array([step.key_step for step in traj.steps], dtype=bool) for traj in pool]

    def concatenated(indices: np.ndarray, per_trajectory: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(per_trajectory[i], dtype=np.float64) for i in indices])

    def resampled_pearson(indices: np.ndarray) -> float:
        return pearson(concatenated(indices, credits), concatenated(indices, advantages))

    def resampled_sign(indices: np.ndarray) -> float:
        key = concatenated(indices, keys).astype(bool)
        return sign_agreement(
            concatenated(indices, credits)[key],
            concatenated(indices, advantages)[key],
            CREDIT_SIGN_TOL,
        )

    blocks = group_blocks(pool)
    exact = truths.exact_gradient()
    cosines = np.array(
        [
            cosine(
                gradient_estimate(pool[s : s + batch_size], credits[s : s + batch_size], truths),
                exact,
            )
            for s in range(0, len(pool), batch_size)
        ]
    )
    cosines = cosines[np.isfinite(cosines)]
    return {
        "pearson": agreement.pearson,
        "pearson_se": block_bootstrap_se(blocks, resampled_pearson, resamples, rng),
        "key_sign": agreement.key_sign_agreement,
        "key_sign_se": block_bootstrap_se(blocks, resampled_sign, resamples, rng),
        "key_steps": float(agreement.key_steps),
        "key_small_credit": float(agreement.key_small_credit),
        "cos": float(cosines.mean()) if cosines.size else float("nan"),
        "cos_se": float(cosines.std(ddof=1) / math.sqrt(cosines.size))
        if cosines.size >= 2
        else float("nan"),
        "batches": float(cosines.size),
    }


@dataclass(frozen=True)
class StepCalibration:
    """The model's hindsight against the exact one at each visited step (arrays [N]).

    Attributes:
        kl_model: KL(h_exact || h_model) over the state's commands (nats).
        kl_policy: KL(h_exact || pi) (nats): the cost of ignoring the outcome.
        exact_log_ratio: log(h_exact(a_t) / pi(a_t)) at the taken command.
        model_log_ratio: log(h_model(a_t) / pi(a_t)).
    """

    kl_model: np.ndarray
    kl_policy: np.ndarray
    exact_log_ratio: np.ndarray
    model_log_ratio: np.ndarray


def kl_divergence(p: np.ndarray, log_p: np.ndarray, log_q: np.ndarray) -> float:
    """sum_c p_c (log p_c - log q_c) over p_c > 0 (inf where q_c = 0 < p_c)."""
    support = p > 0
    return float(np.sum(p[support] * (log_p[support] - log_q[support])))


def calibration(prepared: PreparedPool, policy: LoadedModel) -> StepCalibration:
    """`StepCalibration` of every step of the pool (see the module docstring, item 2).

    h_model(c | s_t, V) is the policy's constrained distribution over s_t's commands
    under HCAPO's hindsight prompt of the step (`HCAPO.hindsight_view_of`, the verdict V
    and the final action shown), renormalised along the command trie at the rollout's
    temperature and top-p; h_exact(c | s_t, V) and pi(c | s_t) come from the exact
    return-to-go law of the policy's exact table (`HCAPOExact.step_tries`).
    """
    context = prepared.context
    reader = build(HCAPO, context)
    exact = build(HCAPOExact, context)
    steps = [(traj, t) for traj in prepared.pool for t in range(traj.length)]
    tries = exact.step_tries(steps)
    views: list[TeacherForced] = []
    for (traj, t), trie in zip(steps, tries, strict=True):
        prompt = reader.hindsight_view_of(traj, t).context_ids
        views.extend(TeacherForced(prompt, sequence) for sequence in trie.sequences)
    scores = score_logprobs(policy, views, context.memory_budget_bytes, memo=context.score_memo)
    sampling = context.sampling
    columns: list[list[float]] = [[], [], [], []]
    cursor = 0
    for trie in tries:
        count = len(trie.sequences)
        log_model = trie_action_logprobs(
            trie.sequences, scores[cursor : cursor + count], sampling.temperature, sampling.top_p
        )
        cursor += count
        hindsight, pi = np.array(trie.hindsight), np.array(trie.policy)
        with np.errstate(divide="ignore"):
            log_h, log_pi = np.log(hindsight), np.log(pi)
        taken = trie.taken
        for column, value in zip(
            columns,
            (
                kl_divergence(hindsight, log_h, log_model),
                kl_divergence(hindsight, log_h, log_pi),
                log_h[taken] - log_pi[taken],
                log_model[taken] - log_pi[taken],
            ),
            strict=True,
        ):
            column.append(float(value))
    return StepCalibration(*(np.array(column, dtype=np.float64) for column in columns))


def calibration_row(
    prepared: PreparedPool, steps: StepCalibration, resamples: int, rng: np.random.Generator
) -> dict[str, float]:
    """Means and agreements of `steps`, with bootstrap errors over the pool's groups."""
    offsets = np.cumsum([0] + [traj.length for traj in prepared.pool])
    step_blocks = [
        list(range(offsets[group[0]], offsets[group[-1] + 1]))
        for group in group_blocks(prepared.pool)
    ]

    def mean_of(values: np.ndarray) -> Callable[[np.ndarray], float]:
        return lambda indices: float(values[indices].mean())

    def ratio_pearson(indices: np.ndarray) -> float:
        return pearson(steps.model_log_ratio[indices], steps.exact_log_ratio[indices])

    def ratio_sign(indices: np.ndarray) -> float:
        exact = steps.exact_log_ratio[indices]
        signed = np.abs(exact) > RATIO_SIGN_TOL
        if not signed.any():
            return float("nan")
        return float(
            np.mean(np.sign(steps.model_log_ratio[indices][signed]) == np.sign(exact[signed]))
        )

    everything = np.arange(len(steps.kl_model))
    row = {"steps": float(everything.size)}
    for name, statistic in (
        ("kl_model", mean_of(steps.kl_model)),
        ("kl_policy", mean_of(steps.kl_policy)),
        ("ratio_pearson", ratio_pearson),
        ("ratio_sign", ratio_sign),
    ):
        row[name] = statistic(everything)
        row[f"{name}_se"] = block_bootstrap_se(step_blocks, statistic, resamples, rng)
    row["ratio_signed_steps"] = float(np.sum(np.abs(steps.exact_log_ratio) > RATIO_SIGN_TOL))
    return row


def on_channel(prepared: PreparedPool, channel: str, mdps: TaskMDPs) -> PreparedPool:
    """`prepared` paid on `channel`: its pool through the channel, its truth that of the
    channel's MDP (`measure.ground_truth.MDP_CHANNELS`) under the same policy tables, and
    a context that tells the exact modules the channel (the scores' memo shared)."""
    truths = {
        task_id: evaluate_policy(MDP_CHANNELS[channel](mdps(task_id)), truth.policy, truth.gamma)
        for task_id, truth in prepared.truths.truths.items()
    }
    pool = [REWARD_CHANNELS[channel](trajectory) for trajectory in prepared.pool]
    return PreparedPool(
        TruthSet(truths, prepared.truths.weights),
        pool,
        dataclasses.replace(prepared.context, reward_channel=channel),
        float(np.mean([truth.expected_return for truth in truths.values()])),
        float(np.mean([trajectory.total_return for trajectory in pool])),
    )
