"""HP-RLVR's token credit and HCAPO's combination as pure functions, against values worked
out by hand (no model: the inputs are the per-token scores the engine would produce)."""

import math

import numpy as np
import pytest

from creditgym.credit.hcapo import (
    combined_advantages,
    importance_ratio,
    micro_advantages,
    self_normalised_ratio,
    smoothed,
)
from creditgym.credit.hp_rlvr import step_credit, token_credit, updated_baselines

# --- HP-RLVR (Chen et al. 2026): A_j = (R - b) w_j, w_j = min(d_j / mean d, cap) --------

# Three steps: two tokens, one token, and a scripted step with no tokens.
DIVERGENCES = [np.array([0.2, 0.4]), np.array([0.0]), np.zeros(0)]


def test_hp_rlvr_token_credit_of_a_success_by_hand():
    # mean d over the 3 tokens = 0.6 / 3 = 0.2, so w = [1, 2], [0]; R - b = 1 - 0.25.
    credit = token_credit(DIVERGENCES, episode_return=1.0, baseline=0.25)
    np.testing.assert_allclose(credit[0], [0.75, 1.5], rtol=1e-6)
    np.testing.assert_allclose(credit[1], [0.0])
    assert credit[2].shape == (0,) and all(c.dtype == np.float32 for c in credit)
    # Step credit: the mean of each step's tokens, 0 for the step without tokens.
    np.testing.assert_allclose(step_credit(credit), [1.125, 0.0, 0.0], rtol=1e-6)


def test_hp_rlvr_token_credit_of_a_failure_the_cap_and_raw_weights_by_hand():
    # A failure below its baseline: R - b = 0 - 0.25, same weights, negative credit.
    failure = token_credit(DIVERGENCES, episode_return=0.0, baseline=0.25)
    np.testing.assert_allclose(failure[0], [-0.25, -0.5], rtol=1e-6)
    # Cap 1.5: w = [1, min(2, 1.5)] -> A = 0.75 x [1, 1.5].
    capped = token_credit(DIVERGENCES, 1.0, 0.25, max_weight=1.5)
    np.testing.assert_allclose(capped[0], [0.75, 1.125], rtol=1e-6)
    # Unnormalised: w = d itself -> A = 0.75 x [0.2, 0.4].
    raw = token_credit(DIVERGENCES, 1.0, 0.25, normalise=False)
    np.testing.assert_allclose(raw[0], [0.15, 0.3], rtol=1e-6)


def test_hp_rlvr_gives_no_credit_where_the_views_agree_or_the_reward_meets_the_baseline():
    agree = token_credit([np.zeros(2), np.zeros(1)], episode_return=1.0, baseline=0.0)
    assert all(not np.any(c) for c in agree)
    met = token_credit(DIVERGENCES, episode_return=0.5, baseline=0.5)
    assert all(not np.any(c) for c in met)


def test_hp_rlvr_baselines_move_once_per_task_by_hand():
    # Task a seen before (b_a = 1.0) with returns 0 and 1 in this batch: mean 0.5,
    # b_a = 0.9 x 1.0 + 0.1 x 0.5 = 0.95. Task b is new: it starts at its mean, 1.0.
    # Global: 0.9 x 0.5 + 0.1 x (2 / 3) = 0.45 + 0.0666...
    tasks, global_baseline = updated_baselines(
        {"a": 1.0}, 0.5, ["a", "a", "b"], np.array([0.0, 1.0, 1.0]), momentum=0.9
    )
    assert tasks == {"a": pytest.approx(0.95), "b": pytest.approx(1.0)}
    assert global_baseline == pytest.approx(0.45 + 0.1 * 2 / 3)
    # The batch order does not matter, and an empty batch moves nothing.
    shuffled = updated_baselines({"a": 1.0}, 0.5, ["b", "a", "a"], np.array([1.0, 1.0, 0.0]), 0.9)
    assert shuffled == (tasks, pytest.approx(global_baseline))
    assert updated_baselines({"a": 1.0}, 0.5, [], np.zeros(0), 0.9) == ({"a": 1.0}, 0.5)


# --- HCAPO (arXiv 2603.08754): rho -> Q^H -> micro -> A = A^GRPO + omega A^Micro -------


def test_hcapo_pipeline_from_hindsight_logprobs_to_step_advantages_by_hand():
    # One group: A succeeds in 2 steps (R 1), B fails in 1 (R 0), C succeeds in 1 (R 1).
    # A's mean hindsight log-probs -1 and -11 at T_temp 5: rho = e^-0.2 / m, e^-2.2 / m,
    # m = (e^-0.2 + e^-2.2) / 2, i.e. about 1.76 and 0.24 before clipping, 1.2 and 0.8 after.
    rho_a = np.clip(self_normalised_ratio([np.array([-1.0, -1.0]), np.array([-11.0])], [], 5.0),
                    0.8, 1.2)  # fmt: skip
    np.testing.assert_allclose(rho_a, [1.2, 0.8])
    # A one-step trajectory's ratio is its own mean: rho = 1.
    np.testing.assert_allclose(self_normalised_ratio([np.array([-3.0])], [], 5.0), [1.0])
    # Q^H = rho gamma^(T-t) R: A [1.2 x 0.95, 0.8 x 1], B [0] (R = 0), C [1 x 1].
    q_values = [rho_a * np.array([0.95, 1.0]), np.array([0.0]), np.array([1.0])]
    np.testing.assert_allclose(q_values[0], [1.14, 0.8])
    # Pool of the group: [1.14, 0.8, 0, 1], mean 2.94 / 4 = 0.735, squared deviations
    # 0.405^2 + 0.065^2 + 0.735^2 + 0.265^2 = 0.7787, sigma = sqrt(0.7787 / 3).
    sigma = math.sqrt(0.7787 / 3)
    micro = micro_advantages(q_values, {"g": [0, 1, 2]})
    np.testing.assert_allclose(micro[0], [0.405 / sigma, 0.065 / sigma], rtol=1e-6)
    np.testing.assert_allclose(micro[1], [-0.735 / sigma], rtol=1e-6)
    np.testing.assert_allclose(micro[2], [0.265 / sigma], rtol=1e-6)
    # GRPO macro of returns [1, 0, 1]: mean 2/3, std sqrt(1/3) -> +-(1/3 or 2/3) / 0.57735.
    macro = np.array([1 / 3, -2 / 3, 1 / 3]) / math.sqrt(1 / 3)
    advantages = combined_advantages(macro, micro, np.array([True, False, True]))
    np.testing.assert_allclose(
        advantages[0], [macro[0] + 0.405 / sigma, macro[0] + 0.065 / sigma], rtol=1e-6
    )
    np.testing.assert_allclose(advantages[1], [macro[1] - 0.735 / sigma], rtol=1e-6)
    np.testing.assert_allclose(advantages[2], [macro[2] + 0.265 / sigma], rtol=1e-6)
    assert all(a.dtype == np.float32 for a in advantages)


def test_hcapo_micro_per_time_step_and_uniform_pools_by_hand():
    q_values = [np.array([1.14, 0.8]), np.array([0.0]), np.array([1.0])]
    # t = 1 pools [1.14, 0, 1]: mean 2.14 / 3, deviations 1.14 - m, -m, 1 - m; t = 2 holds
    # only A's step: a singleton gives 0.
    m = 2.14 / 3
    sigma = math.sqrt(((1.14 - m) ** 2 + m**2 + (1 - m) ** 2) / 2)
    micro = micro_advantages(q_values, {"g": [0, 1, 2]}, "time_step")
    np.testing.assert_allclose(micro[0], [(1.14 - m) / sigma, 0.0], rtol=1e-6)
    np.testing.assert_allclose(micro[1], [-m / sigma], rtol=1e-6)
    np.testing.assert_allclose(micro[2], [(1 - m) / sigma], rtol=1e-6)
    # Two groups are normalised apart; a group of equal Q has no micro signal at all.
    apart = micro_advantages([np.array([1.0, 0.0]), np.array([0.5, 0.5])], {"a": [0], "b": [1]})
    # Group a alone: [1, 0], mean 0.5, sigma sqrt(0.5 / 1) -> +-0.5 / sqrt(0.5).
    np.testing.assert_allclose(apart[0], [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)])
    np.testing.assert_allclose(apart[1], [0.0, 0.0])


def test_hcapo_do_no_harm_and_weights_by_hand():
    macro = np.array([0.5, -0.5])
    micro = [np.array([-1.0, 2.0]), np.array([-1.0])]
    success = np.array([True, False])
    # Do no harm: the success's -1 becomes 0; the failure keeps its -1.
    safe = combined_advantages(macro, micro, success)
    np.testing.assert_allclose(safe[0], [0.5, 2.5])
    np.testing.assert_allclose(safe[1], [-1.5])
    harmful = combined_advantages(macro, micro, success, do_no_harm=False)
    np.testing.assert_allclose(harmful[0], [-0.5, 2.5])
    # The seed variant's weights 0.6 / 0.4: [0.3 + 0, 0.3 + 0.8] and [-0.3 - 0.4].
    seed = combined_advantages(macro, micro, success, macro_weight=0.6, omega=0.4)
    np.testing.assert_allclose(seed[0], [0.3, 1.1], rtol=1e-6)
    np.testing.assert_allclose(seed[1], [-0.7], rtol=1e-6)


def test_hcapo_smoothing_and_the_seed_importance_ratio_by_hand():
    # alpha 0.5: Q~ = [0.5 x 1 + 0.5 x 0.5, 0.5 x 0.5 + 0.5 x 0, Q_T] = [0.75, 0.25, 0].
    np.testing.assert_allclose(smoothed(np.array([1.0, 0.5, 0.0]), 0.5), [0.75, 0.25, 0.0])
    np.testing.assert_allclose(smoothed(np.array([1.0, 0.5]), None), [1.0, 0.5])
    # Seed: exp(clamp(sum hindsight - sum causal, -5, 5)): -2 - (-4) = 2; 10 -> 5; -9 -> -5.
    hindsight = [np.array([-1.0, -1.0]), np.array([0.0]), np.array([-10.0])]
    causal = [np.array([-3.0, -1.0]), np.array([-10.0]), np.array([-1.0])]
    np.testing.assert_allclose(
        importance_ratio(hindsight, causal, 5.0), [math.exp(2), math.exp(5), math.exp(-5)]
    )
