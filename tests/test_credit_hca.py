"""`hca` (credit/hca.py): return-conditional HCA with exact hindsight, against hand values
on the chain of tests/test_exact_hindsight.py, the exact identity E[credit | s, a] =
A(s, a) + bias(s, a) on KeyDoor, and a sampled mean on KeyDoor against the exact A."""

from __future__ import annotations

from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest

from creditgym.agents.episode import play_episode
from creditgym.agents.tabular import TableAgent
from creditgym.credit.exact_hindsight import exact_hindsight
from creditgym.credit.hca import HCA, HCAOptions
from creditgym.credit.policy_evaluation import evaluate_policy
from creditgym.measure.ground_truth import TaskMDPs
from tests.test_exact_hindsight import (
    CHAIN_POLICY,
    KEYDOOR,
    RiskyChain,
    chain_trajectory,
    random_table,
)

# Standard errors a sampled mean may stray from its exact expectation (two-sided,
# about 6e-5 per comparison under a normal approximation).
MAX_STANDARD_ERRORS = 4.0
# Credit is float32: a pair whose credit never varies still differs from its float64
# expectation by rounding.
FLOAT32_TOL = 1e-6


def chain_hca(outcome: str) -> HCA:
    return HCA(lambda task_id: RiskyChain(), lambda mdp: CHAIN_POLICY, HCAOptions(outcome))


def test_hca_on_the_chain_equals_the_hand_values():
    batch = [
        chain_trajectory([("s0", "risky", 0.0), ("s1", "go", 1.0)]),
        chain_trajectory([("s0", "risky", 0.0), ("s1", "go", 0.0)]),
        chain_trajectory([("s0", "safe", 0.5)]),
        chain_trajectory([("s0", "risky", 0.0), ("s1", "stop", 0.0)]),
    ]
    output = chain_hca("return")(batch)
    # Z = 1 after risky: pi / h = P(1 | s0) / P(1 | s0, risky) = 0.15 / 0.25 = 0.6, so
    # (1 - 0.6) * 1 = 0.4; after go: 0.25 / 0.5 = 0.5, so 0.5.
    np.testing.assert_allclose(output.step_advantages[0], [0.4, 0.5], rtol=1e-6)
    np.testing.assert_array_equal(output.step_advantages[1], [0.0, 0.0])  # Z = 0
    # Z = 0.5 after safe: pi / h = 0.4 / 1, so (1 - 0.4) * 0.5 = 0.3.
    np.testing.assert_allclose(output.step_advantages[2], [0.3], rtol=1e-6)
    np.testing.assert_array_equal(output.step_advantages[3], [0.0, 0.0])
    for steps, tokens in zip(output.step_advantages, output.token_advantages, strict=True):
        assert [len(t) for t in tokens] == [0] * len(steps)  # scripted: no tokens
    # Biases at the visited pairs: (s0, risky) misses z = 0.5 (0.4 * 0.5 = 0.2),
    # (s1, go) none, (s0, safe) misses z = 1 (0.15), (s1, stop) misses z = 1 (0.25).
    biases = [0.2, 0.0, 0.2, 0.0, 0.15, 0.2, 0.25]
    assert output.metrics["mean_abs_bias"] == pytest.approx(np.mean(biases))
    # Conditioned on success instead, the safe road (a failure) gets 0 and the risky
    # road to the goal (1 - 0.15 / 0.25) * 1 = 0.4 as before.
    success = chain_hca("success")(batch)
    np.testing.assert_allclose(success.step_advantages[0], [0.4, 0.5], rtol=1e-6)
    np.testing.assert_array_equal(success.step_advantages[2], [0.0])


def test_expected_hca_is_the_advantage_plus_its_exact_bias_on_keydoor():
    mdp = TaskMDPs(KEYDOOR, {"delay": 2, "variance": "high"})("keydoor-3")
    table = random_table(mdp, seed=3)
    truth = evaluate_policy(mdp, table)
    exact = exact_hindsight(mdp, table, "return")
    biased = 0
    for state in truth.states:
        for action in table[state]:
            law = exact.action_outcomes[state][action]
            expected = sum(p * (1.0 - exact.ratio(state, action, z)) * z for z, p in law.items())
            bias = exact.hca_bias(state, action)
            assert expected == pytest.approx(truth.advantage(state, action) + bias, abs=1e-9)
            biased += abs(bias) > 1e-9
    room = truth.states[0]
    # Every return is still reachable after taking the key; not after a distractor (the
    # door then pays nothing), so HCA is unbiased at the key and biased elsewhere.
    assert exact.hca_bias(room, "take the key") == pytest.approx(0.0, abs=1e-12)
    assert biased > 0


def smooth_table(mdp, seed: int) -> dict[str, dict[str, float]]:
    """Half uniform, half `random_table`: every action keeps at least half its uniform
    share, so no outcome is so rare after an action that HCA's ratio P(z|s) / P(z|s,a)
    explodes on it (the estimator's heavy tail, measured separately by its exact law)."""
    rough = random_table(mdp, seed)
    return {
        state: {a: 0.5 / len(row) + 0.5 * p for a, p in row.items()} for state, row in rough.items()
    }


def test_hca_sampled_on_keydoor_averages_to_the_exact_advantage():
    delay, episodes, task_id = 2, 3000, "keydoor-3"
    env = gym.make(KEYDOOR, delay=delay)
    mdps = TaskMDPs(KEYDOOR, {"delay": delay})
    table = smooth_table(mdps(task_id), seed=4)
    agent = TableAgent({task_id: table}, seed=0)
    trajectories = [
        play_episode(env, agent, seed=k, options={"task_id": task_id}) for k in range(episodes)
    ]
    env.close()
    credit = HCA(mdps, lambda mdp: table, HCAOptions("return"))(trajectories).step_advantages
    by_pair: dict[tuple[str, str], list[float]] = defaultdict(list)
    for trajectory, values in zip(trajectories, credit, strict=True):
        for step, value in zip(trajectory.steps, values, strict=True):
            by_pair[(step.info["mdp_state"], step.action)].append(float(value))
    truth = evaluate_policy(mdps(task_id), table)
    exact = exact_hindsight(mdps(task_id), table, "return")
    compared = 0
    for (state, action), values in by_pair.items():
        if len(values) < 100:
            continue
        # The estimator's exact law at (s, a): (1 - ratio_z) z with probability P(z|s,a);
        # its exact standard deviation gives the standard error of the sampled mean.
        law = exact.action_outcomes[state][action]
        terms = {z: (1.0 - exact.ratio(state, action, z)) * z for z in law}
        mean = sum(law[z] * terms[z] for z in law)
        spread = np.sqrt(sum(law[z] * (terms[z] - mean) ** 2 for z in law))
        assert mean == pytest.approx(
            truth.advantage(state, action) + exact.hca_bias(state, action), abs=1e-9
        )
        error = abs(np.mean(values) - mean)
        assert error <= MAX_STANDARD_ERRORS * spread / np.sqrt(len(values)) + FLOAT32_TOL, (
            state,
            action,
        )
        compared += 1
    room_key = (truth.states[0], "take the key")
    # At the key the estimator is unbiased: its sampled mean is the exact A.
    assert exact.hca_bias(*room_key) == pytest.approx(0.0, abs=1e-12)
    values = by_pair[room_key]
    standard_error = np.std(values, ddof=1) / np.sqrt(len(values))
    assert len(values) >= 300
    assert abs(np.mean(values) - truth.advantage(*room_key)) <= (
        MAX_STANDARD_ERRORS * standard_error
    )
    assert compared >= 10
