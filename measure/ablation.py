"""The hindsight ablation's figures of one variant, each with a paired bootstrap interval.

Every variant (`measure.variants`) is scored on the same trajectories with the same
resamples (`measure.bootstrap.bootstrap_interval`), so two variants' intervals are
paired:

- `auroc_row`: the mean per-trajectory key-step AUROC within successful and within
  failed trajectories (`measure.key_steps`), and of |credit| within successes;
- `truth_row` (a finite MDP's pool, `measure.pools`): Pearson and Spearman of credit with
  A(s_t, a_t) (resampling trajectories), key-step sign agreement, and the mean cosine of
  the batch gradient with the exact one (resampling batches; `measure.truth_metrics`).

`benchmarks.hindsight_ablation` is the command.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.policy_evaluation import true_advantages
from creditgym.measure.bootstrap import bootstrap_interval
from creditgym.measure.key_steps import per_trajectory_auroc
from creditgym.measure.truth_metrics import TruthSet, cosine, gradient_estimate, pearson, spearman


def mean_with_interval(
    values: Sequence[float], resamples: np.ndarray, prefix: str
) -> dict[str, float]:
    """{prefix: mean, prefix_lo, prefix_hi, prefix_n} with a bootstrap interval of the mean."""
    array = np.asarray(values, dtype=np.float64)
    low, high = bootstrap_interval(lambda idx: float(array[idx].mean()), array.size, resamples)
    return {
        prefix: float(array.mean()) if array.size else math.nan,
        f"{prefix}_lo": low,
        f"{prefix}_hi": high,
        f"{prefix}_n": float(array.size),
    }


def auroc_row(
    trajectories: Sequence[Trajectory], credits: Sequence[np.ndarray], resamples: np.ndarray
) -> dict[str, float]:
    """AUROC within successes and failures (and of |credit| within successes), with CIs."""
    row: dict[str, float] = {}
    for outcome, wanted in (("success", True), ("failure", False)):
        values = per_trajectory_auroc(trajectories, credits, wanted)
        row.update(mean_with_interval(values, resamples, f"auroc_{outcome}"))
    magnitudes = per_trajectory_auroc(trajectories, [np.abs(c) for c in credits], True)
    row["auroc_abs_success"] = float(np.mean(magnitudes)) if magnitudes else math.nan
    return row


def truth_row(
    trajectories: Sequence[Trajectory],
    credits: Sequence[np.ndarray],
    truths: TruthSet,
    batch_size: int,
    resamples: np.ndarray,
) -> dict[str, float]:
    """Correlations with A(s_t, a_t), key-step sign agreement and batch gradient cosine."""
    advantages = [true_advantages(traj, truths.truth_of(traj)) for traj in trajectories]
    credit_values = [np.asarray(c, dtype=np.float64) for c in credits]

    def correlation(function: Callable[[np.ndarray, np.ndarray], float]):
        def statistic(indices: np.ndarray) -> float:
            return function(
                np.concatenate([credit_values[i] for i in indices]),
                np.concatenate([advantages[i] for i in indices]),
            )

        return statistic

    everything = np.arange(len(trajectories))
    row: dict[str, float] = {}
    for label, function in (("pearson", pearson), ("spearman", spearman)):
        statistic = correlation(function)
        row[label] = statistic(everything)
        row[f"{label}_lo"], row[f"{label}_hi"] = bootstrap_interval(
            statistic, len(trajectories), resamples
        )
    key = np.concatenate([[s.key_step for s in t.steps] for t in trajectories]).astype(bool)
    flat_credit, flat_advantage = np.concatenate(credit_values), np.concatenate(advantages)
    signed = key & (np.abs(flat_advantage) > 1e-9)
    row["key_sign"] = (
        float(np.mean(np.sign(flat_credit[signed]) == np.sign(flat_advantage[signed])))
        if signed.any()
        else math.nan
    )
    exact = truths.exact_gradient()
    cosines = [
        cosine(
            gradient_estimate(
                trajectories[start : start + batch_size],
                credit_values[start : start + batch_size],
                truths,
            ),
            exact,
        )
        for start in range(0, len(trajectories) - batch_size + 1, batch_size)
    ]
    row.update(mean_with_interval([c for c in cosines if math.isfinite(c)], resamples, "cos"))
    return row
