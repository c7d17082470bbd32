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
creditgym scores the raw softmax (`models.scoring`), not the sampling distribution.

`creditgym_hcapo` (`HCAPOEstimator`) reads `batch["hindsight_log_probs"]` ([bs, L], the
hindsight log-prob of every response token at its turn's positions) and, for the seed
variant or the causal contrast, verl's behaviour log-probs `batch["old_log_probs"]` as
the causal view (the turn as the policy saw it); both must be at temperature 1 to equal
what `credit.hcapo.HCAPO` computes.

HP-RLVR's divergences need both views' full next-token distributions, which verl's
`compute_log_prob` does not return (the sampled token's log-prob only), so this module
has that pass too: `view_divergences` (`divergence_output` for a worker method's reply)
runs the policy on the turns as it saw them (`causal_batch`) and on their hindsight views
(`hindsight_batch(..., HP_RLVR_BLOCK)`) and reduces each response token's two
distributions with `models.scoring.jensen_shannon`, as `credit.hp_rlvr.HPRLVR` does:

    views = hindsight_batch(batch, tokenizer, HP_RLVR_BLOCK)
    causal = causal_batch(batch, tokenizer.pad_token_id)
    scored = actor_rollout_wg.compute_hindsight_divergence(causal, views)  # worker method
    attach_view_values(batch, views, scored.batch["hindsight_divergence"],
                       "hindsight_divergence")
    compute_advantage(batch, "creditgym_hp_rlvr")

The worker method (docs/integrations.md) calls `divergence_output` on the actor's model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase
from verl import DataProto
from verl.trainer.ppo.core_algos import register_adv_est

from creditgym.agents.trajectory import Trajectory

# The default blocks are re-exported: a verl user names them next to `hindsight_batch`
# (`HCAPOOptions(...).block()` / `HPRLVROptions(...).block()` for other options).
from creditgym.credit.hcapo import HCAPO_BLOCK as HCAPO_BLOCK
from creditgym.credit.hcapo import (
    HCAPOOptions,
    hcapo_advantages,
    needs_causal,
    needs_scores,
    trajectory_q,
)
from creditgym.credit.hindsight import HindsightBlock
from creditgym.credit.hp_rlvr import HP_RLVR_BLOCK as HP_RLVR_BLOCK
from creditgym.integrations.verl_credit import (
    Turn,
    place_by_turn,
    trajectories_from_batch,
    turns_of,
)
from creditgym.models.scoring import TeacherForced, jensen_shannon

TEXT_FIELDS = ("env_id", "task", "feedback", "success")
TURN_TEXT_FIELDS = ("turn_observations", "turn_actions", "turn_admissible_commands")


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
    return _view_batch(views, rows, starts, tokenizer.pad_token_id)


def causal_batch(data: DataProto, pad_token_id: int) -> DataProto:
    """Every turn of `data` as verl's policy saw it, in the rows of `hindsight_batch`.

    Turn t of row i: the context is the row's prompt and its response before the turn
    (earlier turns and env replies, the tokens under `attention_mask`), the response the
    turn's own tokens; so view row k pairs with `hindsight_batch`'s row k
    (`view_divergences`). This is verl's causal view, the whole conversation so far,
    not creditgym's rebuilt step prompt (`credit.views.causal_view`, the last K steps).

    Args:
        data: verl's rollout batch: `prompts` [bs, P] (left-padded), `responses`,
            `response_mask` [bs, L], `attention_mask` [bs, P + L].
        pad_token_id: the tokenizer's.
    Returns:
        as `hindsight_batch`.
    """
    prompts, responses = data.batch["prompts"].cpu(), data.batch["responses"].cpu()
    attended = data.batch["attention_mask"].cpu() > 0
    prompt_width = prompts.shape[1]
    views, rows, starts = [], [], []
    for row, mask_row in enumerate(data.batch["response_mask"].cpu().numpy()):
        prompt = prompts[row][attended[row, :prompt_width]].tolist()
        response = responses[row]
        for turn in turns_of(mask_row):
            before = response[: turn.start][attended[row, prompt_width : prompt_width + turn.start]]
            views.append(
                TeacherForced(
                    tuple(prompt + before.tolist()),
                    tuple(response[turn.start : turn.end].tolist()),
                )
            )
            rows.append(row)
            starts.append(turn.start)
    return _view_batch(views, rows, starts, pad_token_id)


def _view_batch(
    views: Sequence[TeacherForced], rows: Sequence[int], starts: Sequence[int], pad_token_id: int
) -> DataProto:
    """Views as verl's generation batch (`pack_views`), each with its turn's row and start."""
    if not views:
        raise ValueError("the batch has no policy turn (response_mask is all 0)")
    tensors = pack_views(views, pad_token_id)
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


# View rows per forward of `view_divergences`. A fixed row count, not a token budget: under
# FSDP every rank must run the same number of forwards (each gathers the sharded
# weights), and verl hands every rank the same number of rows.
DIVERGENCE_CHUNK_ROWS = 8
# Response positions whose float32 distributions are reduced at once: bounds the
# [positions, V] buffers of the JS reduction (about 6 of them) whatever the chunk holds.
DIVERGENCE_REDUCE_POSITIONS = 512


def _response_logits(
    model: nn.Module, views: DataProto, rows: slice, response_width: int
) -> torch.Tensor:
    """[B, response_width, V] logits (model dtype) predicting each response token of
    `views[rows]`: one teacher-forced forward over the chunk's columns that are not all
    padding, projected at the response positions only (`logits_to_keep`)."""
    device = next(model.parameters()).device
    full_prompt = views.batch["prompts"].shape[1]
    prompt_width = int(views.batch["attention_mask"][rows, :full_prompt].sum(-1).max())
    columns = slice(full_prompt - prompt_width, full_prompt + response_width)
    output = model(
        input_ids=views.batch["input_ids"][rows, columns].to(device),
        attention_mask=views.batch["attention_mask"][rows, columns].to(device),
        position_ids=views.batch["position_ids"][rows, columns].to(device),
        # The logit at column P - 1 + j predicts response token j: keep R + 1, drop the last.
        logits_to_keep=response_width + 1,
        use_cache=False,
    )
    return output.logits[:, :response_width]


def view_divergences(
    model: nn.Module,
    causal: DataProto,
    hindsight: DataProto,
    chunk_rows: int = DIVERGENCE_CHUNK_ROWS,
) -> torch.Tensor:
    """HP-RLVR's d_j at every response token of the view rows, from the full vocabulary.

    Chen et al. 2026, "Hindsight-Privileged RLVR" (`credit.hp_rlvr`): d_j =
    JS(p_causal_j || p_hind_j) / ln 2, the divergence of the policy's next-token
    distributions (raw softmax, temperature 1, as `models.scoring`) under the turn's
    causal prompt and under its hindsight prompt, reduced with `models.scoring.
    jensen_shannon`, the function `credit.hp_rlvr.HPRLVR` uses. This is the pass verl's
    `compute_log_prob` cannot stand in for: it returns the sampled token's log-prob only.

    Runs under `torch.no_grad` with the model in eval mode (its mode restored after), in
    chunks of `chunk_rows` rows; per chunk, one forward per view over the columns some
    row uses, logits projected at the response positions only, so memory peaks near
    chunk_rows x (R + 1) x V logits per view plus the model's activations.

    Args:
        model: the policy, a Hugging Face causal LM (what verl's FSDP actor wraps; an FSDP
            or peft wrapper forwards the keyword arguments); any device.
        causal: the turns as the policy saw them (`causal_batch`, or any K rows in
            `pack_views`' layout, such as creditgym's own causal views).
        hindsight: the same turns with the hindsight block (`hindsight_batch(...,
            HP_RLVR_BLOCK)`), row k the same turn as `causal`'s row k.
        chunk_rows: view rows per forward (`DIVERGENCE_CHUNK_ROWS`).
    Returns:
        [K, R] float32 on the CPU, d_j in [0, 1] where `response_mask` is 1, 0 elsewhere;
        `attach_view_values(data, hindsight, values, "hindsight_divergence")` puts them
        on the turns for `creditgym_hp_rlvr`.
    Raises:
        ValueError: the two batches do not hold the same response tokens row for row.
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    mask = hindsight.batch["response_mask"] > 0
    if causal.batch["response_mask"].shape != mask.shape or not torch.equal(
        causal.batch["response_mask"] > 0, mask
    ):
        raise ValueError("causal and hindsight views have different response masks")
    if not torch.equal(causal.batch["responses"][mask], hindsight.batch["responses"][mask]):
        raise ValueError("causal and hindsight views score different response tokens")
    response_lengths = mask.sum(-1)
    divergences = torch.zeros(mask.shape, dtype=torch.float32)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, mask.shape[0], chunk_rows):
                rows = slice(start, start + chunk_rows)
                response_width = max(int(response_lengths[rows].max()), 1)
                chunk_mask = mask[rows, :response_width]
                causal_logits, hindsight_logits = (
                    _response_logits(model, views, rows, response_width)[
                        chunk_mask.to(next(model.parameters()).device)
                    ]
                    for views in (causal, hindsight)
                )
                values = torch.cat(
                    [
                        jensen_shannon(
                            torch.log_softmax(p.float(), dim=-1),
                            torch.log_softmax(q.float(), dim=-1),
                        ).cpu()
                        for p, q in zip(
                            causal_logits.split(DIVERGENCE_REDUCE_POSITIONS),
                            hindsight_logits.split(DIVERGENCE_REDUCE_POSITIONS),
                            strict=True,
                        )
                    ]
                    + [torch.zeros(0)]
                )
                divergences[rows, :response_width][chunk_mask] = values
    finally:
        model.train(was_training)
    return divergences


def divergence_output(
    model: nn.Module,
    causal: DataProto,
    hindsight: DataProto,
    chunk_rows: int = DIVERGENCE_CHUNK_ROWS,
) -> DataProto:
    """`view_divergences` as the DataProto a verl worker method returns (its rows are
    gathered across data-parallel ranks): `batch["hindsight_divergence"]` [K, R]."""
    values = view_divergences(model, causal, hindsight, chunk_rows)
    return DataProto.from_dict(tensors={"hindsight_divergence": values})


class HCAPOEstimator:
    """HCAPO's token advantages from hindsight log-probs that come with the batch.

    Tan et al. 2026, arXiv 2603.08754 (`credit.hcapo`, whose pure functions this calls:
    `trajectory_q` for rho -> Q -> smoothing, `hcapo_advantages` for macro + micro with
    do-no-harm on the verdict read off the reward, `credit.base.verdict`). Per turn t of
    row i: the hindsight score from `batch["hindsight_log_probs"]` at the turn's positions,
    and A_t on every token of turn t; returns equal advantages.

    The seed variant and `causal_contrast` also read `batch["old_log_probs"]` as the
    causal view. The score averages over every response token of the turn
    (`length_normalisation="response"`; the command-only choice needs the tokenizer's
    decoding and is refused here). The hindsight block's options (`hindsight`, `wording`,
    ...) choose the views: `hindsight_batch(batch, tokenizer, options.block())`.

    Args:
        options: `credit.hcapo.HCAPOOptions` (`HCAPOSeedOptions` for the seed variant),
            the options `credit.hcapo.HCAPO` takes; None: the defaults.
    Raises:
        ValueError: `length_normalisation="action"`.
    """

    def __init__(self, options: HCAPOOptions | None = None) -> None:
        self.options = HCAPOOptions() if options is None else options
        if self.options.length_normalisation != "response":
            raise ValueError(
                "the verl estimator scores every response token (length_normalisation="
                f"response), got length_normalisation={self.options.length_normalisation}"
            )
        self.needs = ("hindsight_log_probs",) + (
            ("old_log_probs",) if needs_causal(self.options) else ()
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
            else [None] * len(turns)
        )
        q_values = [
            trajectory_q(
                trajectory, h if needs_scores(trajectory, self.options) else None, c, self.options
            )[0]
            for trajectory, h, c in zip(trajectories, hindsight, causal, strict=True)
        ]
        step_advantages, _ = hcapo_advantages(trajectories, q_values, self.options)
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
