"""HCAPO: hindsight credit from the policy's own teacher-forced pass with the outcome shown.

Tan et al. 2026, "Hindsight Credit Assignment for Long-Horizon LLM Agents",
arXiv 2603.08754. For trajectory i of a task group, step t (1-based):
- macro term: the GRPO advantage A^GRPO_i (`credit.grpo`, group std);
- hindsight score: log pi_hind(a_t) = (1 / (T_temp |a_t|)) sum_j log pi(y_j | y_<j, s_t,
  s_final), one teacher-forced pass of the policy with the outcome injected into step t's
  prompt (`outcome_hindsight`); T_temp = 5;
- self-normalised ratio rho_t = clip(pi_hind(a_t) / mean_k pi_hind(a_k), 0.8, 1.2), the
  mean over the steps of the same trajectory (computed in log space, so extreme
  log-probs cannot overflow);
- Q^H_t = rho_t gamma^(T-t) R_i, gamma = 0.95; optional smoothing
  Q~_t = alpha Q_t + (1 - alpha) Q_{t+1} (Q~_T = Q_T);
- micro term (Q^H - mu_H) / sigma_H, with mu, sigma over all (i, t) of the group (the
  paper's algorithm; default) or over the group's steps at the same t ("time_step", its
  Eq. 8 wording);
- do no harm: negative micro terms are zeroed in successful trajectories, success being
  the verdict on the reward channel the module trains on (`credit.base.verdict`,
  return > 0: the paper's +10 / 0), so the gate sees the signal the group baseline sees;
- A_t = macro_weight A^GRPO_i + omega A^Micro_t, broadcast to the step's action tokens.
Trajectories whose values are all 0 (failures with R = 0) need no hindsight pass: their Q
is 0 whatever rho is, so they are not scored.

Open choices, each an option (`HCAPOOptions`, named on the command line with
`--credit-options key=value`); the defaults are the behaviour so far:
- `hindsight`: what the block shows (`credit.hindsight.CONTENTS`; default `final_action`:
  success or failure, the env's feedback and the final action), `wording` (its verdict
  words, default `hcapo`) and `hindsight_position`: where it sits (default
  `before_instruction`);
- `length_normalisation`: |a_t| covers the whole generated `response` (thinking, tags and
  command: the tokens that receive the gradient; default) or only the `action` tokens
  that spell the command (`credit.views.action_span_mask`);
- `causal_contrast`: score log pi_hind - log pi_causal per token instead of log pi_hind
  (False, the paper: its ratio compares steps by how likely their actions are with the
  outcome shown, which also ranks actions that are likely anyway above rare ones);
- `temperature`, `clip`, `gamma` (gamma = 1 turns the gamma^(T-t) factor off),
  `do_no_harm`, `omega`, `macro_weight`, `micro_normalisation` as in the paper.

Seed variant (docs/methods.md; `variant="seed"`, registered as `hcapo_seed` with
`HCAPOSeedOptions`): importance ratio rho_t = exp(clamp(log p_hind(a_t) - log p(a_t), -5,
5)) of sequence log-probs under the hindsight and causal views, Q_t = rho_t G_t with the
discounted return-to-go G_t, macro / micro weights 0.6 / 0.4.

The arithmetic from per-token log-probs to advantages (`trajectory_q`, then
`hcapo_advantages`) is pure and written once: `HCAPO` calls it on the policy's scores, the
verl estimator (integrations/verl_hindsight.py) on the scores verl's actor returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import CreditOutput, broadcast_to_tokens, verdict
from creditgym.credit.gigpo import discounted_returns
from creditgym.credit.grpo import ZERO_STD_TOL, group_members, group_normalised
from creditgym.credit.hindsight import BlockOptions, HindsightBlock, HindsightScorer
from creditgym.credit.options import doc, doc_of
from creditgym.credit.views import action_span_mask, causal_view
from creditgym.models.scoring import score_logprobs

Variant = Literal["paper", "seed"]
MicroNormalisation = Literal["group", "time_step"]
LengthNormalisation = Literal["response", "action"]
SEED_LOG_RATIO_CLAMP = 5.0


@dataclass(frozen=True)
class HCAPOOptions(BlockOptions):
    """The options of `HCAPO` (`credit.options`; the module docstring has the math), the
    hindsight block's among them (`credit.hindsight.BlockOptions`)."""

    variant: Variant = field(
        default="paper",
        metadata=doc(
            "paper (self-normalised ratio, Q = rho gamma^(T-t) R) or seed (importance ratio, "
            "Q = rho G_t; docs/methods.md)"
        ),
    )
    temperature: float = field(
        default=5.0, metadata=doc("T_temp of the hindsight score, > 0 (the paper's 5)")
    )
    clip: tuple[float, float] = field(
        default=(0.8, 1.2),
        metadata=doc(
            "bounds of rho, low <= high (the paper's 0.8,1.2; the seed variant clamps its log "
            "ratio instead)"
        ),
    )
    gamma: float = field(
        default=0.95, metadata=doc("discount in [0, 1]; 1 turns the gamma^(T-t) factor off")
    )
    smoothing_alpha: float | None = field(
        default=None,
        metadata=doc(
            "alpha of Q~_t = alpha Q_t + (1 - alpha) Q_{t+1}, in [0, 1]; none: no smoothing"
        ),
    )
    micro_normalisation: MicroNormalisation = field(
        default="group",
        metadata=doc(
            "what the micro term's mean and std pool: every (i, t) of the group (the paper's "
            "algorithm) or the group's steps at the same t (its Eq. 8 text)"
        ),
    )
    macro_weight: float = field(default=1.0, metadata=doc("weight of the GRPO term A^GRPO"))
    omega: float = field(
        default=1.0, metadata=doc("weight of the micro term (the paper's best ablation, 1)")
    )
    do_no_harm: bool = field(
        default=True, metadata=doc("zero negative micro terms in successful trajectories")
    )
    future_steps: int = field(
        default=8, metadata=doc("steps of realised future in a `future` block, >= 0")
    )
    length_normalisation: LengthNormalisation = field(
        default="response",
        metadata=doc(
            "the tokens |a_t| averages over: every generated token (response) or the command's "
            "(action, credit.views.action_span_mask)"
        ),
    )
    causal_contrast: bool = field(
        default=False,
        metadata=doc("score log pi_hind - log pi_causal per token (paper variant only)"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.temperature <= 0 or self.clip[0] > self.clip[1]:
            raise ValueError(
                f"need temperature > 0 and clip low <= high, got {self.temperature}, {self.clip}"
            )
        if self.smoothing_alpha is not None and not 0.0 <= self.smoothing_alpha <= 1.0:
            raise ValueError(f"smoothing_alpha must be in [0, 1], got {self.smoothing_alpha}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.future_steps < 0:
            raise ValueError(f"future_steps must be >= 0, got {self.future_steps}")
        if self.causal_contrast and self.variant != "paper":
            raise ValueError(
                "causal_contrast applies to the paper variant (the seed's ratio is one already)"
            )

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


@dataclass(frozen=True)
class HCAPOSeedOptions(HCAPOOptions):
    """The options of `HCAPOSeed`: `HCAPOOptions` with the seed variant's defaults
    (docs/methods.md: importance ratio, macro / micro weights 0.6 / 0.4)."""

    variant: Variant = field(default="seed", metadata=doc_of(HCAPOOptions, "variant"))
    macro_weight: float = field(default=0.6, metadata=doc_of(HCAPOOptions, "macro_weight"))
    omega: float = field(default=0.4, metadata=doc_of(HCAPOOptions, "omega"))


# HCAPO's default hindsight prompt (the verl adapter's views re-export it).
HCAPO_BLOCK = HCAPOOptions().block()


def outcome_hindsight(trajectory: Trajectory) -> str:
    """The default outcome block injected into every step's prompt (HCAPO's s_final)."""
    return HCAPO_BLOCK.text(trajectory, 0)


def terminal_values(trajectory: Trajectory, gamma: float) -> np.ndarray:
    """gamma^(T-t) R_i for t = 1..T (the paper's Q^H before rho), shape [T]."""
    exponents = np.arange(trajectory.length - 1, -1, -1, dtype=np.float64)
    return gamma**exponents * trajectory.total_return


def return_to_go_values(trajectory: Trajectory, gamma: float) -> np.ndarray:
    """G_t = sum_{k>=t} gamma^{k-t} r_k (the seed's Q before rho), shape [T]."""
    return discounted_returns([step.reward for step in trajectory.steps], gamma)


def self_normalised_ratio(
    hindsight: Sequence[np.ndarray], causal: Sequence[np.ndarray], temperature: float
) -> np.ndarray:
    """rho_t before clipping: pi_hind(a_t) / mean_k pi_hind(a_k), from per-token log-probs.

    Args:
        hindsight: per step, [A_t] hindsight log-probs. causal: unused by this ratio.
    Returns:
        [T] float64. A step with no action tokens scores log pi_hind = 0.
    """
    del causal
    scores = np.array([h.mean() / temperature if h.size else 0.0 for h in hindsight])
    scores = np.nan_to_num(scores, nan=0.0, neginf=-1e30)
    log_mean = np.logaddexp.reduce(scores) - np.log(len(scores))
    return np.exp(scores - log_mean)


def importance_ratio(
    hindsight: Sequence[np.ndarray], causal: Sequence[np.ndarray], temperature: float
) -> np.ndarray:
    """The seed variant's (`hcapo_seed`) rho_t = exp(clamp(log p_hind(a_t) - log p(a_t),
    -5, 5)) of sequence log-probs, shape [T]."""
    del temperature
    log_ratio = np.array([float(h.sum() - c.sum()) for h, c in zip(hindsight, causal, strict=True)])
    log_ratio = np.nan_to_num(log_ratio, nan=0.0)
    return np.exp(np.clip(log_ratio, -SEED_LOG_RATIO_CLAMP, SEED_LOG_RATIO_CLAMP))


@dataclass(frozen=True)
class HCAPOVariant:
    """How a variant turns hindsight scores into Q.

    Attributes:
        ratio: (hindsight log-probs per step, causal log-probs per step, temperature) ->
            rho before clipping, [T].
        values: (trajectory, gamma) -> the value rho multiplies, [T].
        needs_causal: whether the causal view must be scored too.
        clipped: whether rho is clipped to `HCAPOOptions.clip`.
    """

    ratio: Callable[[Sequence[np.ndarray], Sequence[np.ndarray], float], np.ndarray]
    values: Callable[[Trajectory, float], np.ndarray]
    needs_causal: bool
    clipped: bool


VARIANTS: dict[str, HCAPOVariant] = {
    "paper": HCAPOVariant(self_normalised_ratio, terminal_values, False, True),
    "seed": HCAPOVariant(importance_ratio, return_to_go_values, True, False),
}


def smoothed(q: np.ndarray, alpha: float | None) -> np.ndarray:
    """Q~_t = alpha Q_t + (1 - alpha) Q_{t+1}, with Q~_T = Q_T; alpha None: Q unchanged.

    Args: q: [T] hindsight Q of one trajectory. Returns: [T] float64.
    """
    if alpha is None or q.size < 2:
        return q
    following = np.append(q[1:], q[-1])  # Q_{t+1}, with Q~_T = Q_T
    return alpha * q + (1.0 - alpha) * following


def micro_advantages(
    q_values: Sequence[np.ndarray],
    groups: Mapping[str, Sequence[int]],
    normalisation: MicroNormalisation = "group",
) -> list[np.ndarray]:
    """A^Micro = (Q^H - mu_H) / sigma_H within each task group.

    Args:
        q_values: per trajectory i, [T_i] hindsight Q.
        groups: group id -> indices into `q_values` (`credit.grpo.group_members`).
        normalisation: "group" pools every (i, t) of the group (the paper's algorithm);
            "time_step" pools the group's steps at the same t (its Eq. 8 wording).
    Returns:
        per trajectory, [T_i] float64; sigma is the unbiased std (ddof 1), and a pool of
        one value or with sigma < `ZERO_STD_TOL` gives 0 (no signal, nothing to blow up).
    """
    micro = [np.zeros_like(q, dtype=np.float64) for q in q_values]
    for members in groups.values():
        pools: dict[int, list[tuple[int, int]]] = {}
        for i in members:
            for t in range(len(q_values[i])):
                key = t if normalisation == "time_step" else 0
                pools.setdefault(key, []).append((i, t))
        for pool in pools.values():
            if len(pool) < 2:
                continue
            q = np.array([q_values[i][t] for i, t in pool])
            sigma = float(np.std(q, ddof=1))
            if sigma < ZERO_STD_TOL:
                continue
            for (i, t), value in zip(pool, (q - q.mean()) / sigma, strict=True):
                micro[i][t] = value
    return micro


def combined_advantages(
    macro: np.ndarray,
    micro: Sequence[np.ndarray],
    success: np.ndarray,
    macro_weight: float = 1.0,
    omega: float = 1.0,
    do_no_harm: bool = True,
) -> list[np.ndarray]:
    """A_{i,t} = macro_weight A^GRPO_i + omega A^Micro_{i,t}, HCAPO's final step credit.

    Args:
        macro: [N] GRPO advantages A^GRPO_i. micro: per trajectory, [T_i] A^Micro.
        success: [N] bool; with `do_no_harm`, negative micro terms of successful
            trajectories are zeroed (a success's step is never pushed below its macro).
    Returns:
        per trajectory, float32 [T_i].
    """
    advantages = []
    for macro_i, micro_i, succeeded in zip(macro, micro, success, strict=True):
        if do_no_harm and succeeded:
            micro_i = np.maximum(micro_i, 0.0)
        advantages.append((macro_weight * macro_i + omega * micro_i).astype(np.float32))
    return advantages


def trajectory_q(
    trajectory: Trajectory,
    hindsight: Sequence[np.ndarray] | None,
    causal: Sequence[np.ndarray] | None,
    options: HCAPOOptions,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Q^H of one trajectory from its per-token log-probs: rho -> Q -> smoothing.

    Args:
        trajectory: its steps' rewards and return give the values rho multiplies
            (`HCAPOVariant.values`).
        hindsight: per step, [A_t] hindsight log-probs (over the tokens |a_t| counts);
            None when the trajectory was not scored (`needs_scores` is False for it).
        causal: per step, [A_t] causal log-probs: read by the seed variant and by
            `causal_contrast`; None otherwise.
        options: HCAPO's options (variant, temperature, clip, gamma, smoothing_alpha,
            causal_contrast).
    Returns:
        ([T] float64 Q^H, [T] float64 rho, or None where no rho was computed: a trajectory
        whose values are all 0 has Q = 0 whatever rho is).
    """
    variant = VARIANTS[options.variant]
    values = variant.values(trajectory, options.gamma)
    if hindsight is None:
        return smoothed(values, options.smoothing_alpha), None
    empty = [np.zeros(0)] * len(hindsight)
    causal = empty if causal is None else causal
    if options.causal_contrast:
        hindsight = [h - c for h, c in zip(hindsight, causal, strict=True)]
    rho = variant.ratio(hindsight, causal, options.temperature)
    if variant.clipped:
        rho = np.clip(rho, *options.clip)
    return smoothed(rho * values, options.smoothing_alpha), rho


def needs_scores(trajectory: Trajectory, options: HCAPOOptions) -> bool:
    """Whether Q^H of `trajectory` depends on its scores: not when its values are all 0
    (failures with R = 0), so those are never scored."""
    return bool(np.any(VARIANTS[options.variant].values(trajectory, options.gamma)))


def needs_causal(options: HCAPOOptions) -> bool:
    """Whether `trajectory_q` reads causal log-probs under these options."""
    return VARIANTS[options.variant].needs_causal or options.causal_contrast


def hcapo_advantages(
    trajectories: Sequence[Trajectory], q_values: Sequence[np.ndarray], options: HCAPOOptions
) -> tuple[list[np.ndarray], float]:
    """HCAPO's step advantages from the batch's Q^H: macro (GRPO, group std) + micro.

    Args:
        trajectories: the batch (groups by `group_id`; verdicts by `credit.base.verdict`).
        q_values: per trajectory, [T_i] Q^H (`trajectory_q`).
        options: micro_normalisation, macro_weight, omega, do_no_harm.
    Returns:
        (per trajectory, float32 [T_i] advantages; the GRPO term's `frac_reward_zero_std`).
    """
    groups = group_members(trajectories)
    returns = np.array([traj.total_return for traj in trajectories], dtype=np.float64)
    macro, zero_std = group_normalised(returns, groups, "group")
    advantages = combined_advantages(
        macro,
        micro_advantages(q_values, groups, options.micro_normalisation),
        np.array([verdict(traj) for traj in trajectories], dtype=bool),
        options.macro_weight,
        options.omega,
        options.do_no_harm,
    )
    return advantages, zero_std


class HCAPO(HindsightScorer):
    """Hindsight credit (HCAPO, arXiv 2603.08754); see the module docstring for the math.

    Arguments as `credit.hindsight.HindsightScorer`, options `HCAPOOptions`.

    Metrics: `frac_reward_zero_std`, `mean_rho`, `frac_rho_clipped`, `num_hindsight_steps`.
    """

    name = "hcapo"
    # Step rewards: the seed variant's return-to-go (`variant="seed"`); the block's
    # verdict and the gate read the return (`credit.base.verdict`).
    reads = frozenset({"return", "step_rewards", "observations", "actions", "feedback"})
    Options: type[HCAPOOptions] = HCAPOOptions
    options: HCAPOOptions

    def view_logprobs(
        self, steps: Sequence[tuple[Trajectory, int]], causal: bool
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per-token log-probs ([A_t] each) of every step's hindsight view and, if
        `causal`, its causal view (else []), in the order of `steps`: the policy's
        teacher-forced pass (`models.scoring`). The exact source (`credit.exact_source`)
        reads them off the finite MDP instead."""
        tokenizer = self.model.tokenizer
        views = [self.hindsight_view_of(traj, t) for traj, t in steps]
        if causal:
            views += [causal_view(tokenizer, traj, t, self.history_len) for traj, t in steps]
        scores = self.score(score_logprobs, views)
        return scores[: len(steps)], scores[len(steps) :]

    def hindsight_q(self, trajectories: Sequence[Trajectory]) -> tuple[list[np.ndarray], dict]:
        """Q^H per step ([T_i] float64 each), scoring only trajectories with a non-zero value."""
        options = self.options
        scored = [i for i, traj in enumerate(trajectories) if needs_scores(traj, options)]
        steps = [(trajectories[i], t) for i in scored for t in range(trajectories[i].length)]
        hindsight, causal = self.view_logprobs(steps, needs_causal(options))
        if options.length_normalisation == "action":
            masks = [action_span_mask(self.model.tokenizer, traj, t) for traj, t in steps]
            hindsight = [h[m] for h, m in zip(hindsight, masks, strict=True)]
            causal = [c[m] for c, m in zip(causal, masks, strict=True)] if causal else causal
        per_trajectory: dict[int, tuple[list[np.ndarray], list[np.ndarray] | None]] = {}
        cursor = 0
        for i in scored:
            span = slice(cursor, cursor + trajectories[i].length)
            per_trajectory[i] = (hindsight[span], causal[span] if causal else None)
            cursor += trajectories[i].length
        q_values, rhos = [], []
        for i, traj in enumerate(trajectories):
            h, c = per_trajectory.get(i, (None, None))
            q, rho = trajectory_q(traj, h, c, options)
            q_values.append(q)
            if rho is not None:
                rhos.append(rho)
        all_rhos = np.concatenate([np.ones(0), *rhos])
        clipped = VARIANTS[options.variant].clipped
        at_bounds = (all_rhos <= options.clip[0]) | (all_rhos >= options.clip[1])
        stats = {
            "mean_rho": float(all_rhos.mean()) if all_rhos.size else 1.0,
            "frac_rho_clipped": float(at_bounds.mean()) if clipped and all_rhos.size else 0.0,
            "num_hindsight_steps": float(len(steps)),
        }
        return q_values, stats

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        q_values, stats = self.hindsight_q(trajectories)
        step_advantages, zero_std = hcapo_advantages(trajectories, q_values, self.options)
        return CreditOutput(
            step_advantages=step_advantages,
            token_advantages=broadcast_to_tokens(trajectories, step_advantages),
            metrics={"frac_reward_zero_std": zero_std, **stats},
        )


class HCAPOSeed(HCAPO):
    """HCAPO's seed variant (docs/methods.md): importance ratio, return-to-go, 0.6 / 0.4."""

    name = "hcapo_seed"
    Options = HCAPOSeedOptions
