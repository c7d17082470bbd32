"""creditgym credit modules as verl advantage estimators (integrations.verl_credit).

Trajectories are written by hand, encoded as verl's multi-turn batch lays out a rollout
(one row per rollout; each turn's tokens under response_mask 1, the env's reply under 0;
a step's reward on its turn's last token, the outcome on the last response token), and
the estimator verl looks up by name must give each turn's tokens the advantage the
creditgym module gives that step of the hand-written trajectory.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import verl
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from agents.trajectory import Step, Trajectory
from credit.gigpo import GiGPO
from credit.grpo import GRPO
from credit.rule_based import RuleBased
from integrations.verl_credit import compute_advantage, trajectories_from_batch, turns_of

TURN_TOKENS = 3  # policy tokens per turn
REPLY_TOKENS = 2  # env-reply tokens after each turn but the last


def trajectory(group: str, steps: list[tuple[str, float, bool]], success: bool) -> Trajectory:
    return Trajectory(
        env_id="verl",
        task_id=group,
        seed=0,
        group_id=group,
        task="",
        initial_observation=steps[0][0],
        steps=tuple(
            Step(observation=obs, action="", reward=reward, info={"key_step": key})
            for obs, reward, key in steps
        ),
        success=success,
    )


# Two groups; rewards are dyadic so float32 tensors hold them exactly. Group a repeats
# the observation "desk" at different steps (a GiGPO anchor state); b has a singleton.
TRAJECTORIES = [
    trajectory("a", [("hall", -0.25, False), ("desk", -0.25, True), ("door", 1.0, True)], True),
    trajectory("a", [("hall", -0.25, False), ("desk", 0.0, True)], False),
    trajectory("a", [("desk", -0.25, False), ("hall", -0.25, False), ("desk", 0.5, True)], False),
    trajectory("b", [("room", 1.0, True)], True),
    trajectory("b", [("room", -0.25, False), ("room", 0.0, False)], False),
]


def verl_batch(trajectories: list[Trajectory]) -> DataProto:
    """The batch verl's multi-turn rollout builds for these trajectories (right padding)."""
    width = max(t.length * (TURN_TOKENS + REPLY_TOKENS) for t in trajectories) + 1
    rewards = torch.zeros(len(trajectories), width)
    mask = torch.zeros(len(trajectories), width, dtype=torch.int64)
    for row, traj in enumerate(trajectories):
        position = 0
        for step in traj.steps:
            mask[row, position : position + TURN_TOKENS] = 1
            rewards[row, position + TURN_TOKENS - 1] = step.reward
            position += TURN_TOKENS + REPLY_TOKENS
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={
            "uid": np.array([t.group_id for t in trajectories], dtype=object),
            "turn_observations": np.array(
                [[s.observation for s in t.steps] for t in trajectories], dtype=object
            ),
            "turn_key_steps": np.array(
                [[s.key_step for s in t.steps] for t in trajectories], dtype=object
            ),
            "success": np.array([t.success for t in trajectories], dtype=object),
        },
    )


def by_turn(step_advantages: list[np.ndarray], like: torch.Tensor) -> torch.Tensor:
    """What the estimator must return: step t's value on turn t's tokens."""
    expected = torch.zeros(like.shape)
    for row, values in enumerate(step_advantages):
        for t, value in enumerate(values):
            start = t * (TURN_TOKENS + REPLY_TOKENS)
            expected[row, start : start + TURN_TOKENS] = float(value)
    return expected


def test_installed_verl_is_the_pinned_version() -> None:
    assert verl.__version__ == "0.9.1"


def test_turns_are_runs_of_the_response_mask_and_rewards_follow_them() -> None:
    turns = turns_of(np.array([1, 1, 0, 0, 1, 0, 1, 1, 0]))
    assert [(t.start, t.end) for t in turns] == [(0, 2), (4, 5), (6, 8)]
    assert [(t.reward_start, t.reward_end) for t in turns] == [(0, 4), (4, 6), (6, 9)]
    batch = verl_batch(TRAJECTORIES)
    rebuilt, _ = trajectories_from_batch(
        batch.batch["token_level_rewards"],
        batch.batch["response_mask"],
        batch.non_tensor_batch["uid"],
        batch.non_tensor_batch,
    )
    for original, mapped in zip(TRAJECTORIES, rebuilt, strict=True):
        assert [s.reward for s in mapped.steps] == [s.reward for s in original.steps]
        assert [s.observation for s in mapped.steps] == [s.observation for s in original.steps]
        assert [s.key_step for s in mapped.steps] == [s.key_step for s in original.steps]
        assert (mapped.group_id, mapped.success) == (original.group_id, original.success)


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("creditgym_grpo", GRPO(convention="verl")),
        ("creditgym_gigpo", GiGPO(convention="verl-agent")),
        ("creditgym_rule_based", RuleBased()),
    ],
)
def test_estimator_found_by_verl_gives_each_turn_the_module_step_advantage(name, module) -> None:
    batch = verl_batch(TRAJECTORIES)
    computed = compute_advantage(batch, name).batch
    expected = by_turn(module(TRAJECTORIES).step_advantages, computed["response_mask"])
    torch.testing.assert_close(computed["advantages"], expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(computed["returns"], computed["advantages"])
    assert torch.all(computed["advantages"][computed["response_mask"] == 0] == 0)
    if name == "creditgym_gigpo":  # the anchor state "desk" gave some step its own term
        assert not torch.allclose(
            computed["advantages"],
            by_turn(GRPO(convention="verl-agent")(TRAJECTORIES).step_advantages, expected),
        )


def test_creditgym_grpo_equals_verl_grpo_called_as_verl_calls_it() -> None:
    batch = verl_batch(TRAJECTORIES)
    arguments = {
        "token_level_rewards": batch.batch["token_level_rewards"],
        "response_mask": batch.batch["response_mask"],
        "index": batch.non_tensor_batch["uid"],
        "config": None,
    }
    ours, _ = get_adv_estimator_fn("creditgym_grpo")(**arguments)
    theirs, _ = get_adv_estimator_fn("grpo")(**arguments)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_step_level_estimator_without_turn_fields_says_what_it_needs() -> None:
    batch = verl_batch(TRAJECTORIES)
    with pytest.raises(ValueError, match="turn_observations"):
        get_adv_estimator_fn("creditgym_gigpo")(
            token_level_rewards=batch.batch["token_level_rewards"],
            response_mask=batch.batch["response_mask"],
            index=batch.non_tensor_batch["uid"],
            config=None,
        )
