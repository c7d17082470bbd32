"""creditgym's `verl-agent` convention against verl-agent's own arithmetic, row for row, on
random batches in verl-agent's own row order.

verl-agent's rollout loop (`agent_system/multi_turn_rollout/rollout_loop.py`,
`TrajectoryCollector.gather_rollout_data`) emits its batch trajectory-major: for each
environment in turn, every active step of its episode. Its advantage functions then walk
that batch row by row (verl-agent 796ed31):

- GRPO, `compute_grpo_outcome_advantage(..., compute_mean_std_cross_steps=True)` in
  `verl/trainer/ppo/core_algos.py`, and GiGPO's episode term, `episode_norm_reward` in
  `gigpo/core_gigpo.py`: each row's score (its episode's float32 return) is appended to
  its task's list in row order; a list of one gets mean 0 and std 1, a longer one
  `torch.mean` of the list and `torch.std` of it as a 1 x n tensor; the row's advantage
  is `(score - mean) / (std + 1e-6)` in float32 (`score - mean` without the std);
- GiGPO's step term: `compute_step_discounted_returns` discounts each trajectory's
  float32 rewards in float32, `build_step_group` clusters a task's rows by exact
  observation in row order, `step_norm_reward` normalises each cluster as above (a
  cluster of one: its own mean, std 1, hence 0); the two terms are added in float32.

The functions below redo that arithmetic from the description above (not verl-agent's
code, which needs verl), and the tests compare creditgym's convention with it bit for bit
on random batches whose sums round, where the row order decides the last bits and, in a
group of equal returns, the sign. The rewards are float32 numbers, so that summing them as
verl-agent's `episode_rewards` array does (in float64, rounded to float32 per step) and
rounding each first agree.
"""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
import pytest
import torch

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.gigpo import GiGPO, GiGPOOptions
from creditgym.credit.grpo import GRPO, GRPOOptions
from tests.credit_cases import scripted_trajectory

EPS = 1e-6
BATCHES = 100
SEED = 51
# Rewards whose float32 sums round (0.1 + 0.6 and 0.7 are an ulp apart), so that the order
# of a sum shows; 0 and 1 keep equal-return groups frequent.
REWARDS = (0.0, 0.1, 0.2, 0.3, 0.6, 0.7, 1.0, 10.0)
OBSERVATIONS = ("hall", "kitchen", "shelf")


def random_batch(rng: random.Random) -> list[Trajectory]:
    """1-3 tasks of 2-5 rollouts of 1-5 steps, in verl-agent's environment order (a task's
    rollouts side by side: `gen_batch.repeat(..., interleave=True)`)."""
    batch = []
    for task in range(rng.randint(1, 3)):
        for _ in range(rng.randint(2, 5)):
            length = rng.randint(1, 5)
            rewards = [float(np.float32(rng.choice(REWARDS))) for _ in range(length)]
            observations = [rng.choice(OBSERVATIONS) for _ in range(length)]
            batch.append(scripted_trajectory(f"task{task}", rewards, rewards[-1] > 0, observations))
    return batch


def batch_rows(batch: list[Trajectory], order: str) -> list[tuple[int, int]]:
    """(trajectory, step) of every batch row: `trajectory-major` is verl-agent's order;
    `step-major` (every rollout's first step, then every second, ...) is the order
    creditgym assumed before, kept to show that the comparison tells them apart."""
    rows = [(i, t) for i, trajectory in enumerate(batch) for t in range(trajectory.length)]
    if order == "step-major":
        rows.sort(key=lambda row: (row[1], row[0]))
    return rows


def float32_episode_returns(batch: list[Trajectory]) -> list[np.float32]:
    """verl-agent's `episode_rewards`: a float32 accumulator, one addition per step."""
    totals = []
    for trajectory in batch:
        total = np.float32(0.0)
        for step in trajectory.steps:
            total = np.float32(total + np.float32(step.reward))
        totals.append(total)
    return totals


def normalise_rows(scores: list[torch.Tensor], groups: list, with_std: bool, singleton_mean: str):
    """Per row, verl-agent's group normalisation: rows gathered per group in row order;
    a group of one gets mean 0 (`singleton_mean="zero"`, the episode term) or its own
    value (`"own"`, the step term) and std 1."""
    members = defaultdict(list)
    for score, group in zip(scores, groups, strict=True):
        members[group].append(score)
    statistics = {}
    for group, values in members.items():
        if len(values) == 1:
            mean = (
                torch.tensor(0.0) if singleton_mean == "zero" else torch.mean(torch.tensor(values))
            )
            statistics[group] = (mean, torch.tensor(1.0))
        else:
            statistics[group] = (
                torch.mean(torch.tensor(values)),
                torch.std(torch.tensor([values])),
            )
    advantages = []
    for score, group in zip(scores, groups, strict=True):
        mean, std = statistics[group]
        advantages.append((score - mean) / (std + EPS) if with_std else score - mean)
    return advantages


def verl_agent_grpo(batch: list[Trajectory], order: str, with_std: bool) -> dict:
    """(trajectory, step) -> float32 advantage, as verl-agent's GRPO computes it."""
    rows = batch_rows(batch, order)
    returns = float32_episode_returns(batch)
    scores = [torch.tensor(returns[i], dtype=torch.float32) for i, _ in rows]
    groups = [batch[i].group_id for i, _ in rows]
    advantages = normalise_rows(scores, groups, with_std, singleton_mean="zero")
    return {row: advantage for row, advantage in zip(rows, advantages, strict=True)}


def float32_discounted(rewards: list[float], gamma: float) -> list[np.float32]:
    """verl-agent's `compute_step_discounted_returns` for one trajectory: float32 rewards,
    a running return from the end, each product and sum rounded to float32 (NumPy 2 keeps
    a float32 scalar float32 against a Python float)."""
    values = np.array(rewards, dtype=np.float32)
    returns = np.zeros_like(values)
    running = 0
    for t in reversed(range(len(values))):
        running = values[t] + gamma * running
        returns[t] = running
    return list(returns)


def verl_agent_gigpo(
    batch: list[Trajectory], order: str, with_std: bool, gamma: float, omega: float
) -> dict:
    """(trajectory, step) -> float32 advantage, as verl-agent's GiGPO computes it."""
    rows = batch_rows(batch, order)
    episode = verl_agent_grpo(batch, order, with_std)
    discounted = [float32_discounted([s.reward for s in traj.steps], gamma) for traj in batch]
    step_scores = [torch.tensor(discounted[i][t], dtype=torch.float32) for i, t in rows]
    # Anchor groups: a task's rows with the same observation (exact match).
    anchors = [(batch[i].group_id, batch[i].steps[t].observation) for i, t in rows]
    step_terms = normalise_rows(step_scores, anchors, with_std, singleton_mean="own")
    return {row: episode[row] + omega * term for row, term in zip(rows, step_terms, strict=True)}


def creditgym_rows(step_advantages: list[np.ndarray]) -> dict:
    return {
        (i, t): torch.tensor(value)
        for i, values in enumerate(step_advantages)
        for t, value in enumerate(values)
    }


def same_bits(ours: dict, theirs: dict) -> bool:
    return ours.keys() == theirs.keys() and all(
        ours[row].dtype == theirs[row].dtype == torch.float32
        and ours[row].view(torch.int32).item() == theirs[row].view(torch.int32).item()
        for row in ours
    )


def batches() -> list[list[Trajectory]]:
    rng = random.Random(SEED)
    return [random_batch(rng) for _ in range(BATCHES)]


@pytest.mark.parametrize("with_std", [True, False])
def test_grpo_verl_agent_equals_verl_agents_arithmetic_bit_for_bit_in_its_row_order(with_std):
    module = GRPO(GRPOOptions(scale_rewards="group" if with_std else "none"), "verl-agent")
    order_mattered = 0
    for batch in batches():
        ours = creditgym_rows(module(batch).step_advantages)
        assert same_bits(ours, verl_agent_grpo(batch, "trajectory-major", with_std))
        order_mattered += not same_bits(ours, verl_agent_grpo(batch, "step-major", with_std))
    # The comparison has teeth: in many batches the other row order gives other bits.
    assert order_mattered >= BATCHES // 10, order_mattered


@pytest.mark.parametrize("with_std", [True, False])
def test_gigpo_verl_agent_equals_verl_agents_arithmetic_bit_for_bit_in_its_row_order(with_std):
    gamma, omega = 0.95, 1.0
    options = GiGPOOptions(gamma=gamma, omega=omega, normalise_by_std=with_std)
    module = GiGPO(options, "verl-agent")
    order_mattered = 0
    for batch in batches():
        ours = creditgym_rows(module(batch).step_advantages)
        assert same_bits(ours, verl_agent_gigpo(batch, "trajectory-major", with_std, gamma, omega))
        order_mattered += not same_bits(
            ours, verl_agent_gigpo(batch, "step-major", with_std, gamma, omega)
        )
    assert order_mattered >= BATCHES // 10, order_mattered
