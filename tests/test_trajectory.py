"""The trajectory contract: JSON round trip and the padded tensor view."""

import json

import pytest
import torch

from creditgym.agents.trajectory import Step, TokenBatch, Trajectory


def make_trajectory(group_id: str = "g0", seed: int = 0) -> Trajectory:
    steps = (
        Step(
            observation="obs 0 — ünïcode",
            action="ls",
            admissible_commands=("ls", "pwd"),
            prompt_text="p0",
            prompt_token_ids=(1, 2, 3),
            response_text="<action>ls</action>",
            action_token_ids=(7, 8),
            action_logprobs=(-0.5, -1.25),
            reward=-0.01,
            info={"key_step": False, "nested": {"a": [1, 2]}},
        ),
        Step(
            observation="obs 1",
            action="kill 42",
            prompt_token_ids=(4,),
            action_token_ids=(9, 10, 11),
            action_logprobs=(-0.1, -0.2, -0.3),
            reward=1.0,
            terminated=True,
            info={"key_step": True, "success": True},
        ),
    )
    return Trajectory(
        env_id="creditgym/SysDiag-v0",
        task_id="cpu_hog-3",
        seed=seed,
        group_id=group_id,
        task="fix the host",
        initial_observation="obs 0",
        steps=steps,
        success=True,
        feedback="fixed: killed the runaway process",
        metadata={"agent": "test"},
    )


def test_json_round_trip_preserves_every_field():
    # samples.jsonl stores `to_dict()`; `from_dict` reads it back.
    for trajectory in (make_trajectory(), make_trajectory("g1", seed=5)):
        line = json.dumps(trajectory.to_dict(), ensure_ascii=False)
        assert Trajectory.from_dict(json.loads(line)) == trajectory


def test_step_rejects_mismatched_logprobs():
    with pytest.raises(ValueError, match="same length"):
        Step(observation="", action="", action_token_ids=(1, 2), action_logprobs=(-1.0,))


def test_trajectory_derived_properties():
    trajectory = make_trajectory()
    assert trajectory.length == 2
    assert trajectory.total_return == pytest.approx(0.99)
    assert trajectory.terminated and not trajectory.truncated
    assert trajectory.num_action_tokens == 5
    assert [s.key_step for s in trajectory.steps] == [False, True]


def test_token_batch_layout_matches_hand_built_rows():
    trajectories = [make_trajectory("a"), make_trajectory("b")]
    batch = TokenBatch.from_trajectories(trajectories, pad_token_id=0)
    assert batch.input_ids.shape == (4, 5)
    assert batch.input_ids[0].tolist() == [1, 2, 3, 7, 8]
    assert batch.input_ids[1].tolist() == [4, 9, 10, 11, 0]
    assert batch.attention_mask[1].tolist() == [1, 1, 1, 1, 0]
    assert batch.action_mask[0].tolist() == [0, 0, 0, 1, 1]
    assert batch.action_mask[1].tolist() == [0, 1, 1, 1, 0]
    assert batch.step_index[1].tolist() == [1, 1, 1, 1, -1]
    assert batch.old_logprobs[1].tolist() == pytest.approx([0, -0.1, -0.2, -0.3, 0])
    assert batch.rewards.tolist() == pytest.approx([-0.01, 1.0, -0.01, 1.0])
    assert batch.traj_index.tolist() == [0, 0, 1, 1]
    assert batch.group_ids.tolist() == [0, 0, 1, 1]


def test_scatter_places_values_on_action_tokens_only():
    trajectories = [make_trajectory()]
    batch = TokenBatch.from_trajectories(trajectories)
    values = batch.scatter([[[0.5, 0.5], [1.0, 2.0, 3.0]]])
    assert values[0].tolist() == [0, 0, 0, 0.5, 0.5]
    assert values[1].tolist() == [0, 1.0, 2.0, 3.0, 0]
    assert torch.all(values[batch.action_mask == 0] == 0)
    with pytest.raises(ValueError, match="action tokens"):
        batch.scatter([[[0.5], [1.0, 2.0, 3.0]]])


def test_token_batch_of_scripted_steps_has_no_action_tokens():
    step = Step(observation="o", action="ls", reward=0.0)
    trajectory = Trajectory("e", "t", 0, "g", "task", "o", (step,), False)
    batch = TokenBatch.from_trajectories([trajectory])
    assert batch.input_ids.shape == (1, 1)
    assert batch.action_mask.sum() == 0
