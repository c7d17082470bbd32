"""GRPO and GiGPO and rule-based credit against values worked out by hand."""

import math

import numpy as np
import pytest

from creditgym.credit.gigpo import GiGPO, discounted_returns
from creditgym.credit.grpo import GRPO, GRPOOptions
from creditgym.credit.rule_based import RuleBased
from tests.credit_cases import scripted_trajectory


def test_grpo_group_scaling_matches_hand_values():
    # Group rewards [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3); A = +-0.5 / 0.57735.
    batch = [scripted_trajectory("g", [0.0, r], r > 0) for r in (1.0, 0.0, 0.0, 1.0)]
    output = GRPO()(batch)
    expected = 0.5 / math.sqrt(1 / 3)
    for trajectory_values, sign in zip(output.step_advantages, (1, -1, -1, 1), strict=True):
        np.testing.assert_allclose(trajectory_values, [sign * expected] * 2, rtol=1e-5)
    assert output.metrics["frac_reward_zero_std"] == 0.0


def test_grpo_batch_and_none_scaling_and_zero_std_fraction():
    # Group a: [1, 0]; group b: [0, 0] (uniform). Batch std of [1, 0, 0, 0] (ddof 1) = 0.5.
    batch = [
        scripted_trajectory("a", [1.0], True),
        scripted_trajectory("a", [0.0], False),
        scripted_trajectory("b", [0.0], False),
        scripted_trajectory("b", [0.0], False),
    ]
    by_batch = GRPO(GRPOOptions("batch"))(batch)
    np.testing.assert_allclose(
        np.concatenate(by_batch.step_advantages), [1.0, -1.0, 0.0, 0.0], rtol=1e-5
    )
    assert by_batch.metrics["frac_reward_zero_std"] == 0.5
    unscaled = GRPO(GRPOOptions("none"))(batch)
    np.testing.assert_allclose(np.concatenate(unscaled.step_advantages), [0.5, -0.5, 0.0, 0.0])


def test_grpo_single_rollout_gives_the_return_as_verl_agent():
    output = GRPO()([scripted_trajectory("solo", [-0.1, 10.0], True)])
    np.testing.assert_allclose(output.step_advantages[0], [9.9, 9.9], rtol=1e-6)
    assert output.metrics["num_singleton_groups"] == 1.0


def test_grpo_near_uniform_group_is_not_blown_up():
    batch = [scripted_trajectory("g", [1.0], True), scripted_trajectory("g", [1.0 - 1e-9], True)]
    output = GRPO()(batch)
    assert np.all(np.concatenate(output.step_advantages) == 0.0)
    assert output.metrics["frac_reward_zero_std"] == 1.0


def test_grpo_rejects_unknown_scaling():
    with pytest.raises(ValueError, match="scale_rewards"):
        GRPOOptions("per-token")


def test_discounted_returns_by_hand():
    np.testing.assert_allclose(discounted_returns([0.0, -0.1, 1.0], 0.5), [0.2, 0.4, 1.0])


def test_gigpo_anchor_groups_and_singletons_match_hand_values():
    # A: s0 -> s1, success (R 1); B: s0 -> s2, failure; C: s0 -> s1, failure.
    batch = [
        scripted_trajectory("g", [0.0, 1.0], True, observations=["s0", "s1"]),
        scripted_trajectory("g", [0.0, 0.0], False, observations=["s0", "s2"]),
        scripted_trajectory("g", [0.0, 0.0], False, observations=["s0", "s1"]),
    ]
    output = GiGPO()(batch)
    third = math.sqrt(1 / 3)
    episode = [(2 / 3) / third, -(1 / 3) / third, -(1 / 3) / third]
    # Anchor s0: step returns [0.95, 0, 0] -> same standardised values as the episode term.
    s0 = episode
    # Anchor s1: [1, 0] -> +-0.5 / sqrt(0.5). Anchor s2 is a singleton -> 0.
    s1 = 0.5 / math.sqrt(0.5)
    expected = [
        [episode[0] + s0[0], episode[0] + s1],
        [episode[1] + s0[1], episode[1] + 0.0],
        [episode[2] + s0[2], episode[2] - s1],
    ]
    for values, hand in zip(output.step_advantages, expected, strict=True):
        np.testing.assert_allclose(values, hand, rtol=1e-5)
    assert output.metrics["num_anchor_groups"] == 2.0
    np.testing.assert_allclose(output.metrics["frac_steps_in_anchor_groups"], 5 / 6)


def test_gigpo_without_repeated_states_is_grpo():
    batch = [
        scripted_trajectory("g", [0.0, 1.0], True, observations=["a", "b"]),
        scripted_trajectory("g", [0.0, 0.0], False, observations=["c", "d"]),
    ]
    gigpo, grpo = GiGPO()(batch), GRPO()(batch)
    for ours, reference in zip(gigpo.step_advantages, grpo.step_advantages, strict=True):
        np.testing.assert_allclose(ours, reference)


def test_rule_based_generalised_seed_rules_by_hand():
    success = scripted_trajectory("g", [0.0, 0.0, 1.0], True, key_steps=[False, True, True])
    failure = scripted_trajectory("g", [0.0, 0.5, -0.6], False, key_steps=[True, False, False])
    output = RuleBased()([success, failure])
    # success: irrelevant -0.5; key +2; key with reward 1 -> 3.
    np.testing.assert_allclose(output.step_advantages[0], [-0.5, 2.0, 3.0])
    # failure: key +1; non-key with positive reward keeps it; non-key penalty -0.6 - 0.5.
    np.testing.assert_allclose(output.step_advantages[1], [1.0, 0.5, -1.1], rtol=1e-6)
    # The verdict is the channel's (credit.base.verdict, return > 0): the env's
    # failure paid 0.4 is a success there, and its key step gets the success bonus.
    paid = scripted_trajectory("g", [0.0, 0.5, -0.1], False, key_steps=[True, False, False])
    np.testing.assert_allclose(RuleBased()([paid]).step_advantages[0], [2.0, 0.5, -0.6], rtol=1e-6)
