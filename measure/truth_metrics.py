"""Score a credit module's per-step credit against the exact ground truth (`measure.ground_truth`).

For trajectories sampled from the policy whose truth is known (each step's true state is
`step.info["mdp_state"]`, `envs.mdp`), per module:

- correlation: Pearson and Spearman of credit_t with A(s_t, a_t) over every step;
- key-step sign agreement: the fraction of key steps (`info["key_step"]`, where A != 0)
  whose credit has the sign of A(s_t, a_t) (a credit of 0 agrees with neither sign);
- the policy-gradient direction the credit implies in the per-state logit space
  (docs/ground_truth.md; COCOA, Meulemans et al. 2023, arXiv 2306.16803, measures estimators
  the same way): for a batch of N trajectories,
      g(s, a) = (1/N) sum_i sum_{t: s_t = s} credit_t (1[a_t = a] - pi(a|s)),
  whose expectation is the exact d(s) pi(a|s) A(s, a) when credit_t is an unbiased
  estimate of Q(s_t, a_t) (or of A, or of the return-to-go); over repeated batches,
  the mean cosine of g with the exact gradient, the cosine of the batches' mean (its
  bias in direction), and SNR = ||E g||^2 / E ||g - E g||^2.

Trajectories of several tasks combine into one logit space: the blocks of each task's
(state, action) logits side by side, the exact gradient of the task mixture being each
task's gradient times its sampling probability (`TruthSet`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.policy_evaluation import GroundTruth, true_advantages

# Below this |A| a key step has no sign to agree with (a forced step, float noise of DP).
ADVANTAGE_SIGN_TOL = 1e-9
# Below this |credit| a credit has no sign to agree with A's: credits are float32, whose
# rounding of a zero (a divergence of noise times a return, a difference of equal
# returns) is far below it, while a credit that moves a policy at all is far above it.
# The decomposition leaves such steps out of its sign agreement and counts them apart;
# `benchmarks.credit_truth` keeps the earlier rule (its committed tables: a credit of 0
# there agrees with neither sign).
CREDIT_SIGN_TOL = 1e-6


@dataclass(frozen=True)
class TruthSet:
    """Ground truth of every task the trajectories come from.

    Attributes:
        truths: task id (`Trajectory.task_id`) -> its `GroundTruth`.
        weights: task id -> probability that a sampled trajectory is of that task.
    """

    truths: Mapping[str, GroundTruth]
    weights: Mapping[str, float]

    def offsets(self) -> dict[str, int]:
        """Task id -> where its block of logits starts in the combined vector."""
        offsets, start = {}, 0
        for task_id in sorted(self.truths):
            offsets[task_id] = start
            start += len(self.truths[task_id].index)
        return offsets

    def size(self) -> int:
        return sum(len(truth.index) for truth in self.truths.values())

    def exact_gradient(self) -> np.ndarray:
        """[K] float64: each task's d pi A, weighted by its sampling probability."""
        vector = np.zeros(self.size(), dtype=np.float64)
        for task_id, start in self.offsets().items():
            truth = self.truths[task_id]
            vector[start : start + len(truth.index)] = self.weights[task_id] * (
                truth.gradient_vector()
            )
        return vector

    def truth_of(self, trajectory: Trajectory) -> GroundTruth:
        if trajectory.task_id not in self.truths:
            raise KeyError(f"no ground truth for task {trajectory.task_id!r}")
        return self.truths[trajectory.task_id]


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of `values` [n], ties given their average rank (as Spearman needs)."""
    order = np.argsort(values, kind="mergesort")
    ranked = np.empty(values.size, dtype=np.float64)
    ranked[order] = np.arange(1, values.size + 1)
    unique, inverse = np.unique(values, return_inverse=True)
    sums = np.bincount(inverse, weights=ranked, minlength=unique.size)
    counts = np.bincount(inverse, minlength=unique.size)
    return (sums / counts)[inverse]


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of [n] arrays; NaN when either is constant or n < 2."""
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (Pearson of the tie-averaged ranks)."""
    return pearson(ranks(x), ranks(y))


def sign_agreement(
    credit: np.ndarray, advantage: np.ndarray, credit_tol: float | None = None
) -> float:
    """Fraction of entries with |A| > tol whose credit has A's sign; NaN when there are none.

    credit_tol: None counts every such entry (a credit of 0 agrees with neither sign);
    a tolerance leaves out the entries with |credit| <= it (no sign to agree with;
    `small_credit_count` counts them).
    """
    signed = np.abs(advantage) > ADVANTAGE_SIGN_TOL
    if credit_tol is not None:
        signed &= np.abs(credit) > credit_tol
    if not signed.any():
        return float("nan")
    return float(np.mean(np.sign(credit[signed]) == np.sign(advantage[signed])))


def small_credit_count(credit: np.ndarray, advantage: np.ndarray, credit_tol: float) -> int:
    """Entries with |A| > tol whose |credit| <= `credit_tol`: left out of `sign_agreement`."""
    signed = np.abs(advantage) > ADVANTAGE_SIGN_TOL
    return int(np.sum(signed & (np.abs(credit) <= credit_tol)))


def gradient_estimate(
    trajectories: Sequence[Trajectory], credits: Sequence[np.ndarray], truths: TruthSet
) -> np.ndarray:
    """g = (1/N) sum_i sum_t credit_t (e_{s_t, a_t} - pi(.|s_t)) in the combined logit space.

    Args:
        trajectories: N trajectories with `info["mdp_state"]` on every step.
        credits: per trajectory, [T_i] per-step credit.
        truths: the tasks' ground truth (policy and logit index).
    Returns:
        [K] float64.
    """
    vector = np.zeros(truths.size(), dtype=np.float64)
    offsets = truths.offsets()
    for trajectory, credit in zip(trajectories, credits, strict=True):
        truth, start = truths.truth_of(trajectory), offsets[trajectory.task_id]
        for step, value in zip(trajectory.steps, credit, strict=True):
            state = step.info["mdp_state"]
            positions, pi = truth.policy_vector(state)
            vector[start + positions] -= float(value) * pi
            vector[start + truth.index[(state, step.action)]] += float(value)
    return vector / max(len(trajectories), 1)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors; NaN when either is zero."""
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norms) if norms > 0 else float("nan")


@dataclass(frozen=True)
class GradientStats:
    """How a module's batch gradients g_1..g_R compare with the exact gradient.

    Attributes:
        batches: R.
        cosine: mean over batches of cos(g_r, exact).
        cosine_of_mean: cos(mean_r g_r, exact): the direction's bias, without the noise.
        snr: ||mean g||^2 / (sum_r ||g_r - mean g||^2 / (R - 1)); NaN when R < 2.
    """

    batches: int
    cosine: float
    cosine_of_mean: float
    snr: float


def gradient_stats(estimates: np.ndarray, exact: np.ndarray) -> GradientStats:
    """`GradientStats` of estimates [R, K] against the exact gradient [K]."""
    mean = estimates.mean(axis=0)
    if len(estimates) >= 2:
        noise = float(((estimates - mean) ** 2).sum(axis=1).sum() / (len(estimates) - 1))
        snr = float(mean @ mean / noise) if noise > 0 else float("inf")
    else:
        snr = float("nan")
    return GradientStats(
        batches=len(estimates),
        cosine=float(np.nanmean([cosine(g, exact) for g in estimates])),
        cosine_of_mean=cosine(mean, exact),
        snr=snr,
    )


@dataclass(frozen=True)
class StepAgreement:
    """Per-step agreement of one module's credit with A(s_t, a_t) over a set of trajectories.

    Attributes:
        steps: steps compared.
        pearson, spearman: correlation of credit_t with A(s_t, a_t).
        key_steps: key steps with |A| > tol.
        key_sign_agreement: fraction of those whose credit has A's sign (with a credit
            tolerance: of those whose |credit| is above it).
        key_small_credit: key steps with |A| > tol left out for a credit at or below the
            tolerance (0 without one).
    """

    steps: int
    pearson: float
    spearman: float
    key_steps: int
    key_sign_agreement: float
    key_small_credit: int = 0


def step_agreement(
    trajectories: Sequence[Trajectory],
    credits: Sequence[np.ndarray],
    truths: TruthSet,
    credit_tol: float | None = None,
) -> StepAgreement:
    """Correlations and key-step sign agreement of `credits` with the true advantages
    (`credit_tol`: as `sign_agreement`'s)."""
    advantages = [true_advantages(traj, truths.truth_of(traj)) for traj in trajectories]
    credit = np.concatenate([np.asarray(c, dtype=np.float64) for c in credits] + [np.zeros(0)])
    advantage = np.concatenate([*advantages, np.zeros(0)])
    key = np.array(
        [step.key_step for traj in trajectories for step in traj.steps], dtype=bool
    ).reshape(-1)
    key_signed = key & (np.abs(advantage) > ADVANTAGE_SIGN_TOL)
    return StepAgreement(
        steps=int(credit.size),
        pearson=pearson(credit, advantage),
        spearman=spearman(credit, advantage),
        key_steps=int(key_signed.sum()),
        key_sign_agreement=sign_agreement(credit[key], advantage[key], credit_tol),
        key_small_credit=0
        if credit_tol is None
        else small_credit_count(credit[key], advantage[key], credit_tol),
    )
