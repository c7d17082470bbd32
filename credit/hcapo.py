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

Open choices, each a constructor option (named on the command line with
`--credit-option key=value`, `HCAPO.options`); the defaults are the behaviour so far:
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

Seed variant (docs/methods.md; `variant="seed"`, registered as `hcapo_seed`): importance
ratio rho_t = exp(clamp(log p_hind(a_t) - log p(a_t), -5, 5)) of sequence log-probs under
the hindsight and causal views, Q_t = rho_t G_t with the discounted return-to-go G_t,
macro / micro weights 0.6 / 0.4.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from agents.generation_cache import DEFAULT_GENERATION_CACHE_BYTES
from agents.models import LoadedModel
from agents.prompts import HINDSIGHT_POSITIONS
from agents.trajectory import Trajectory
from credit.base import CreditOutput, broadcast_to_tokens, verdict
from credit.gigpo import discounted_returns
from credit.grpo import ZERO_STD_TOL, group_members, group_normalised
from credit.hindsight import (
    CONTENTS,
    HCAPO_WORDING,
    WORDINGS,
    HindsightBlock,
    HindsightContent,
    HindsightScorer,
    hindsight_block,
)
from credit.options import (
    OptionParser,
    choice,
    parse_bool,
    parse_float,
    parse_int,
    parse_pair,
)
from credit.scoring import DEFAULT_MEMORY_BUDGET_BYTES, ScoreMemo, score_logprobs
from credit.views import TeacherForced, action_span_mask, causal_view

Variant = Literal["paper", "seed"]
MicroNormalisation = Literal["group", "time_step"]
LengthNormalisation = Literal["response", "action"]
SEED_LOG_RATIO_CLAMP = 5.0
# The seed variant's settings (docs/methods.md): `hcapo_seed` and `hcapo_seed_exact`.
SEED_DEFAULTS: dict[str, Any] = {"variant": "seed", "macro_weight": 0.6, "omega": 0.4}


def outcome_hindsight(trajectory: Trajectory) -> str:
    """The default outcome block injected into every step's prompt (HCAPO's s_final)."""
    return hindsight_block("final_action", trajectory, 0, HCAPO_WORDING)


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
        clipped: whether rho is clipped to `HCAPO.clip`.
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


def check_credit_options(
    variant: str,
    temperature: float,
    clip: tuple[float, float],
    gamma: float,
    smoothing_alpha: float | None,
    micro_normalisation: str,
    causal_contrast: bool,
) -> None:
    """ValueError naming the option, unless HCAPO's credit options (those of the same
    names of `HCAPO`, also taken by the verl estimator) are in range."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    if micro_normalisation not in ("group", "time_step"):
        raise ValueError(
            f"micro_normalisation must be 'group' or 'time_step', got {micro_normalisation!r}"
        )
    if temperature <= 0 or clip[0] > clip[1]:
        raise ValueError(f"need temperature > 0 and clip low <= high, got {temperature}, {clip}")
    if smoothing_alpha is not None and not 0.0 <= smoothing_alpha <= 1.0:
        raise ValueError(f"smoothing_alpha must be in [0, 1], got {smoothing_alpha}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if causal_contrast and variant != "paper":
        raise ValueError(
            "causal_contrast applies to the paper variant (the seed's ratio is one already)"
        )


class HCAPO(HindsightScorer):
    """Hindsight credit (HCAPO, arXiv 2603.08754); see the module docstring for the math.

    Args:
        model: the policy that generated the trajectories (`LoadedModel`).
        variant: "paper" (default) or "seed" (see module docstring).
        temperature: T_temp of the hindsight score (5.0, the paper).
        clip: bounds of rho (0.8, 1.2 in the paper; the seed variant clips its log ratio
            instead and ignores this).
        gamma: discount (0.95).
        smoothing_alpha: alpha of the optional Q smoothing; None (default) disables it,
            as the paper's main results do not depend on it.
        micro_normalisation: "group" (default, the algorithm) or "time_step" (Eq. 8 text).
        macro_weight: weight of A^GRPO (1.0; seed variant 0.6).
        omega: weight of the micro term (1.0, the paper's best ablation; seed 0.4).
        do_no_harm: zero negative micro terms in successful trajectories (True).
        hindsight: content of the hindsight block (`credit.hindsight.CONTENTS`;
            `final_action`).
        hindsight_position: where the block sits (`agents.prompts.HINDSIGHT_POSITIONS`;
            `before_instruction`).
        wording: verdict words of the block (`credit.hindsight.WORDINGS`; `hcapo`).
        future_steps: steps of realised future in a `future` block (8).
        max_observation_chars: characters kept of each observation in the block (400).
        length_normalisation: tokens |a_t| averages over: `response` (every generated
            token) or `action` (the command's tokens, `credit.views.action_span_mask`).
        causal_contrast: score log pi_hind - log pi_causal per token (paper variant only;
            False).
        history_len: steps of history in rebuilt prompts (2, as the rollout prompts).
        memory_budget_bytes: scoring chunk budget (`credit.scoring`).
        generation_cache_bytes: budget of `generation_cache` (`agents.generation_cache`),
            which a trainer hands to its rollout agent: prompts' keys and values and
            responses' hidden states kept from generation, so scoring runs only what
            generation did not; 0 disables it (scoring recomputes everything).
        score_memo: scores kept across calls (`credit.scoring.ScoreMemo`), shared by
            modules that score the same views with the same weights (an ablation over
            options that only post-process the scores); None keeps nothing.

    Metrics: `frac_reward_zero_std`, `mean_rho`, `frac_rho_clipped`, `num_hindsight_steps`.
    """

    name = "hcapo"
    # Step rewards: the seed variant's return-to-go (`variant="seed"`); the block's
    # verdict and the gate read the return (`credit.base.verdict`).
    reads = frozenset({"return", "step_rewards", "observations", "actions", "feedback"})
    # The options a user can set by name (`--credit-option key=value`), with their parsers.
    options: ClassVar[dict[str, OptionParser]] = {
        "variant": choice("paper", "seed"),
        "temperature": parse_float,
        "clip": parse_pair,
        "gamma": parse_float,
        "smoothing_alpha": parse_float,
        "micro_normalisation": choice("group", "time_step"),
        "macro_weight": parse_float,
        "omega": parse_float,
        "do_no_harm": parse_bool,
        "hindsight": choice(*CONTENTS),
        "hindsight_position": choice(*HINDSIGHT_POSITIONS),
        "wording": choice(*WORDINGS),
        "future_steps": parse_int,
        "length_normalisation": choice("response", "action"),
        "causal_contrast": parse_bool,
    }

    def __init__(
        self,
        model: LoadedModel,
        variant: Variant = "paper",
        temperature: float = 5.0,
        clip: tuple[float, float] = (0.8, 1.2),
        gamma: float = 0.95,
        smoothing_alpha: float | None = None,
        micro_normalisation: MicroNormalisation = "group",
        macro_weight: float = 1.0,
        omega: float = 1.0,
        do_no_harm: bool = True,
        hindsight: HindsightContent = "final_action",
        hindsight_position: str = "before_instruction",
        wording: str = "hcapo",
        future_steps: int = 8,
        max_observation_chars: int = 400,
        length_normalisation: LengthNormalisation = "response",
        causal_contrast: bool = False,
        history_len: int = 2,
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
        generation_cache_bytes: int = DEFAULT_GENERATION_CACHE_BYTES,
        score_memo: ScoreMemo | None = None,
    ) -> None:
        check_credit_options(
            variant, temperature, clip, gamma, smoothing_alpha, micro_normalisation, causal_contrast
        )
        if length_normalisation not in ("response", "action"):
            raise ValueError(
                f"length_normalisation must be 'response' or 'action', got {length_normalisation!r}"
            )
        self._init_scorer(
            model,
            HindsightBlock(
                hindsight,
                wording,
                hindsight_position,
                future_steps,
                max_observation_chars,
                history_len,
            ),
            memory_budget_bytes,
            generation_cache_bytes,
            score_memo,
        )
        self.variant = variant
        self.temperature = temperature
        self.clip = clip
        self.gamma = gamma
        self.smoothing_alpha = smoothing_alpha
        self.micro_normalisation = micro_normalisation
        self.macro_weight = macro_weight
        self.omega = omega
        self.do_no_harm = do_no_harm
        self.length_normalisation = length_normalisation
        self.causal_contrast = causal_contrast

    def view_logprobs(
        self,
        steps: Sequence[tuple[Trajectory, int]],
        hindsight_views: Sequence[TeacherForced],
        causal_views: Sequence[TeacherForced],
    ) -> list[np.ndarray]:
        """Per-token log-probs [A_t] of every hindsight view, then every causal view (of
        `steps`, in order): the policy's teacher-forced pass (`credit.scoring`). The exact
        source (`credit.exact_source`) reads them off the finite MDP instead."""
        del steps  # the views say everything the policy's pass needs
        try:
            return score_logprobs(
                self.model,
                [*hindsight_views, *causal_views],
                self.memory_budget_bytes,
                self.generation_cache,
                self.score_memo,
            )
        finally:  # this batch's prompts are used up; free them before the update
            if self.generation_cache is not None:
                self.generation_cache.clear()

    def hindsight_q(self, trajectories: Sequence[Trajectory]) -> tuple[list[np.ndarray], dict]:
        """Q^H per step ([T_i] float64 each), scoring only trajectories with a non-zero value."""
        variant = VARIANTS[self.variant]
        needs_causal = variant.needs_causal or self.causal_contrast
        values = [variant.values(traj, self.gamma) for traj in trajectories]
        tokenizer = self.model.tokenizer
        hindsight_views, causal_views, kept, steps = [], [], [], []
        for i, traj in enumerate(trajectories):
            if not np.any(values[i]):
                continue
            for t in range(traj.length):
                steps.append((traj, t))
                hindsight_views.append(self.hindsight_view_of(traj, t))
                if needs_causal:
                    causal_views.append(causal_view(tokenizer, traj, t, self.history_len))
                kept.append(
                    action_span_mask(tokenizer, traj, t)
                    if self.length_normalisation == "action"
                    else np.ones(len(hindsight_views[-1].action_ids), dtype=bool)
                )
        scores = self.view_logprobs(steps, hindsight_views, causal_views)
        count = len(hindsight_views)
        hindsight_scores = [s[m] for s, m in zip(scores[:count], kept, strict=True)]
        causal_scores = (
            [s[m] for s, m in zip(scores[count:], kept, strict=True)]
            if needs_causal
            else [np.zeros(0)] * count
        )
        if self.causal_contrast:
            hindsight_scores = [h - c for h, c in zip(hindsight_scores, causal_scores, strict=True)]
        rhos = [np.ones(traj.length) for traj in trajectories]
        scored_rhos = [np.ones(0)]
        cursor = 0
        for i, traj in enumerate(trajectories):
            if not np.any(values[i]):
                continue
            span = slice(cursor, cursor + traj.length)
            rho = variant.ratio(hindsight_scores[span], causal_scores[span], self.temperature)
            rhos[i] = np.clip(rho, *self.clip) if variant.clipped else rho
            scored_rhos.append(rhos[i])
            cursor += traj.length
        q_values = [
            smoothed(rho * value, self.smoothing_alpha)
            for rho, value in zip(rhos, values, strict=True)
        ]
        all_rhos = np.concatenate(scored_rhos)
        at_bounds = (all_rhos <= self.clip[0]) | (all_rhos >= self.clip[1])
        stats = {
            "mean_rho": float(all_rhos.mean()) if all_rhos.size else 1.0,
            "frac_rho_clipped": float(at_bounds.mean())
            if variant.clipped and all_rhos.size
            else 0.0,
            "num_hindsight_steps": float(len(hindsight_views)),
        }
        return q_values, stats

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        groups = group_members(trajectories)
        returns = np.array([traj.total_return for traj in trajectories], dtype=np.float64)
        macro, zero_std = group_normalised(returns, groups, "group")
        q_values, stats = self.hindsight_q(trajectories)
        step_advantages = combined_advantages(
            macro,
            micro_advantages(q_values, groups, self.micro_normalisation),
            np.array([verdict(traj) for traj in trajectories], dtype=bool),
            self.macro_weight,
            self.omega,
            self.do_no_harm,
        )
        return CreditOutput(
            step_advantages=step_advantages,
            token_advantages=broadcast_to_tokens(trajectories, step_advantages),
            metrics={"frac_reward_zero_std": zero_std, **stats},
        )


class HCAPOSeed(HCAPO):
    """HCAPO's seed variant (docs/methods.md): importance ratio, return-to-go, 0.6 / 0.4."""

    name = "hcapo_seed"

    def __init__(self, model: LoadedModel, **kwargs: Any) -> None:
        super().__init__(model, **{**SEED_DEFAULTS, **kwargs})
