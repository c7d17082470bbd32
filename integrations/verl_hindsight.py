"""Hindsight credit in verl: the actor-side view pass and HCAPO's advantage estimator.

HCAPO (Tan et al. 2026, arXiv 2603.08754) and HP-RLVR (Chen et al. 2026) teacher-force
the current policy on each turn's response under a prompt that shows the outcome (the
hindsight block, `credit.hindsight`). verl's estimator signature gets tensors of the
rollout only, so the extra pass runs where verl's policy lives, the actor worker, and
the trainer adds one step before `compute_advantage`:

    views = hindsight_batch(batch, tokenizer, HCAPO_BLOCK)     # DataProto, one row per turn
    scored = trainer._compute_old_log_prob(views)[0]           # verl's compute_log_prob pass
    attach_view_values(batch, views, scored.batch["old_log_probs"], "hindsight_log_probs")
    compute_advantage(batch, "creditgym_hcapo")                # integrations.verl_credit

`hindsight_batch` rebuilds each turn's creditgym step from the batch's non-tensor data
and renders its hindsight prompt with creditgym's own builders
(`credit.hindsight.hindsight_block`, `credit.views.hindsight_view`), so the token ids are
those `credit.hcapo.HCAPO` (or `credit.hp_rlvr.HPRLVR`, with `HP_RLVR_BLOCK`) scores; the
response of view row k is the turn's own response tokens. Fields read, one object per row
of the rollout batch (as verl-agent carries `anchor_obs`):

    env_id, task, feedback, success          the episode (prompt intro, hindsight verdict)
    turn_observations[i][t]                  what turn t answered
    turn_actions[i][t]                       the command the env executed at turn t
    turn_admissible_commands[i][t]           the commands offered at turn t (may be empty)

Views are laid out as verl lays out a generation batch: prompts left-padded, responses
right-padded, `input_ids` = [prompt | response], `position_ids` counting real tokens from
0, `response_mask` 1 on the turn's tokens, and `meta_info["temperature"] = 1.0` because
creditgym scores the raw softmax (`credit.scoring`), not the sampling distribution.

`creditgym_hcapo` (`HCAPOEstimator`) reads `batch["hindsight_log_probs"]` ([bs, L], the
hindsight log-prob of every response token at its turn's positions) and, for the seed
variant or the causal contrast, verl's behaviour log-probs `batch["old_log_probs"]` as
the causal view (the turn as the policy saw it); both must be at temperature 1 to equal
what `credit.hcapo.HCAPO` computes. HP-RLVR's divergences need both views' full
next-token distributions, which verl's `compute_log_prob` does not return: the view rows
come from `hindsight_batch(..., HP_RLVR_BLOCK)` and the per-token divergences go back with
`attach_view_values(..., "hindsight_divergence")` for `creditgym_hp_rlvr`, but the pass
that computes them is the user's own worker method.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase
from verl import DataProto
from verl.trainer.ppo.core_algos import register_adv_est

from agents.trajectory import Trajectory
from credit.grpo import group_members, group_normalised
from credit.hcapo import VARIANTS, combined_advantages, micro_advantages, smoothed
from credit.hindsight import WORDINGS, hindsight_block
from credit.views import TeacherForced, hindsight_view
from integrations.verl_credit import Turn, place_by_turn, trajectories_from_batch

TEXT_FIELDS = ("env_id", "task", "feedback", "success")
TURN_TEXT_FIELDS = ("turn_observations", "turn_actions", "turn_admissible_commands")


@dataclass(frozen=True)
class HindsightBlock:
    """Which hindsight prompt a method scores (the options of `credit.hcapo.HCAPO` and
    `credit.hp_rlvr.HPRLVR` of the same names; `credit.hindsight`)."""

    content: str
    wording: str
    position: str = "before_instruction"
    future_steps: int = 8
    max_observation_chars: int = 400
    history_len: int = 2

    def view(
        self, tokenizer: PreTrainedTokenizerBase, trajectory: Trajectory, t: int
    ) -> TeacherForced:
        """Step t's hindsight view: its prompt with the block, then its action ids."""
        text = hindsight_block(
            self.content,
            trajectory,
            t,
            WORDINGS[self.wording],
            self.future_steps,
            self.max_observation_chars,
        )
        return hindsight_view(tokenizer, trajectory, t, text, self.history_len, self.position)


HCAPO_BLOCK = HindsightBlock("final_action", "hcapo")  # HCAPO's defaults
HP_RLVR_BLOCK = HindsightBlock("future", "hp_rlvr")  # HP-RLVR's defaults


def text_trajectories(data: DataProto) -> tuple[list[Trajectory], list[list[Turn]]]:
    """The batch's rollouts as creditgym trajectories with the text prompts need.

    `trajectories_from_batch` (rewards, observations, success), plus each step's action,
    admissible commands and generated ids (`responses` at the turn's positions), and the
    episode's env id, task and feedback (the fields in the module docstring).

    Raises:
        ValueError: a field missing, or a per-turn field whose length is not the row's
            number of turns.
    """
    fields = data.non_tensor_batch
    missing = [key for key in (*TEXT_FIELDS, *TURN_TEXT_FIELDS) if key not in fields]
    if missing:
        raise ValueError(f"hindsight views need non_tensor_batch fields {', '.join(missing)}")
    response_mask = data.batch["response_mask"]
    rewards = data.batch.get("token_level_rewards", torch.zeros(response_mask.shape))
    trajectories, turns = trajectories_from_batch(rewards, response_mask, fields["uid"], fields)
    responses = data.batch["responses"].cpu().numpy()
    rebuilt = []
    for row, (trajectory, row_turns) in enumerate(zip(trajectories, turns, strict=True)):
        actions = list(fields["turn_actions"][row])
        commands = list(fields["turn_admissible_commands"][row])
        if not len(actions) == len(commands) == len(row_turns):
            raise ValueError(
                f"row {row}: {len(actions)} turn_actions and {len(commands)} "
                f"turn_admissible_commands for {len(row_turns)} turns"
            )
        # The views need the generated ids only; the behaviour log-probs stay verl's
        # (`old_log_probs`), so the steps' are NaN: unknown here, never a number.
        steps = tuple(
            replace(
                step,
                action=str(action),
                admissible_commands=tuple(str(c) for c in offered),
                action_token_ids=tuple(int(i) for i in responses[row, turn.start : turn.end]),
                action_logprobs=(float("nan"),) * (turn.end - turn.start),
            )
            for step, turn, action, offered in zip(
                trajectory.steps, row_turns, actions, commands, strict=True
            )
        )
        rebuilt.append(
            replace(
                trajectory,
                env_id=str(fields["env_id"][row]),
                task=str(fields["task"][row]),
                feedback=str(fields["feedback"][row]),
                steps=steps,
            )
        )
    return rebuilt, turns


def pack_views(views: Sequence[TeacherForced], pad_token_id: int) -> dict[str, torch.Tensor]:
    """verl's generation-batch tensors for teacher-forced views (module docstring).

    Returns:
        prompts [K, P] and responses [K, R] (long, padded with `pad_token_id`),
        input_ids / attention_mask / position_ids [K, P + R], response_mask [K, R];
        P, R the longest context and action.
    """
    prompt_width = max(len(v.context_ids) for v in views)
    response_width = max(max(len(v.action_ids) for v in views), 1)
    prompts = torch.full((len(views), prompt_width), pad_token_id, dtype=torch.long)
    responses = torch.full((len(views), response_width), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros(prompts.shape, dtype=torch.long)
    response_mask = torch.zeros(responses.shape, dtype=torch.long)
    for k, view in enumerate(views):
        if view.context_ids:
            prompts[k, prompt_width - len(view.context_ids) :] = torch.tensor(view.context_ids)
            prompt_mask[k, prompt_width - len(view.context_ids) :] = 1
        if view.action_ids:
            responses[k, : len(view.action_ids)] = torch.tensor(view.action_ids)
            response_mask[k, : len(view.action_ids)] = 1
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": response_mask,
    }


def hindsight_batch(
    data: DataProto, tokenizer: PreTrainedTokenizerBase, block: HindsightBlock
) -> DataProto:
    """The hindsight views of every turn of `data`, as a batch verl's actor can score.

    Args:
        data: verl's rollout batch: `responses`, `response_mask` [bs, L], `uid` and the
            text fields of the module docstring.
        tokenizer: the policy's tokenizer (its chat template renders the prompts).
        block: the method's hindsight prompt (`HCAPO_BLOCK`, `HP_RLVR_BLOCK`).
    Returns:
        one row per turn (`pack_views`), with `non_tensor_batch["source_row"]` and
        `["source_start"]` (the turn's row and first position in `data`),
        `meta_info["temperature"] = 1.0` and `["global_token_num"]`. Every turn is
        scored, also those of rollouts whose HCAPO values are all 0 (their credit does
        not depend on the score; verl may compute rewards after this pass).
    """
    trajectories, turns = text_trajectories(data)
    views, rows, starts = [], [], []
    for row, (trajectory, row_turns) in enumerate(zip(trajectories, turns, strict=True)):
        for t, turn in enumerate(row_turns):
            views.append(block.view(tokenizer, trajectory, t))
            rows.append(row)
            starts.append(turn.start)
    if not views:
        raise ValueError("the batch has no policy turn (response_mask is all 0)")
    tensors = pack_views(views, tokenizer.pad_token_id)
    return DataProto.from_dict(
        tensors=tensors,
        non_tensors={
            "source_row": np.array(rows, dtype=np.int64),
            "source_start": np.array(starts, dtype=np.int64),
        },
        # verl's trainer sets global_token_num before its log-prob pass (its MFU metric
        # reads it), so the view batch carries it the same way.
        meta_info={
            "temperature": 1.0,
            "global_token_num": tensors["attention_mask"].sum(-1).tolist(),
        },
    )


def attach_view_values(
    data: DataProto, views: DataProto, values: torch.Tensor, key: str
) -> DataProto:
    """Put per-token values of the view rows back on their turns: `data.batch[key]`.

    Args:
        data: the rollout batch the views came from (`hindsight_batch`).
        views: those views.
        values: [K, R] one value per view response token (verl's `old_log_probs` of the
            view pass, or per-token divergences).
        key: where they go, [bs, L] float32, 0 off the turns.
    """
    placed = torch.zeros(data.batch["response_mask"].shape, dtype=torch.float32)
    lengths = views.batch["response_mask"].sum(-1).tolist()
    rows, starts = views.non_tensor_batch["source_row"], views.non_tensor_batch["source_start"]
    for k, (row, start, length) in enumerate(zip(rows, starts, lengths, strict=True)):
        placed[row, start : start + length] = values[k, :length].detach().float().cpu()
    data.batch[key] = placed.to(data.batch["response_mask"].device)
    return data


class HCAPOEstimator:
    """HCAPO's token advantages from hindsight log-probs that come with the batch.

    Tan et al. 2026, arXiv 2603.08754 (`credit.hcapo`, whose functions this calls; its
    module docstring has the math). Per turn t of row i: the hindsight score from
    `batch["hindsight_log_probs"]` at the turn's positions, rho_t, Q^H_t = rho_t
    gamma^(T-t) R_i, the micro term normalised within the group (`index`), do-no-harm on
    successes (`non_tensor_batch["success"]`), and A_t = macro_weight A^GRPO_i +
    omega A^Micro_t on every token of turn t; returns equal advantages.

    The seed variant and `causal_contrast` also read `batch["old_log_probs"]` as the
    causal view. The score averages over every response token of the turn (HCAPO's
    `length_normalisation="response"`; the command-only choice needs the tokenizer's
    decoding and is not offered here).

    Args: as `credit.hcapo.HCAPO` (variant, temperature, clip, gamma, smoothing_alpha,
        micro_normalisation, macro_weight, omega, do_no_harm, causal_contrast).
    """

    def __init__(
        self,
        variant: str = "paper",
        temperature: float = 5.0,
        clip: tuple[float, float] = (0.8, 1.2),
        gamma: float = 0.95,
        smoothing_alpha: float | None = None,
        micro_normalisation: str = "group",
        macro_weight: float = 1.0,
        omega: float = 1.0,
        do_no_harm: bool = True,
        causal_contrast: bool = False,
    ) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        self.variant = VARIANTS[variant]
        self.temperature = temperature
        self.clip = clip
        self.gamma = gamma
        self.smoothing_alpha = smoothing_alpha
        self.micro_normalisation = micro_normalisation
        self.macro_weight = macro_weight
        self.omega = omega
        self.do_no_harm = do_no_harm
        self.causal_contrast = causal_contrast
        self.needs = ("hindsight_log_probs",) + (
            ("old_log_probs",) if self.variant.needs_causal or causal_contrast else ()
        )

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
        del config, kwargs  # the estimator carries its own settings
        missing = [key for key in self.needs if batch is None or key not in batch]
        if non_tensor_batch is None or "success" not in non_tensor_batch:
            missing.append("non_tensor_batch['success']")
        if missing:
            raise ValueError(
                f"credit module hcapo needs {', '.join(missing)} (hindsight_batch, then "
                "attach_view_values); verl's compute_advantage passes none, call "
                "integrations.verl_credit.compute_advantage from the trainer"
            )
        trajectories, turns = trajectories_from_batch(
            token_level_rewards, response_mask, index, non_tensor_batch
        )
        hindsight = self._per_turn(batch["hindsight_log_probs"], turns)
        causal = (
            self._per_turn(batch["old_log_probs"], turns)
            if "old_log_probs" in self.needs
            else [[np.zeros(0)] * len(row) for row in turns]
        )
        q_values = []
        for trajectory, h, c in zip(trajectories, hindsight, causal, strict=True):
            values = self.variant.values(trajectory, self.gamma)
            rho = np.ones(trajectory.length)
            if np.any(values):  # as HCAPO: Q is 0 whatever rho is
                scores = [a - b for a, b in zip(h, c, strict=True)] if self.causal_contrast else h
                rho = self.variant.ratio(scores, c, self.temperature)
                rho = np.clip(rho, *self.clip) if self.variant.clipped else rho
            q_values.append(smoothed(rho * values, self.smoothing_alpha))
        groups = group_members(trajectories)
        returns = np.array([t.total_return for t in trajectories], dtype=np.float64)
        macro, _ = group_normalised(returns, groups, "group")
        step_advantages = combined_advantages(
            macro,
            micro_advantages(q_values, groups, self.micro_normalisation),
            np.array([t.success for t in trajectories], dtype=bool),
            self.macro_weight,
            self.omega,
            self.do_no_harm,
        )
        advantages = place_by_turn(step_advantages, turns, response_mask)
        return advantages, advantages

    @staticmethod
    def _per_turn(values: torch.Tensor, turns: Sequence[Sequence[Turn]]) -> list[list[np.ndarray]]:
        """Per row, per turn, the float64 values at the turn's positions."""
        array = values.detach().to(torch.float64).cpu().numpy()
        return [
            [array[row, t.start : t.end] for t in row_turns] for row, row_turns in enumerate(turns)
        ]


register_adv_est("creditgym_hcapo")(HCAPOEstimator())
