"""Token-level policy-gradient trainer: rollout -> credit -> clipped-surrogate optimisation.

One training iteration (GRPO, Shao et al. 2024; verl-agent / GiGPO, Feng et al. 2025;
HCAPO, Tan et al. 2026; HP-RLVR, Chen et al. 2026 all share this loop and differ only in
the credit module and the group size):

1. Rollout: `num_tasks` tasks x `group_size` rollouts with the current policy
   (`agents.rollout.collect`, an `LLMAgent` seeded from (seed, iteration) so that a
   resumed run samples exactly what the uninterrupted run sampled).
2. Credit: the credit module instance maps the trajectories to per-token advantages
   A_{i,t,j} (`credit/`), placed in the [N_rows, L] step-row layout by `TokenBatch.scatter`.
3. Optimise, `ppo_epochs` x `num_minibatches` AdamW steps, each the PPO clipped surrogate
   (Schulman et al. 2017) per action token, with the ratio taken against the behaviour
   log-probs recorded at rollout (`TokenBatch.old_logprobs`):

       r_j      = exp(log pi_theta(y_j) - log pi_old(y_j))
       l_j^PG   = -min(r_j A_j, clip(r_j, 1 - eps, 1 + eps) A_j)
       l_j^KL   = exp(q_j) - q_j - 1,   q_j = log pi_ref(y_j) - log pi_theta(y_j)   (k3, GRPO)
       loss     = sum_j w_j (l_j^PG + beta l_j^KL)

   w_j = 1 / (action tokens in the minibatch) (token-mean, DAPO / verl's default), or with
   `length_normalise` w_j = 1 / (trajectories x action tokens of j's trajectory), so a long
   trajectory weighs as much as a short one. Log-probs come from
   `agents.action_logprobs.action_logprobs`, which reproduces the sampling distribution
   (temperature, top-p, constrained-decoding masks), so r = 1 exactly before the first
   update. Gradients are accumulated over micro-batches of trajectories; because w is
   computed over the whole minibatch first, accumulation gives the same gradient as one
   pass. The norm is clipped at `max_grad_norm`; the norm *before* clipping is logged.

Models: LoRA through peft for pretrained models (the reference policy for the KL term is
the same model with the adapter disabled, no second copy); full fine-tuning for the models
in `trainers.core.FULL_FINETUNE_MODELS` (`tiny`, `small`, `small-warm`; the reference is
then a frozen copy, affordable at that size).

Group sizes: GRPO / GiGPO / HCAPO use G rollouts per task (default 8);
HP-RLVR uses G = 1 with either G-times more tasks per step (`batching="equal_rollouts"`,
the paper's comparison at equal rollout count) or the same number of tasks
(`batching="equal_tasks"`). The choice and the resulting task count are logged.

The run around this update (task seeding, the rollout + credit phase, checkpoints, resume,
the metrics log) is `trainers.core.TrainerCore`, shared with `trainers.sft`. Logged every
optimiser step (`metrics.jsonl`, `train.log`, TensorBoard): the names in
`POLICY_GRADIENT_METRICS` below (docs/training.md says what each means) and the credit
module's metrics under `credit/`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from peft import PeftModel

from creditgym.agents.action_logprobs import action_logprobs
from creditgym.agents.llm import SamplingConfig
from creditgym.agents.trajectory import TokenBatch, Trajectory
from creditgym.models.progress import LiveBar
from creditgym.trainers.activation_checkpointing import (
    RECOMPUTE_ABOVE_BYTES,
    ActivationCost,
    measure_activation_cost,
    needs_recompute,
    recompute_activations,
)
from creditgym.trainers.core import (
    OPTIMIZER_STEP_METRICS,
    ROLLOUT_METRICS,
    TrainerCore,
    TrainerSettings,
    derive_seed,
    to_device,
)
from creditgym.trainers.host_memory import large_tensors_mapped

# The trainers' name for the rollout policy's sampling settings, which callers import from
# here: the one sampling config of `agents.llm`, not a copy of it.
AgentConfig = SamplingConfig

# Every key of a policy-gradient metrics record except the credit module's `credit/...`.
POLICY_GRADIENT_METRICS = (
    *ROLLOUT_METRICS,
    *OPTIMIZER_STEP_METRICS,
    "losses/policy",
    "losses/kl",
    "losses/total",
    "charts/clip_frac",
    "charts/entropy",
    "adv/mean",
    "adv/std",
    "adv/min",
    "adv/max",
)


@dataclass(frozen=True)
class PolicyGradientConfig(TrainerSettings):
    """Settings of one policy-gradient run: the trainers' shared ones
    (`trainers.core.TrainerSettings`) and its own.

    `creditgym run` sets `steps`, `group_size`, `tasks_per_step`,
    `learning_rate`, `seed`, `checkpoint_every` and `resume` from its own options; the other
    fields keep these defaults there and are set from Python (`PolicyGradientTrainer`).
    """

    steps: int = 20
    """Training iterations (rollout -> credit -> optimise)."""
    tasks_per_step: int = 2
    """Tasks per iteration at the reference group size."""
    batching: Literal["equal_rollouts", "equal_tasks"] = "equal_rollouts"
    """equal_rollouts: tasks = tasks_per_step * reference_group_size / group_size (HP-RLVR's
    comparison at equal rollout count); equal_tasks: tasks = tasks_per_step."""
    reference_group_size: int = 8
    """The group size `equal_rollouts` keeps the rollout count of (GRPO's G = 8)."""
    clip_eps: float = 0.2
    """PPO clip range: ratios outside [1 - eps, 1 + eps] stop contributing gradient."""
    ppo_epochs: int = 1
    """Optimisation passes over each iteration's batch."""
    num_minibatches: int = 1
    """Optimiser steps per pass (the trajectories are split into this many minibatches)."""
    micro_batch_trajectories: int = 32
    """Most trajectories per forward/backward pass; gradients accumulate over micro-batches."""
    micro_batch_tokens: int = 4096
    """Most tokens (prompt + action, summed over a micro-batch's steps) per forward/backward
    pass; a trajectory longer than this goes alone. Memory grows with it: a backward keeps
    [heads, L, L] attention per row and layer, and `tiny`'s byte-level SysDiag prompts
    reach L ~ 3,400, so 8 such trajectories x 6 steps took > 20 GiB (one per pass now).
    Speed too: `small`'s short KeyDoor rows, one trajectory per pass, spent most of the
    update in per-call overhead (benchmarks/perf/bench_small.py)."""
    activation_checkpointing: bool | None = None
    """Recompute each decoder layer's activations in backward instead of keeping them
    (`trainers/activation_checkpointing.py`): the same gradients for one more forward,
    and a small fraction of the memory (a default HP-RLVR run on smollm2-135m went past
    22 GB without it). None (auto): micro-batches are also cut to keep at most 1 GiB of
    activations (what the policy keeps per token is measured once), and only a
    trajectory over it alone recomputes (`needs_recompute`; `small` on KeyDoor never
    does, smollm2-135m with bfloat16 products keeps one KeyDoor trajectory per
    micro-batch). True / False: always / never, over `micro_batch_tokens` micro-batches."""
    shared_prefix: bool | None = None
    """Run the prompt prefix a micro-batch's steps share (the system and task text) once,
    with gradient, and let every step attend to it, the steps after it in groups of like
    length instead of all padded to the longest (`agents.action_logprobs.action_logprobs`):
    the same log-probs and gradients up to float rounding, for fewer tokens; rollouts
    likewise prefill the prefix their steps share once (`models.batching`). None (auto):
    on for LoRA, where a pretrained model's update is the iteration's cost; off for full
    fine-tuning of `tiny` / `small`, whose updates are bound by per-call overhead (and
    whose earlier runs keep their arithmetic)."""
    map_large_tensors: bool = True
    """Serve the update's host allocations of 4 MiB or more as fresh mappings, returned to
    the kernel when freed (`trainers/host_memory.py`; glibc only): a pretrained policy's
    peak memory on a CPU falls by about 40 % (heap holes held it), for the kernel's zeroing
    of fresh pages. The arithmetic is the same either way."""
    kl_coef: float = 0.0
    """beta of the k3 KL penalty to the starting policy (papers: 0.01; 0 skips the
    reference forward pass, which costs one extra forward per micro-batch)."""
    length_normalise: bool = False
    """Weight each trajectory equally (token-mean within a trajectory, then mean over
    trajectories) instead of the plain token mean over the minibatch."""
    distinct_rows: bool = False
    """Run each distinct step row of an optimiser step once (`distinct_steps`: the same
    prompt, action and admissible commands; a finite MDP's states recur, so KeyDoor delay
    4's ~220 rows hold ~80-110 distinct ones), its log-probs serving every step that
    repeats it, so its activations carry the summed gradient of them all. The same loss
    and gradient up to float rounding, summed in another order: runs with it are named
    apart (`benchmarks.run --update-distinct-rows`). Micro-batches of distinct rows are
    bounded by tokens and activation memory only."""

    @property
    def iterations(self) -> int:
        """Iterations of the run (`steps`)."""
        return self.steps

    @property
    def num_tasks(self) -> int:
        """Tasks per iteration after applying `batching`."""
        if self.batching == "equal_tasks":
            return self.tasks_per_step
        return self.tasks_per_step * self.reference_group_size // self.group_size

    def validate(self) -> None:
        """Raise ValueError with a readable message on settings that cannot work."""
        super().validate()  # the shared settings first: group_size >= 1 before it divides
        positive = {
            "steps": self.steps,
            "tasks_per_step": self.tasks_per_step,
            "reference_group_size": self.reference_group_size,
            "ppo_epochs": self.ppo_epochs,
            "num_minibatches": self.num_minibatches,
            "micro_batch_trajectories": self.micro_batch_trajectories,
            "micro_batch_tokens": self.micro_batch_tokens,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.clip_eps <= 0:
            raise ValueError(f"clip_eps must be > 0, got {self.clip_eps}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if (
            self.batching == "equal_rollouts"
            and (self.tasks_per_step * self.reference_group_size) % self.group_size
        ):
            raise ValueError(
                f"equal_rollouts needs group_size ({self.group_size}) to divide "
                f"tasks_per_step x reference_group_size "
                f"({self.tasks_per_step * self.reference_group_size})"
            )
        if self.num_minibatches > self.num_tasks * self.group_size:
            raise ValueError("num_minibatches cannot exceed the rollouts per iteration")


def micro_batches(
    trajectories: Sequence[Trajectory],
    max_trajectories: int,
    max_tokens: int,
    max_bytes: float = math.inf,
    cost: ActivationCost | None = None,
) -> list[slice]:
    """Consecutive runs of `trajectories` of at most `max_trajectories`, `max_tokens` and,
    with `cost`, `max_bytes` of kept activations (`cost.bytes` of its steps' lengths).

    A trajectory's tokens are its steps' prompt + action ids; one over a budget alone
    forms a micro-batch alone. Returns slices covering range(len(trajectories)) in order.
    """
    slices: list[slice] = []
    start, tokens, kept = 0, 0, 0.0
    for index, trajectory in enumerate(trajectories):
        lengths = step_lengths(trajectory)
        size = sum(lengths)
        size_bytes = cost.bytes(lengths) if cost is not None else 0.0
        count = index - start
        over = tokens + size > max_tokens or kept + size_bytes > max_bytes
        if count and (count >= max_trajectories or over):
            slices.append(slice(start, index))
            start, tokens, kept = index, 0, 0.0
        tokens += size
        kept += size_bytes
    if len(trajectories) > start:
        slices.append(slice(start, len(trajectories)))
    return slices


def distinct_steps(trajectories: Sequence[Trajectory]) -> tuple[list[Trajectory], torch.Tensor]:
    """The distinct step rows of `trajectories`, each as a one-step trajectory, and the
    index of each row's distinct row.

    Rows are alike when their prompt ids, action ids and admissible commands (what the
    constrained log-probs read) are: their teacher-forced log-probs are one computation.
    Returns (distinct rows in order of first appearance, inverse [N] int64 with N the
    steps of `trajectories` in `TokenBatch.from_trajectories`' row order).
    """
    first: dict[tuple, int] = {}
    distinct: list[Trajectory] = []
    inverse = []
    for trajectory in trajectories:
        for step in trajectory.steps:
            key = (step.prompt_token_ids, step.action_token_ids, step.admissible_commands)
            if key not in first:
                first[key] = len(distinct)
                distinct.append(dataclasses.replace(trajectory, steps=(step,)))
            inverse.append(first[key])
    return distinct, torch.tensor(inverse, dtype=torch.long)


def step_lengths(trajectory: Trajectory) -> list[int]:
    """Tokens (prompt + action) of each of `trajectory`'s steps."""
    return [len(step.prompt_token_ids) + len(step.action_token_ids) for step in trajectory.steps]


def token_weights(batch: TokenBatch, length_normalise: bool) -> torch.Tensor:
    """Loss weight per token, [N, L] float32, summing to 1 over the action tokens.

    Token-mean: 1 / (action tokens in the batch). With `length_normalise`: 1 / (number of
    trajectories x action tokens of the token's trajectory).
    """
    mask = batch.action_mask
    if not length_normalise:
        return mask / mask.sum().clamp(min=1.0)
    tokens_per_row = mask.sum(dim=1)
    num_traj = int(batch.traj_index.max()) + 1 if len(batch.traj_index) else 0
    tokens_per_traj = torch.zeros(num_traj).index_add_(0, batch.traj_index, tokens_per_row)
    trajectories_with_tokens = (tokens_per_traj > 0).sum().clamp(min=1)
    row_weight = 1.0 / (tokens_per_traj[batch.traj_index].clamp(min=1.0) * trajectories_with_tokens)
    return mask * row_weight[:, None]


def clipped_surrogate(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's per-token clipped surrogate loss and clip indicator (Schulman et al. 2017).

    Args: three [N, L] tensors (log pi_theta, behaviour log-probs, advantages), clip eps.
    Returns: loss [N, L] = -min(r A, clip(r, 1-eps, 1+eps) A) and a float [N, L] that is 1
    where |r - 1| > eps (the clip fraction's numerator, as CleanRL counts it).
    """
    ratio = torch.exp(new_logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -torch.minimum(unclipped, clipped)
    return loss, ((ratio - 1.0).abs() > clip_eps).float()


def k3_kl(new_logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi_theta || pi_ref) (Schulman 2020; GRPO), [N, L], >= 0."""
    log_ratio = ref_logprobs - new_logprobs
    return torch.exp(log_ratio) - log_ratio - 1.0


class PolicyGradientTrainer(TrainerCore):
    """Trains a policy with a credit module on one environment (see the module docstring).

    Args: as `trainers.core.TrainerCore`, with a `PolicyGradientConfig`.
    """

    config: PolicyGradientConfig

    def setup(self) -> None:
        config = self.config
        self.is_lora = isinstance(self.policy.model, PeftModel)
        self.share_prefix = self.is_lora if config.shared_prefix is None else config.shared_prefix
        # Built before `resume` loads trained weights: the KL reference is the start.
        self.reference = self._frozen_reference() if config.kl_coef > 0 else None
        self._activation_cost: ActivationCost | None = None

    def total_optimizer_steps(self) -> int:
        config = self.config
        return config.steps * config.ppo_epochs * config.num_minibatches

    def _frozen_reference(self) -> torch.nn.Module | None:
        """Full fine-tuning keeps a frozen copy; LoRA disables its adapter instead (None)."""
        if self.is_lora:
            return None
        reference = copy.deepcopy(self.policy.model)
        reference.requires_grad_(False)
        return reference

    def train_iteration(self) -> list[dict[str, float]]:
        """Rollout -> credit -> `ppo_epochs` x `num_minibatches` optimiser steps."""
        config, iteration = self.config, self.iteration
        phase = self.rollout_and_credit()
        trajectories = phase.trajectories
        records = []
        order_rng = np.random.default_rng(derive_seed(config.seed, iteration, "minibatches"))
        for _ in range(config.ppo_epochs):
            order = order_rng.permutation(len(trajectories))
            for indices in np.array_split(order, config.num_minibatches):
                subset = [trajectories[i] for i in indices]
                advantages = [phase.credit.token_advantages[i] for i in indices]
                start = time.perf_counter()
                stats = self._optimiser_step(subset, advantages)
                records.append(self.log_step(phase, stats, time.perf_counter() - start))
        self.iteration += 1
        return records

    def _policy_logprobs(
        self, model: torch.nn.Module, batch: TokenBatch, trajectories
    ) -> torch.Tensor:
        sampling = self.sampling
        return action_logprobs(
            model,
            batch,
            trajectories,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            constrained=sampling.constrained,
            tokenizer=self.policy.tokenizer,
            share_prefix=self.share_prefix,
        )

    def _reference_logprobs(
        self, batch: TokenBatch, trajectories: Sequence[Trajectory]
    ) -> torch.Tensor:
        with torch.no_grad():
            if self.is_lora:
                with self.policy.model.disable_adapter():
                    return self._policy_logprobs(self.policy.model, batch, trajectories)
            return self._policy_logprobs(self.reference, batch, trajectories)

    def activation_cost(self) -> ActivationCost:
        """What the policy keeps for backward per row (measured once, on first use)."""
        if self._activation_cost is None:
            self._activation_cost = measure_activation_cost(self.policy.model)
        return self._activation_cost

    def _micro_batch_loss(
        self,
        micro: Sequence[Trajectory],
        weights: torch.Tensor,
        all_advantages: torch.Tensor,
        row: int,
    ) -> dict[str, float]:
        """Forward and backward of one micro-batch whose rows start at `row` of the full
        batch; returns its loss sums and "rows" (how many rows it had)."""
        config = self.config
        device = weights.device
        batch = to_device(TokenBatch.from_trajectories(micro, self.pad_token_id), device)
        rows = slice(row, row + batch.input_ids.shape[0])
        width = batch.input_ids.shape[1]
        # The micro-batch is padded to its own longest row; the full batch may be wider.
        weight = weights[rows, :width]
        advantages = all_advantages[rows, :width]
        mask = batch.action_mask
        new_logprobs = self._policy_logprobs(self.policy.model, batch, micro)
        policy_loss, clipped = clipped_surrogate(
            new_logprobs, batch.old_logprobs, advantages, config.clip_eps
        )
        loss = (weight * policy_loss).sum()
        kl_sum = 0.0
        if config.kl_coef > 0:
            kl = k3_kl(new_logprobs, self._reference_logprobs(batch, micro)) * mask
            loss = loss + config.kl_coef * (weight * kl).sum()
            kl_sum = float((weight * kl).sum().detach())
        self.check_finite_loss(loss, micro)
        loss.backward()
        return {
            "rows": batch.input_ids.shape[0],
            "policy": float((weight * policy_loss).sum().detach()),
            "kl": kl_sum,
            "clip": float((clipped * mask).sum()),
            # Monte Carlo entropy of the sampling distribution: E_{y~pi}[-log pi(y)].
            "entropy": float((-batch.old_logprobs * mask).sum()),
        }

    def _distinct_micro_batch_loss(
        self,
        micro: Sequence[Trajectory],
        part: slice,
        inverse: torch.Tensor,
        full: TokenBatch,
        weights: torch.Tensor,
        all_advantages: torch.Tensor,
    ) -> dict[str, float]:
        """Forward and backward of the distinct rows `part` of `distinct_steps` (`micro`,
        one-step trajectories) for every row of the step that repeats one of them.

        Each such row r of the full batch `full` (on the policy's device) takes its loss
        term from its distinct row's log-probs, so the terms of a row repeated n times
        sum there and backward carries their summed gradient once. Returns the loss sums
        of those rows."""
        config = self.config
        device = weights.device
        batch = to_device(TokenBatch.from_trajectories(micro, self.pad_token_id), device)
        width = batch.input_ids.shape[1]  # every repeating row is as long as its source
        rows = ((inverse >= part.start) & (inverse < part.stop)).nonzero().squeeze(-1)
        source = (inverse[rows] - part.start).to(device)
        rows = rows.to(device)
        new_logprobs = self._policy_logprobs(self.policy.model, batch, micro)[source]
        old_logprobs = full.old_logprobs[rows, :width]
        mask = full.action_mask[rows, :width]
        weight = weights[rows, :width]
        policy_loss, clipped = clipped_surrogate(
            new_logprobs, old_logprobs, all_advantages[rows, :width], config.clip_eps
        )
        loss = (weight * policy_loss).sum()
        kl_sum = 0.0
        if config.kl_coef > 0:
            reference = self._reference_logprobs(batch, micro)[source]
            kl = k3_kl(new_logprobs, reference) * mask
            loss = loss + config.kl_coef * (weight * kl).sum()
            kl_sum = float((weight * kl).sum().detach())
        self.check_finite_loss(loss, micro)
        loss.backward()
        return {
            "policy": float((weight * policy_loss).sum().detach()),
            "kl": kl_sum,
            "clip": float((clipped * mask).sum()),
            "entropy": float((-old_logprobs * mask).sum()),
        }

    def _optimiser_step(
        self, trajectories: Sequence[Trajectory], token_advantages: Sequence[Sequence[np.ndarray]]
    ) -> dict[str, float]:
        """One AdamW step over `trajectories`, accumulating gradients over micro-batches."""
        config = self.config
        device = next(self.policy.model.parameters()).device
        full = TokenBatch.from_trajectories(trajectories, self.pad_token_id)
        weights = token_weights(full, config.length_normalise).to(device)
        all_advantages = full.scatter(token_advantages).to(device)
        self.optimizer.zero_grad(set_to_none=True)
        sums = {"policy": 0.0, "kl": 0.0, "clip": 0.0, "entropy": 0.0}
        row = 0
        # Auto: micro-batches small enough to keep their activations, where one
        # trajectory fits; explicit settings keep the token-budget micro-batches.
        auto = config.activation_checkpointing is None
        cost = self.activation_cost() if auto else None
        if config.distinct_rows:
            units, inverse = distinct_steps(trajectories)
            most_units = len(units)  # one-step units: the token and memory budgets only
            full_on_device = to_device(full, device)
        else:
            units, inverse, most_units = list(trajectories), None, config.micro_batch_trajectories
        parts = micro_batches(
            units, most_units, config.micro_batch_tokens, RECOMPUTE_ABOVE_BYTES, cost
        )
        mapped = large_tensors_mapped() if config.map_large_tensors else nullcontext()
        # The update of a CPU run takes minutes: show it like the rollout and evaluation.
        with (
            mapped,
            LiveBar(total=len(parts), desc="update", unit="micro-batch", leave=False) as bar,
        ):
            for part in parts:
                micro = units[part]
                lengths = [length for trajectory in micro for length in step_lengths(trajectory)]
                # Recomputing activations in backward keeps a large micro-batch's memory small.
                recompute = needs_recompute(config.activation_checkpointing, cost, lengths)
                with recompute_activations(self.policy.model) if recompute else nullcontext():
                    if inverse is None:
                        stats = self._micro_batch_loss(micro, weights, all_advantages, row)
                        row += stats.pop("rows")
                    else:
                        stats = self._distinct_micro_batch_loss(
                            micro, part, inverse, full_on_device, weights, all_advantages
                        )
                for name, value in stats.items():
                    sums[name] += value
                bar.update(1)
        grad_norm = self.clip_and_step()

        num_tokens = float(full.action_mask.sum().clamp(min=1.0))
        token_advs = all_advantages[full.action_mask.to(device).bool()]
        return {
            "losses/policy": sums["policy"],
            "losses/kl": sums["kl"],
            "losses/total": sums["policy"] + config.kl_coef * sums["kl"],
            "charts/grad_norm": grad_norm,
            "charts/clip_frac": sums["clip"] / num_tokens,
            "charts/entropy": sums["entropy"] / num_tokens,
            "charts/action_tokens": float(full.action_mask.sum()),
            "adv/mean": float(token_advs.mean()) if token_advs.numel() else 0.0,
            "adv/std": float(token_advs.std(correction=0)) if token_advs.numel() else 0.0,
            "adv/min": float(token_advs.min()) if token_advs.numel() else 0.0,
            "adv/max": float(token_advs.max()) if token_advs.numel() else 0.0,
        }
