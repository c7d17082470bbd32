"""The policy-gradient trainer's loss pieces, against values computed by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from creditgym.agents.trajectory import Step, TokenBatch, Trajectory
from creditgym.credit.base import CreditOutput
from creditgym.trainers.core import TrainerSettings, rollout_metrics
from creditgym.trainers.policy_gradient import (
    PolicyGradientConfig,
    clipped_surrogate,
    k3_kl,
    token_weights,
)
from creditgym.trainers.sft import SFTConfig, select_pairs


def _trajectory(group: str, action_lengths: list[int], success: bool = False) -> Trajectory:
    steps = tuple(
        Step(
            observation=f"obs {t}",
            action="ls" if t % 2 else "bad",
            admissible_commands=("ls", "ps aux"),
            prompt_token_ids=(1, 2, 3 + t),
            action_token_ids=tuple(range(10, 10 + n)),
            action_logprobs=tuple([-0.5] * n),
        )
        for t, n in enumerate(action_lengths)
    )
    return Trajectory("creditgym/SysDiag-v0", group, 0, group, "task", "obs", steps, success)


def test_clipped_surrogate_takes_the_pessimistic_term():
    ratios = torch.tensor([[1.5, 1.5, 0.5, 0.5, 1.1]])
    advantages = torch.tensor([[1.0, -1.0, 1.0, -1.0, 2.0]])
    old = torch.zeros_like(ratios)
    loss, clipped = clipped_surrogate(torch.log(ratios), old, advantages, clip_eps=0.2)
    # -min(rA, clip(r)A): clipped gain for r>1+eps with A>0, full loss with A<0, etc.
    expected = torch.tensor([[-1.2, 1.5, -0.5, 0.8, -2.2]])
    assert torch.allclose(loss, expected, atol=1e-6)
    assert clipped.tolist() == [[1.0, 1.0, 1.0, 1.0, 0.0]]


def test_clipped_surrogate_gradient_is_minus_advantage_at_ratio_one():
    new = torch.zeros(1, 3, requires_grad=True)
    advantages = torch.tensor([[0.5, -2.0, 0.0]])
    loss, _ = clipped_surrogate(new, torch.zeros(1, 3), advantages, clip_eps=0.2)
    loss.sum().backward()
    assert torch.allclose(new.grad, -advantages)


def test_k3_kl_is_zero_at_equal_policies_and_matches_hand_value():
    new = torch.tensor([[-1.0, -2.0]])
    assert torch.equal(k3_kl(new, new), torch.zeros(1, 2))
    ref = torch.tensor([[-1.5, -2.0]])
    expected = math.exp(-0.5) + 0.5 - 1.0
    assert k3_kl(new, ref)[0, 0].item() == pytest.approx(expected, rel=1e-6)


def test_token_mean_weights_every_action_token_equally():
    batch = TokenBatch.from_trajectories([_trajectory("a", [2, 1]), _trajectory("b", [5])])
    weights = token_weights(batch, length_normalise=False)
    assert weights.sum().item() == pytest.approx(1.0)
    assert torch.all(weights[batch.action_mask.bool()] == 1.0 / 8)
    assert torch.all(weights[~batch.action_mask.bool()] == 0)


def test_length_normalised_weights_give_each_trajectory_equal_mass():
    batch = TokenBatch.from_trajectories([_trajectory("a", [2, 1]), _trajectory("b", [5])])
    weights = token_weights(batch, length_normalise=True)
    per_traj = torch.zeros(2).index_add_(0, batch.traj_index, weights.sum(dim=1))
    assert per_traj.tolist() == pytest.approx([0.5, 0.5])
    assert weights[0, 3].item() == pytest.approx(1.0 / 6)  # 2 trajectories x 3 tokens


def test_equal_rollouts_batching_gives_single_rollout_methods_more_tasks():
    grpo = PolicyGradientConfig(group_size=8, tasks_per_step=2)
    hp_rlvr = PolicyGradientConfig(group_size=1, tasks_per_step=2)
    same_tasks = PolicyGradientConfig(group_size=1, tasks_per_step=2, batching="equal_tasks")
    assert grpo.num_tasks * grpo.group_size == hp_rlvr.num_tasks * hp_rlvr.group_size == 16
    assert same_tasks.num_tasks == 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"steps": 0}, "steps"),
        ({"group_size": 3}, "divide"),
        ({"kl_coef": -1.0}, "kl_coef"),
        ({"task_pool": 1}, "task_pool"),
        ({"clip_eps": 0.0}, "clip_eps"),
    ],
)
def test_config_validation_names_the_bad_setting(changes, message):
    with pytest.raises(ValueError, match=message):
        PolicyGradientConfig(**changes).validate()


@pytest.mark.parametrize("config", [PolicyGradientConfig, SFTConfig])
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"group_size": 0}, "group_size"),
        ({"num_envs": 0}, "num_envs"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"max_grad_norm": -1.0}, "max_grad_norm"),
        ({"task_pool": 1, "group_size": 1}, "task_pool"),
    ],
)
def test_both_trainers_check_the_shared_settings(config, changes, message):
    with pytest.raises(ValueError, match=message):
        config(**changes).validate()


def test_each_shared_trainer_setting_is_declared_once():
    """A setting both trainers have lives on `TrainerSettings` (its doc and checks once);
    a trainer may only give it another default. `activation_checkpointing` differs in
    kind (the policy-gradient trainer's has an automatic mode), so each declares its own."""
    shared = {f.name for f in dataclasses.fields(TrainerSettings)}
    own = {
        cls: {f.name for f in dataclasses.fields(cls)} - shared
        for cls in (PolicyGradientConfig, SFTConfig)
    }
    assert own[PolicyGradientConfig] & own[SFTConfig] == {"activation_checkpointing"}
    sft_defaults = {"num_envs": 8, "learning_rate": 1e-4, "checkpoint_every": 1}
    for name in shared:
        sft, base = getattr(SFTConfig(), name), getattr(TrainerSettings(), name)
        assert sft == sft_defaults.get(name, base), name
        assert getattr(PolicyGradientConfig(), name) == base, name


def test_rollout_metrics_count_success_length_and_valid_actions():
    trajectories = [_trajectory("a", [1, 1], success=True), _trajectory("b", [1, 1, 1, 1])]
    metrics = rollout_metrics(trajectories)
    assert metrics["rollout/success_rate"] == 0.5
    assert metrics["rollout/traj_length"] == 3.0
    assert metrics["rollout/valid_action_ratio"] == pytest.approx(3 / 6)  # odd steps play "ls"


def test_select_pairs_keeps_high_credit_steps_and_the_best_action_per_state():
    first, second = _trajectory("a", [1, 2]), _trajectory("b", [3, 1])
    credit = CreditOutput(
        step_advantages=[np.array([0.9, -0.2], np.float32), np.array([1.5, 0.4], np.float32)],
        token_advantages=[],
    )
    pairs = select_pairs([first, second], credit, min_credit=0.0)
    # Step 0 of both trajectories shares the prompt (1, 2, 3): the 1.5-credit action wins.
    kept = [(pair.group_id, len(pair.steps[0].action_token_ids)) for pair in pairs]
    assert kept == [("b", 3), ("b", 1)]
    assert all(pair.length == 1 for pair in pairs)
