"""creditgym credit modules as verl advantage estimators (verl 0.9.1).

verl calls an estimator registered with `verl.trainer.ppo.core_algos.register_adv_est`
as `fn(token_level_rewards=, response_mask=, index=, config=)` and takes back
`(advantages, returns)`, both [bs, L]. Importing this module registers

    creditgym_grpo        credit.grpo.GRPO, verl's convention (equals verl's `grpo`)
    creditgym_gigpo       credit.gigpo.GiGPO, verl-agent's convention
    creditgym_rule_based  credit.rule_based.RuleBased
    creditgym_hp_rlvr     HP-RLVR's reward-side weighting (`HPRLVREstimator`)

and `register` adds any other creditgym module instance under a name of your choice.
HCAPO (`creditgym_hcapo`) and the hindsight views both hindsight methods score in verl's
actor are in `integrations.verl_hindsight`.

The mapping from verl's batch to creditgym trajectories (`trajectories_from_batch`),
for verl's multi-turn layout of one row per rollout, whose response holds every turn:

    row i = [turn 0 tokens | env reply | turn 1 tokens | env reply | ... | padding]
    response_mask[i]        1 on the turns' tokens (the policy's), 0 on env replies
    token_level_rewards[i]  rewards at tokens; verl's reward manager puts the outcome
                            at the last response token
    index[i]                the rollout's group (verl's `uid`: one per prompt)

- the turns of row i, its steps t = 0..T_i-1, are the maximal runs of ones in
  `response_mask[i]`;
- step t's reward is the sum of `token_level_rewards[i]` from the start of turn t
  (from 0 for t = 0) to the start of turn t + 1 (to L for the last turn), so an outcome
  at the last token is the last step's reward and per-turn rewards placed at each
  turn's tokens stay with their turn; R_i is the row's summed reward, as verl's `grpo`;
- per-turn facts the tensors cannot hold come from the batch's non-tensor data, one
  object per row (as verl-agent carries `anchor_obs`): `turn_observations` (T_i strings,
  the observation each turn answered; GiGPO's anchor states), `turn_key_steps` (T_i
  bools, the env's key-step labels) and `success` (bool; rule-based credit);
- step t's advantage is placed on every token of turn t; returns equal advantages
  (no critic), as in verl's outcome estimators.

verl's own `compute_advantage` (`verl/trainer/ppo/ray_trainer.py`) passes the batch and
its non-tensor data to no estimator but `gdpo`, so an estimator that needs per-turn
fields (or, HP-RLVR, the divergences in the batch) is called from the trainer with
`compute_advantage` here, as verl-agent's trainer calls its GiGPO; GRPO needs none and
also runs from verl's own `algorithm.adv_estimator=creditgym_grpo`. The
registering import must happen in the process that runs the trainer (verl's
`TaskRunner` Ray actor): creditgym's `verl.plugins` entry point
(`integrations.verl_plugin`) makes `import verl` do it there, with no environment variable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, register_adv_est

from creditgym.agents.trajectory import Step, Trajectory
from creditgym.credit.base import CreditModule
from creditgym.credit.gigpo import GiGPO
from creditgym.credit.grpo import GRPO
from creditgym.credit.hp_rlvr import HPRLVROptions, token_credit, updated_baselines
from creditgym.credit.rule_based import RuleBased

ENV_ID = "verl"  # the `env_id` of trajectories rebuilt from a verl batch

Estimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Turn:
    """One policy turn of a row: response positions [start, end) hold its tokens where
    the mask is 1; its reward is summed over [reward_start, reward_end)."""

    start: int
    end: int
    reward_start: int
    reward_end: int


def turns_of(mask_row: np.ndarray) -> list[Turn]:
    """The turns of one row: maximal runs of ones in its response mask ([L] of 0 / 1)."""
    flags = np.concatenate([[0], (mask_row > 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(flags))
    starts, ends = edges[0::2], edges[1::2]
    reward_starts = [0, *starts[1:]]
    reward_ends = [*starts[1:], mask_row.shape[0]]
    return [
        Turn(int(s), int(e), int(rs), int(re))
        for s, e, rs, re in zip(starts, ends, reward_starts, reward_ends, strict=True)
    ]


def _per_turn(non_tensor_batch: Mapping[str, np.ndarray], key: str, row: int, turns: int) -> list:
    values = list(non_tensor_batch[key][row])
    if len(values) != turns:
        raise ValueError(
            f"row {row}: non_tensor_batch[{key!r}] has {len(values)} entries for "
            f"{turns} turns (runs of ones in response_mask)"
        )
    return values


def trajectories_from_batch(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    non_tensor_batch: Mapping[str, np.ndarray] | None = None,
) -> tuple[list[Trajectory], list[list[Turn]]]:
    """creditgym trajectories of a verl batch (the mapping in the module docstring).

    Args:
        token_level_rewards: [bs, L] float rewards per response token.
        response_mask: [bs, L] 0 / 1, 1 on policy tokens.
        index: [bs] group ids (verl's `uid`).
        non_tensor_batch: per-row objects; read: `turn_observations`, `turn_key_steps`,
            `success` (each optional here; the module that needs one checks for it).
    Returns:
        (one trajectory per row, its turns). Steps carry rewards, observations and
        key-step labels; no token ids (the advantages go back by turn, not by token).
    Raises:
        ValueError: a per-turn field whose length is not the row's number of turns, or
            a row with a non-zero reward and no policy token (no step could carry it).
    """
    fields = non_tensor_batch or {}
    rewards = token_level_rewards.detach().to(torch.float64).cpu().numpy()
    masks = response_mask.detach().cpu().numpy()
    trajectories, all_turns = [], []
    for row in range(rewards.shape[0]):
        turns = turns_of(masks[row])
        if not turns and np.any(rewards[row]):
            raise ValueError(f"row {row} has a reward but no policy token in response_mask")
        observations = (
            _per_turn(fields, "turn_observations", row, len(turns))
            if "turn_observations" in fields
            else [""] * len(turns)
        )
        key_steps = (
            _per_turn(fields, "turn_key_steps", row, len(turns))
            if "turn_key_steps" in fields
            else [False] * len(turns)
        )
        steps = tuple(
            Step(
                observation=str(observation),
                action="",
                reward=float(rewards[row, turn.reward_start : turn.reward_end].sum()),
                terminated=t == len(turns) - 1,
                info={"key_step": bool(key_step)},
            )
            for t, (turn, observation, key_step) in enumerate(
                zip(turns, observations, key_steps, strict=True)
            )
        )
        trajectories.append(
            Trajectory(
                env_id=ENV_ID,
                task_id=str(index[row]),
                seed=0,
                group_id=str(index[row]),
                task="",
                initial_observation=observations[0] if observations else "",
                steps=steps,
                success=bool(fields["success"][row]) if "success" in fields else False,
            )
        )
        all_turns.append(turns)
    return trajectories, all_turns


def place_by_turn(
    step_advantages: Sequence[np.ndarray], turns: Sequence[Sequence[Turn]], like: torch.Tensor
) -> torch.Tensor:
    """[bs, L] float32: step t's advantage on the masked tokens of turn t, 0 elsewhere."""
    advantages = torch.zeros(like.shape, dtype=torch.float32)
    for row, (values, row_turns) in enumerate(zip(step_advantages, turns, strict=True)):
        for value, turn in zip(values, row_turns, strict=True):
            advantages[row, turn.start : turn.end] = float(value)
    return (advantages * (like.detach().cpu() > 0)).to(like.device)


def make_estimator(module: CreditModule, needs: Sequence[str] = ()) -> Estimator:
    """A verl advantage estimator running `module` on the batch's trajectories.

    Args:
        module: a creditgym credit module whose advantages are per step (every module
            that broadcasts a step's value to its tokens).
        needs: the non-tensor fields it cannot do without (`trajectories_from_batch`).
    """

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray,
        config: Any = None,
        non_tensor_batch: Mapping[str, np.ndarray] | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        del config, kwargs  # the module carries its own settings
        missing = [key for key in needs if key not in (non_tensor_batch or {})]
        if missing:
            raise ValueError(
                f"credit module {module.name} needs non_tensor_batch fields "
                f"{', '.join(missing)}; verl's compute_advantage passes none, call "
                "integrations.verl_credit.compute_advantage from the trainer"
            )
        trajectories, turns = trajectories_from_batch(
            token_level_rewards, response_mask, index, non_tensor_batch
        )
        output = module(trajectories)
        advantages = place_by_turn(output.step_advantages, turns, response_mask)
        return advantages, advantages

    estimator.__name__ = f"creditgym_{module.name}"
    return estimator


def register(name: str, module: CreditModule, needs: Sequence[str] = ()) -> None:
    """Register `module` as verl advantage estimator `name` (`make_estimator`)."""
    register_adv_est(name)(make_estimator(module, needs))


class HPRLVREstimator:
    """HP-RLVR's token credit A_j = (R - b) w_j from divergences that come with the batch.

    Chen et al. 2026, "Hindsight-Privileged RLVR" (`credit.hp_rlvr`, whose functions this
    calls). The divergences d_j need two teacher-forced passes of the policy per turn
    (causal and hindsight views), which only verl's actor worker can run; the hindsight
    views come from `integrations.verl_hindsight.hindsight_batch` (`HP_RLVR_BLOCK`) and
    `causal_batch`, the worker computes d_j from both views' full next-token
    distributions (`integrations.verl_hindsight.view_divergences`) and
    `attach_view_values` writes them to `batch["hindsight_divergence"]` ([bs, L], d_j in
    [0, 1] on the response tokens); this estimator does the rest: R from the row's rewards, the
    baseline b (an EMA of R per task, the task read from `non_tensor_batch["task_id"]`
    when the batch has it, else the group `index`), the weights w_j per trajectory and
    the baseline update after the credit, as `credit.hp_rlvr.HPRLVR` does.

    The baselines are state, kept across calls by design: HP-RLVR has one rollout per
    prompt and no group, so the reward is weighed against a *historical* baseline (the
    paper's abstract), the returns of earlier batches. The instance registered as
    `creditgym_hp_rlvr` therefore carries them from call to call for as long as its
    process lives (verl's `TaskRunner`), also across trainers built in that process.
    `reset()` starts them over; an instance of your own, registered under another name
    (`register_adv_est(name)(HPRLVREstimator(...))`), keeps its own. A verl checkpoint
    does not save them, so a resumed run starts them over.

    Args:
        options: `credit.hp_rlvr.HPRLVROptions`, the options `credit.hp_rlvr.HPRLVR` takes
            (this estimator reads baseline_momentum, initial_baseline, normalise_weights
            and max_weight; the block's options choose the views,
            `hindsight_batch(batch, tokenizer, options.block())`); None: the defaults.
    Raises:
        ValueError: `eligible_tokens="action"` (the command's tokens need the tokenizer's
            decoding, which the estimator does not have), or `weights="uniform"`.
    """

    def __init__(self, options: HPRLVROptions | None = None) -> None:
        self.options = HPRLVROptions() if options is None else options
        if self.options.eligible_tokens != "response":
            raise ValueError(
                "the verl estimator credits every response token (eligible_tokens=response), "
                f"got eligible_tokens={self.options.eligible_tokens}"
            )
        if self.options.weights != "divergence":
            raise ValueError(
                "the verl estimator weights tokens by the divergences its worker computes "
                f"(weights=divergence), got weights={self.options.weights}; the uniform "
                "control runs in creditgym's own trainer (creditgym run)"
            )
        self.reset()

    def reset(self) -> None:
        """Forget every batch seen: the global baseline back to `initial_baseline`, no task
        baseline (as a new instance; `credit.hp_rlvr.HPRLVR` before its first batch)."""
        self.global_baseline = float(self.options.initial_baseline)
        self.task_baselines: dict[str, float] = {}

    def __call__(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray,
        config: Any = None,
        non_tensor_batch: Mapping[str, np.ndarray] | None = None,
        batch: Mapping[str, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        del config, kwargs
        if batch is None or "hindsight_divergence" not in batch:
            raise ValueError(
                "credit module hp_rlvr needs batch['hindsight_divergence'] (the actor's "
                "causal-vs-hindsight divergences); verl's compute_advantage passes none, "
                "call integrations.verl_credit.compute_advantage from the trainer"
            )
        fields = non_tensor_batch or {}
        trajectories, turns = trajectories_from_batch(
            token_level_rewards, response_mask, index, non_tensor_batch
        )
        task_keys = [str(key) for key in fields.get("task_id", index)]
        divergence = batch["hindsight_divergence"].detach().to(torch.float64).cpu().numpy()
        advantages = torch.zeros(response_mask.shape, dtype=torch.float32)
        for row, (trajectory, row_turns) in enumerate(zip(trajectories, turns, strict=True)):
            baseline = self.task_baselines.get(task_keys[row], self.global_baseline)
            credit = token_credit(
                [divergence[row, turn.start : turn.end] for turn in row_turns],
                trajectory.total_return,
                baseline,
                self.options.normalise_weights,
                self.options.max_weight,
            )
            for values, turn in zip(credit, row_turns, strict=True):
                advantages[row, turn.start : turn.end] = torch.from_numpy(values)
        self.task_baselines, self.global_baseline = updated_baselines(
            self.task_baselines,
            self.global_baseline,
            task_keys,
            np.array([t.total_return for t in trajectories], dtype=np.float64),
            self.options.baseline_momentum,
        )
        advantages = advantages.to(response_mask.device)
        return advantages, advantages


def compute_advantage(data: DataProto, name: str, config: Any = None) -> DataProto:
    """Fill `data.batch["advantages"]` and `["returns"]` with estimator `name`, passing
    the batch's tensors and non-tensor data (what verl's own `compute_advantage` does not).

    Args:
        data: verl's batch with `token_level_rewards`, `response_mask` and
            `non_tensor_batch["uid"]`.
        name: a registered estimator (`creditgym_gigpo`, ...).
        config: verl's `algorithm` config, passed on.
    """
    estimator = get_adv_estimator_fn(name)
    advantages, returns = estimator(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=config,
        non_tensor_batch=data.non_tensor_batch,
        batch=data.batch,
    )
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data


register("creditgym_grpo", GRPO(convention="verl"))
register("creditgym_gigpo", GiGPO(convention="verl-agent"), needs=("turn_observations",))
register("creditgym_rule_based", RuleBased(), needs=("turn_key_steps", "success"))
register_adv_est("creditgym_hp_rlvr")(HPRLVREstimator())
