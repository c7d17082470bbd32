"""Group replicas share the task, not the exogenous noise (envs/seeding.py)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from creditgym.agents.base import RandomAgent
from creditgym.agents.rollout import collect


def rewards_of(env_id: str, seed: int, replica: int, actions: int = 9) -> list[float]:
    env = gym.make(env_id)
    _, info = env.reset(seed=seed, options={"replica": replica})
    rewards = []
    for _ in range(actions):
        command = info["admissible_commands"][-1]  # the same choices in every replica
        _, reward, terminated, truncated, info = env.step(command)
        rewards.append(reward)
        if terminated or truncated:
            break
    env.close()
    return rewards


def test_replicas_of_one_seed_draw_independent_umbrella_coins():
    same = rewards_of("creditgym/Umbrella-v0", 5, 0)
    assert same == rewards_of("creditgym/Umbrella-v0", 5, 0)  # (seed, replica) is fixed
    others = [rewards_of("creditgym/Umbrella-v0", 5, r) for r in range(1, 6)]
    # With the same actions, 8 fair coins agree in all of 5 replicas with prob. 5 * 2^-8.
    assert any(o[:-1] != same[:-1] for o in others)


@pytest.mark.parametrize("env_id", ["creditgym/Umbrella-v0", "creditgym/KeyDoor-v0"])
def test_a_collected_group_shares_the_task_but_not_the_noise(env_id):
    trajectories, _ = collect(env_id, RandomAgent(seed=0), seeds=[11], group_size=6, num_envs=2)
    assert len({t.group_id for t in trajectories}) == 1
    assert len({t.task_id for t in trajectories}) == 1
    assert len({t.initial_observation.splitlines()[0] for t in trajectories}) == 1
    if env_id == "creditgym/Umbrella-v0":
        coins = {tuple(s.reward for s in t.steps[1:-1]) for t in trajectories}
        assert len(coins) > 1


def test_a_bad_replica_option_is_refused():
    env = gym.make("creditgym/KeyDoor-v0")
    with pytest.raises(ValueError, match="replica"):
        env.reset(seed=0, options={"replica": -1})
