"""Credit-filtered supervised fine-tuning (docs/methods.md, "Credit-filtered SFT").

Each round:

1. Roll out `num_tasks` x `group_size` episodes with the current policy.
2. Score every step with a credit module instance (any of `credit/`): the step
   advantage `CreditOutput.step_advantages[i][t]`.
3. Keep the (prompt, action) pairs whose credit is clearly high (> `min_credit`); when
   several kept actions share one state (identical prompt tokens), keep only the
   best-credited one, so the policy is never taught two answers to one question.
4. Fine-tune on the kept pairs with the negative log-likelihood of the action tokens
   given the prompt (plain softmax of the model: the policy learns to produce the action
   itself, not only to pick it under a decoding constraint), token-mean over the pairs
   of each optimiser step, AdamW, gradient clipping, accumulation over micro-batches.

The loop repeats, so the data improves with the policy (expert iteration / rejection
sampling fine-tuning, made step-level by the credit module). The run around the update
(task seeding, the rollout + credit phase, checkpoints, resume, the metrics log) is
`trainers.core.TrainerCore`, shared with `trainers.policy_gradient`; a round is one of its
iterations, and the same seed draws the same tasks in both trainers. Logged every
optimiser step: the names in `SFT_METRICS` below and the credit module's under `credit/`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from creditgym.agents.trajectory import TokenBatch, Trajectory
from creditgym.credit.base import CreditOutput
from creditgym.trainers.activation_checkpointing import recompute_activations
from creditgym.trainers.core import (
    OPTIMIZER_STEP_METRICS,
    ROLLOUT_METRICS,
    TrainerCore,
    TrainerSettings,
    derive_seed,
    to_device,
)

# Every key of an SFT metrics record except the credit module's `credit/...`.
SFT_METRICS = (
    *ROLLOUT_METRICS,
    *OPTIMIZER_STEP_METRICS,
    "losses/sft",
    "sft/kept_pairs",
    "sft/kept_fraction",
)


@dataclass(frozen=True)
class SFTConfig(TrainerSettings):
    """Settings of one credit-filtered SFT run: the trainers' shared ones
    (`trainers.core.TrainerSettings`, with SFT's own defaults for `num_envs`,
    `learning_rate` and `checkpoint_every`) and its own.

    `creditgym run --trainer sft` sets `rounds`, `num_tasks`, `group_size`,
    `num_envs`, `learning_rate`, `seed` and `resume` from its own options; the other fields
    keep these defaults there and are set from Python (`CreditFilteredSFTTrainer`).
    """

    rounds: int = 5
    """Rounds of rollout -> credit -> filter -> fine-tune."""
    num_tasks: int = 4
    """Tasks rolled out per round."""
    num_envs: int | None = 8
    """As `TrainerSettings.num_envs`; 8 here."""
    min_credit: float = 0.0
    """Keep a step only when its step advantage is above this."""
    epochs_per_round: int = 2
    """Passes over the kept pairs per round."""
    pairs_per_step: int = 16
    """Kept (prompt, action) pairs per optimiser step."""
    micro_batch_pairs: int = 8
    """Pairs per forward/backward pass; gradients accumulate over micro-batches."""
    activation_checkpointing: bool = True
    """Recompute decoder-layer activations in backward (`trainers/activation_checkpointing.py`):
    the same gradients, a small fraction of the memory."""
    learning_rate: float = 1e-4
    """As `TrainerSettings.learning_rate`; 1e-4 here."""
    checkpoint_every: int = 1
    """As `TrainerSettings.checkpoint_every` (an iteration is a round); 1 here."""

    @property
    def iterations(self) -> int:
        """Iterations of the run (`rounds`)."""
        return self.rounds

    def validate(self) -> None:
        """Raise ValueError with a readable message on settings that cannot work."""
        positive = {
            "rounds": self.rounds,
            "num_tasks": self.num_tasks,
            "epochs_per_round": self.epochs_per_round,
            "pairs_per_step": self.pairs_per_step,
            "micro_batch_pairs": self.micro_batch_pairs,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        super().validate()


def select_pairs(
    trajectories: Sequence[Trajectory], credit: CreditOutput, min_credit: float
) -> list[Trajectory]:
    """The high-credit steps, best action per state, each as a one-step trajectory.

    Returns one-step trajectories (so `TokenBatch.from_trajectories` lays them out),
    in input order. Steps without generated tokens (scripted agents) are skipped.
    """
    best: dict[tuple[int, ...], tuple[float, int, Trajectory]] = {}
    order = 0
    for traj, step_credit in zip(trajectories, credit.step_advantages, strict=True):
        for step, value in zip(traj.steps, step_credit, strict=True):
            if value <= min_credit or not step.action_token_ids:
                continue
            state = step.prompt_token_ids
            if state not in best or value > best[state][0]:
                best[state] = (float(value), order, dataclasses.replace(traj, steps=(step,)))
            order += 1
    return [pair for _, _, pair in sorted(best.values(), key=lambda entry: entry[1])]


def action_nll(model: torch.nn.Module, batch: TokenBatch) -> torch.Tensor:
    """Negative log-likelihood of each action token given everything before it, [N, L].

    Teacher-forced with the model's plain softmax; zero off the action mask. Position j
    holds -log p(input_ids[j] | input_ids[<j]).
    """
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    targets = batch.input_ids[:, 1:]
    token_logprobs = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    nll = torch.zeros_like(batch.action_mask)
    nll[:, 1:] = -token_logprobs * batch.action_mask[:, 1:]
    return nll


class CreditFilteredSFTTrainer(TrainerCore):
    """Iterated fine-tuning on the steps a credit module scores highly (module docstring).

    Args: as `trainers.core.TrainerCore`, with an `SFTConfig`.
    """

    config: SFTConfig
    # The step count depends on how many pairs each round keeps: not known ahead
    # (`TrainerCore.total_optimizer_steps`' default).

    def train_iteration(self) -> list[dict[str, float]]:
        """One round: rollout -> credit -> filter -> `epochs_per_round` passes of NLL steps."""
        config, round_index = self.config, self.iteration
        phase = self.rollout_and_credit()
        pairs = select_pairs(phase.trajectories, phase.credit, config.min_credit)
        num_steps = sum(traj.length for traj in phase.trajectories)
        filtered = {
            "sft/kept_pairs": float(len(pairs)),
            "sft/kept_fraction": len(pairs) / max(num_steps, 1),
        }
        phase = phase._replace(metrics={**phase.metrics, **filtered})
        records = []
        shuffle_rng = np.random.default_rng(derive_seed(config.seed, round_index, "shuffle"))
        for _ in range(config.epochs_per_round if pairs else 0):
            order = shuffle_rng.permutation(len(pairs))
            for begin in range(0, len(pairs), config.pairs_per_step):
                chunk = [pairs[i] for i in order[begin : begin + config.pairs_per_step]]
                start = time.perf_counter()
                stats = self._optimiser_step(chunk)
                records.append(self.log_step(phase, stats, time.perf_counter() - start))
        self.iteration += 1
        return records

    def _optimiser_step(self, pairs: Sequence[Trajectory]) -> dict[str, float]:
        """One AdamW step of token-mean NLL over `pairs`, accumulated over micro-batches."""
        total_tokens = float(sum(len(pair.steps[0].action_token_ids) for pair in pairs))
        device = next(self.policy.model.parameters()).device
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        checkpointing = self.config.activation_checkpointing
        with recompute_activations(self.policy.model) if checkpointing else nullcontext():
            size = self.config.micro_batch_pairs
            for begin in range(0, len(pairs), size):
                batch = to_device(
                    TokenBatch.from_trajectories(pairs[begin : begin + size], self.pad_token_id),
                    device,
                )
                # Dividing by the step's total token count makes the accumulated sum the mean.
                loss = action_nll(self.policy.model, batch).sum() / total_tokens
                self.check_finite_loss(loss, pairs[begin : begin + size])
                loss.backward()
                loss_sum += float(loss.detach())
        return {
            "losses/sft": loss_sum,
            "charts/grad_norm": self.clip_and_step(),
            "charts/action_tokens": total_tokens,
        }
