"""HP-RLVR: single-rollout token credit from causal-vs-hindsight divergence.

Chen et al., Oct 2026, "Hindsight-Privileged RLVR: Single-Rollout Token Credit Without
Group Sampling" (no arXiv id; docs/methods.md). One rollout per task (G = 1 works, no
group, no critic, no reference solution). The policy snapshot that generated the
trajectory scores every eligible (policy-generated) token twice by teacher forcing:
under its causal prompt, and under a hindsight prompt holding the realized future of the
trajectory and the verifier's feedback (`future_hindsight`). Then, per token j,

    d_j = JS(p_causal_j || p_hind_j) / ln 2 in [0, 1]   (full vocabulary, natural logs)
    w_j = min(d_j / mean_k d_k, max_weight)             (k over the trajectory's tokens)
    A_j = (R - b) * w_j

so the sign comes from the reward against a historical baseline b and the magnitude from
how much knowing the outcome changes the policy's prediction there. |A_j| <= max_weight
|R - b|: bounded by construction, and non-zero for successes and failures alike whenever
R != b. When both views agree everywhere (mean d = 0) every weight is 0.

Open choices (the paper body is not available), each the default here:
- baseline b: exponential moving average of R per task (`env_id/task_id`) once the task
  has been seen, else a global EMA; updated once per batch *after* the credit is
  computed, from the batch mean of R per task, so the batch's credit does not depend on
  its own order. A task's first average is its first batch mean.
- weights normalised by the trajectory's mean divergence (`normalise_weights=True`), so
  the average |A| of a trajectory is |R - b| whatever the overall divergence level;
  `False` uses d_j itself (|A_j| <= |R - b|).
- hindsight block (`hindsight`, `credit.hindsight`): `future` -- outcome and verifier
  feedback, then the next `future_steps` steps (observation each action produced,
  next action), each observation cut to `max_observation_chars`, so prompt length stays
  bounded on long episodes; placed before the instruction (`hindsight_position`), in
  HP-RLVR's words (`wording`);
- eligible tokens (`eligible_tokens`): every generated token of the response (`response`,
  thinking and tags included) or only those spelling the command (`action`,
  `credit.views.action_span_mask`); ineligible tokens get credit 0 and do not enter the
  trajectory's mean divergence;
- per-step credit (for step-level consumers) = mean of the step's eligible token credits.
The control (`weights="uniform"`): w_j = 1 at every eligible token, so A_j = R - b, the
same magnitude as the default's normalised weights on average (their mean over a
trajectory is 1 before the cap). It keeps everything of HP-RLVR but the hindsight: one
rollout per task, the tasks that buys at equal rollouts, the baseline. What HP-RLVR gains
over GRPO beyond this control is the divergence's; what the control gains too is single
rollouts over more tasks and the baseline (REINFORCE with a moving baseline).
Each choice is an option (`HPRLVROptions`), named on the command line with
`--credit-options key=value`. The weights (`divergence_weights`, `token_credit`) and the
baseline's update (`updated_baselines`) are pure functions, called by `HPRLVR` and by the
verl estimator (integrations/verl_credit.py).
R is the trajectory's total return (see `credit.grpo`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import CreditOutput
from creditgym.credit.hindsight import (
    BlockOptions,
    HindsightBlock,
    HindsightContent,
    HindsightScorer,
    WordingName,
)
from creditgym.credit.options import doc, doc_of
from creditgym.credit.views import action_ids_of, action_span_mask, causal_view
from creditgym.models.scoring import score_divergence

# Below this mean divergence the two views are treated as identical (float32 noise).
MIN_MEAN_DIVERGENCE = 1e-12
EligibleTokens = Literal["response", "action"]
WeightSource = Literal["divergence", "uniform"]


@dataclass(frozen=True)
class HPRLVROptions(BlockOptions):
    """The options of `HPRLVR` (`credit.options`; the module docstring has the math), the
    hindsight block's among them (`credit.hindsight.BlockOptions`, with HP-RLVR's block
    and words as defaults)."""

    hindsight: HindsightContent = field(
        default="future", metadata=doc_of(BlockOptions, "hindsight")
    )
    wording: WordingName = field(default="hp_rlvr", metadata=doc_of(BlockOptions, "wording"))

    baseline_momentum: float = field(
        default=0.9,
        metadata=doc("EMA momentum m of the baseline, b <- m b + (1 - m) mean R, in [0, 1)"),
    )
    initial_baseline: float = field(
        default=0.0,
        metadata=doc("the global baseline before any batch (0: a failure paid 0 gets no credit)"),
    )
    normalise_weights: bool = field(
        default=True, metadata=doc("w_j = d_j / mean_k d_k (true) or d_j (false)")
    )
    max_weight: float = field(default=5.0, metadata=doc("cap of the normalised weight, > 0"))
    future_steps: int = field(
        default=8, metadata=doc("future steps shown in a `future` block, >= 0")
    )
    eligible_tokens: EligibleTokens = field(
        default="response",
        metadata=doc(
            "the tokens that get credit: every generated token (response) or the command's "
            "(action, credit.views.action_span_mask)"
        ),
    )
    weights: WeightSource = field(
        default="divergence",
        metadata=doc(
            "where w_j comes from: the causal-vs-hindsight divergence (divergence), or 1 at "
            "every eligible token (uniform: the control without hindsight, the same single "
            "rollouts, tasks and baseline, A_j = R - b, no scoring pass)"
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.baseline_momentum < 1.0:
            raise ValueError(f"baseline_momentum must be in [0, 1), got {self.baseline_momentum}")
        if self.max_weight <= 0:
            raise ValueError(f"max_weight must be positive, got {self.max_weight}")
        if self.future_steps < 0:
            raise ValueError(f"future_steps must be >= 0, got {self.future_steps}")

    def block(self, history_len: int = 2) -> HindsightBlock:
        """The hindsight prompt these options choose, with `history_len` history steps."""
        return HindsightBlock(
            self.hindsight,
            self.wording,
            self.hindsight_position,
            self.future_steps,
            self.max_observation_chars,
            history_len,
        )


# HP-RLVR's default hindsight prompt (the verl adapter's views re-export it).
HP_RLVR_BLOCK = HPRLVROptions().block()


def future_hindsight(
    trajectory: Trajectory,
    t: int,
    future_steps: int = HP_RLVR_BLOCK.future_steps,
    max_observation_chars: int = HP_RLVR_BLOCK.max_observation_chars,
) -> str:
    """Verifier feedback and the realized future after step t: the default hindsight block."""
    block = replace(
        HP_RLVR_BLOCK, future_steps=future_steps, max_observation_chars=max_observation_chars
    )
    return block.text(trajectory, t)


def divergence_weights(
    divergences: Sequence[np.ndarray], normalise: bool, max_weight: float
) -> list[np.ndarray]:
    """w_j per step from the trajectory's per-token divergences d_j (each [A_t], in [0, 1])."""
    flat = np.concatenate([*divergences, np.zeros(0)])
    if not normalise:
        return [d.astype(np.float64) for d in divergences]
    mean = float(flat.mean()) if flat.size else 0.0
    if mean < MIN_MEAN_DIVERGENCE:
        return [np.zeros_like(d, dtype=np.float64) for d in divergences]
    return [np.minimum(d / mean, max_weight) for d in divergences]


def token_credit(
    divergences: Sequence[np.ndarray],
    episode_return: float,
    baseline: float,
    normalise: bool = True,
    max_weight: float = 5.0,
) -> list[np.ndarray]:
    """HP-RLVR's token credit of one trajectory: A_j = (R - b) w_j.

    Args:
        divergences: per step t, the normalised JSD d_j of each action token, [A_t] each,
            values in [0, 1] (`models.scoring.score_divergence`).
        episode_return: R, the trajectory's total return.
        baseline: b, the historical baseline of its task.
        normalise, max_weight: how d becomes w (`divergence_weights`).
    Returns:
        per step, float32 [A_t]; |A_j| <= max_weight |R - b| (normalised) or |R - b|.
    """
    weights = divergence_weights(divergences, normalise, max_weight)
    return [((episode_return - baseline) * w).astype(np.float32) for w in weights]


def step_credit(token_credits: Sequence[np.ndarray]) -> np.ndarray:
    """Per-step credit for step-level consumers: the mean of each step's token credits.

    Args: per step, [A_t] token credits. Returns: [T] float32 (0 for a step with none).
    """
    return np.array([c.mean() if c.size else 0.0 for c in token_credits], dtype=np.float32)


def updated_baselines(
    task_baselines: Mapping[str, float],
    global_baseline: float,
    task_keys: Sequence[str],
    returns: np.ndarray,
    momentum: float,
) -> tuple[dict[str, float], float]:
    """One EMA step of the baselines from a batch, b <- m b + (1 - m) mean R.

    Args:
        task_baselines: task key -> its baseline so far (a task not in it is new).
        global_baseline: the global baseline so far.
        task_keys: [N] the task of each trajectory. returns: [N] their returns R.
        momentum: m in [0, 1).
    Returns:
        (task baselines, global baseline) after the batch. Each task moves once, by the
        mean return of its trajectories in the batch (so the batch order does not matter);
        a new task starts at that mean; the global baseline moves by the batch mean.
    """
    if len(task_keys) == 0:
        return dict(task_baselines), global_baseline
    returns_by_task: dict[str, list[float]] = defaultdict(list)
    for key, value in zip(task_keys, returns, strict=True):
        returns_by_task[key].append(float(value))
    updated = dict(task_baselines)
    for key, values in returns_by_task.items():
        mean_return = float(np.mean(values))
        previous = updated.get(key)
        updated[key] = (
            mean_return if previous is None else momentum * previous + (1 - momentum) * mean_return
        )
    batch_mean = float(np.mean(returns))
    return updated, momentum * global_baseline + (1 - momentum) * batch_mean


class HPRLVR(HindsightScorer):
    """Hindsight-privileged single-rollout token credit; see the module docstring.

    Arguments as `credit.hindsight.HindsightScorer` (the model: the policy snapshot that
    generated the trajectories), options `HPRLVROptions`.

    Metrics: `mean_jsd` (not with uniform weights), `mean_baseline`, `mean_abs_advantage`,
    `frac_zero_weight_trajs`.
    """

    name = "hp_rlvr"
    reads = frozenset({"return", "observations", "actions", "feedback"})
    default_group_size = 1  # single rollout per task: the paper's setting
    Options = HPRLVROptions
    options: HPRLVROptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As `credit.hindsight.HindsightScorer`; the baselines start at `initial_baseline`.
        With uniform weights nothing is scored, so generation keeps nothing for it."""
        super().__init__(*args, **kwargs)
        if self.options.weights == "uniform":
            self.generation_cache = None
        self.global_baseline = float(self.options.initial_baseline)
        self.task_baselines: dict[str, float] = {}

    @staticmethod
    def task_key(trajectory: Trajectory) -> str:
        return f"{trajectory.env_id}/{trajectory.task_id}"

    def baseline(self, trajectory: Trajectory) -> float:
        """b for this trajectory: its task's EMA if the task was seen, else the global EMA."""
        return self.task_baselines.get(self.task_key(trajectory), self.global_baseline)

    def divergences(self, trajectories: Sequence[Trajectory]) -> list[list[np.ndarray]]:
        """d_j per trajectory, per step ([A_t] each): one causal and one hindsight pass per step.

        With `eligible_tokens="action"`, each step's array holds the command's tokens only.
        With `weights="uniform"`, every d_j is 1 and no view is scored.
        """
        tokenizer = self.model.tokenizer
        if self.options.weights == "uniform":
            return [
                [np.ones(len(action_ids_of(tokenizer, traj, t))) for t in range(traj.length)]
                for traj in trajectories
            ]
        causal, hindsight = [], []
        for traj in trajectories:
            for t in range(traj.length):
                causal.append(causal_view(tokenizer, traj, t, self.history_len))
                hindsight.append(self.hindsight_view_of(traj, t))
        scores = iter(self.score(score_divergence, causal, hindsight))
        return [[next(scores).jsd for _ in traj.steps] for traj in trajectories]

    def eligible(self, trajectory: Trajectory, t: int, num_tokens: int) -> np.ndarray:
        """[A_t] bool: which of step t's `num_tokens` scored tokens receive credit."""
        if self.options.eligible_tokens == "action":
            return action_span_mask(self.model.tokenizer, trajectory, t)
        return np.ones(num_tokens, dtype=bool)

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        divergences = self.divergences(trajectories)
        step_advantages, token_advantages = [], []
        baselines, zero_weight, abs_advantages = [], 0, []
        for traj, traj_divergences in zip(trajectories, divergences, strict=True):
            baseline = self.baseline(traj)
            baselines.append(baseline)
            masks = [self.eligible(traj, t, d.size) for t, d in enumerate(traj_divergences)]
            eligible = [d[m] for d, m in zip(traj_divergences, masks, strict=True)]
            options = self.options
            credit = token_credit(
                eligible, traj.total_return, baseline, options.normalise_weights, options.max_weight
            )
            weights = divergence_weights(eligible, options.normalise_weights, options.max_weight)
            zero_weight += int(traj.length > 0 and not any(np.any(w) for w in weights))
            step_advantages.append(step_credit(credit))
            # Ineligible tokens get 0; scripted steps carry no generated tokens, so their
            # credit lives at step level only.
            full = []
            for c, m in zip(credit, masks, strict=True):
                values = np.zeros(m.size, dtype=np.float32)
                values[m] = c
                full.append(values)
            token_advantages.append(
                [
                    c if step.action_token_ids else np.zeros(0, dtype=np.float32)
                    for c, step in zip(full, traj.steps, strict=True)
                ]
            )
            abs_advantages.extend(np.abs(c) for c in credit)
        all_divergences = np.concatenate([d for traj in divergences for d in traj] + [np.zeros(0)])
        all_abs = np.concatenate([*abs_advantages, np.zeros(0)])
        metrics = {
            "mean_baseline": float(np.mean(baselines)) if baselines else self.global_baseline,
            "mean_abs_advantage": float(all_abs.mean()) if all_abs.size else 0.0,
            "frac_zero_weight_trajs": zero_weight / len(trajectories) if trajectories else 0.0,
        }
        if self.options.weights == "divergence":  # the uniform control scores nothing
            metrics["mean_jsd"] = float(all_divergences.mean()) if all_divergences.size else 0.0
        # After the credit, so the batch's credit does not depend on its own returns.
        self.task_baselines, self.global_baseline = updated_baselines(
            self.task_baselines,
            self.global_baseline,
            [self.task_key(traj) for traj in trajectories],
            np.array([traj.total_return for traj in trajectories], dtype=np.float64),
            self.options.baseline_momentum,
        )
        return CreditOutput(step_advantages, token_advantages, metrics)

    def state_dict(self) -> dict[str, Any]:
        return {
            "global_baseline": self.global_baseline,
            "task_baselines": dict(self.task_baselines),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.global_baseline = float(state["global_baseline"])
        self.task_baselines = {key: float(value) for key, value in state["task_baselines"].items()}
