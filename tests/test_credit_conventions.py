"""GRPO and GiGPO in each peer's convention against values worked out by hand (docs/conventions.md).

Peers (docs/conventions.md): TRL's GRPOTrainer, verl's `compute_grpo_outcome_advantage`,
verl-agent's GRPO and GiGPO. Each case is small enough to compute on paper; the float32
cases spell out the rounding that gives the peers a non-zero advantage on a uniform group.
"""

import dataclasses
import math

import numpy as np
import pytest

from creditgym.benchmarks.run import RunConfig, main, resolve
from creditgym.benchmarks.run.build import build_credit
from creditgym.credit.base import CreditContext, build
from creditgym.credit.gigpo import (
    GiGPO,
    GiGPOOptions,
    discounted_returns,
    discounted_returns_float32,
)
from creditgym.credit.grpo import (
    CONVENTIONS,
    GRPO,
    Convention,
    GRPOOptions,
    episode_returns,
    group_normalised,
)
from tests.credit_cases import scripted_trajectory

GRPO_CONVENTIONS = ("creditgym", "trl", "verl", "verl-agent")
ULP_24 = 2.0**-24  # one unit in the last place of float32 numbers in [0.5, 1)


def one_group(*trajectories_rewards: list[float]):
    return [scripted_trajectory("g", rewards, rewards[-1] > 0) for rewards in trajectories_rewards]


def advantages(output) -> list[list[float]]:
    return [values.tolist() for values in output.step_advantages]


# Lengths (1, 3), returns (1, 0). Over trajectories: mean 0.5, std sqrt(0.5), A = +-0.707.
# Over step rows (verl-agent): rows [1, 0, 0, 0], mean 0.25, std sqrt((0.5625 + 3 * 0.0625)
# / 3) = 0.5, so A = 0.75 / 0.5 = +1.5 and -0.25 / 0.5 = -0.5.
HALF_OVER_STD = 0.5 / (math.sqrt(0.5) + 1e-6)
LENGTHS_1_3 = {
    "creditgym": (HALF_OVER_STD, -HALF_OVER_STD),
    "trl": (0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4)),
    "verl": (HALF_OVER_STD, -HALF_OVER_STD),
    "verl-agent": (0.75 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6)),
}


@pytest.mark.parametrize("convention", GRPO_CONVENTIONS)
def test_grpo_lengths_one_and_three_by_hand(convention):
    output = GRPO(convention=convention)(one_group([1.0], [0.0, 0.0, 0.0]))
    first, second = LENGTHS_1_3[convention]
    np.testing.assert_allclose(output.step_advantages[0], [first], rtol=1e-6)
    np.testing.assert_allclose(output.step_advantages[1], [second] * 3, rtol=1e-6)


# Three returns of 0.9. In float32 0.9 is 15099494 * 2^-24; the sum 3 * 0.9 = 45298482 *
# 2^-24 falls halfway between two float32 neighbours (multiples of 4 * 2^-24 in [2, 4)) and
# rounds to the even one, 45298480 * 2^-24; divided by 3 it rounds to 15099493 * 2^-24. The
# float32 mean is one ulp below each value: every deviation is +2^-24, the std is
# sqrt(3 * 2^-48 / 2) = sqrt(1.5) * 2^-24, and with no guard A = 2^-24 / (std + eps).
UNIFORM_09 = {
    "creditgym": (0.0, 1.0),  # the guard: std < 1e-6 -> A = 0, counted as zero std
    # TRL: std 7.3e-8 is above isclose's 1e-8, so this uniform group is not counted.
    "trl": (ULP_24 / (math.sqrt(1.5) * ULP_24 + 1e-4), 0.0),
    "verl": (1.0 / (math.sqrt(1.5) + 1e-6 / ULP_24), 1.0),
    "verl-agent": (1.0 / (math.sqrt(1.5) + 1e-6 / ULP_24), 1.0),
}


@pytest.mark.parametrize("convention", GRPO_CONVENTIONS)
def test_grpo_three_identical_returns_of_0_9_by_hand(convention):
    output = GRPO(convention=convention)(one_group([0.9], [0.9], [0.9]))
    value, frac_zero_std = UNIFORM_09[convention]
    np.testing.assert_allclose(np.concatenate(output.step_advantages), [value] * 3, rtol=1e-5)
    assert output.metrics["frac_reward_zero_std"] == pytest.approx(frac_zero_std)


# A near-uniform pair at reward scale 1e-4: returns 2^-13 (1.22e-4) and 2^-13 + 2^-23, both
# exact in float32, as are their sum and mean 2^-13 + 2^-24. Deviations -+2^-24, std
# sqrt(2) * 2^-24 = 8.4e-8: below creditgym's 1e-6 guard, above TRL's 1e-8 zero-std count.
NEAR_UNIFORM = {
    "creditgym": (0.0, 1.0),
    "trl": (ULP_24 / (math.sqrt(2) * ULP_24 + 1e-4), 0.0),
    "verl": (1.0 / (math.sqrt(2) + 1e-6 / ULP_24), 1.0),
    "verl-agent": (1.0 / (math.sqrt(2) + 1e-6 / ULP_24), 1.0),
}


@pytest.mark.parametrize("convention", GRPO_CONVENTIONS)
def test_grpo_near_uniform_pair_at_reward_scale_1e_4_by_hand(convention):
    output = GRPO(convention=convention)(one_group([2.0**-13], [2.0**-13 + 2.0**-23]))
    value, frac_zero_std = NEAR_UNIFORM[convention]
    np.testing.assert_allclose(np.concatenate(output.step_advantages), [-value, value], rtol=1e-5)
    assert output.metrics["frac_reward_zero_std"] == pytest.approx(frac_zero_std)


# A well-separated pair at the same scale, returns (1e-4, 0): std 7.07e-5, so TRL's eps of
# 1e-4 more than halves the advantage, 0.5e-4 / (7.07e-5 + 1e-4) = 0.29 instead of ~0.70.
SEPARATED_SMALL = {
    "creditgym": 0.5e-4 / (math.sqrt(0.5) * 1e-4 + 1e-6),
    "trl": 0.5e-4 / (math.sqrt(0.5) * 1e-4 + 1e-4),
    "verl": 0.5e-4 / (math.sqrt(0.5) * 1e-4 + 1e-6),
    "verl-agent": 0.5e-4 / (math.sqrt(0.5) * 1e-4 + 1e-6),
}


@pytest.mark.parametrize("convention", GRPO_CONVENTIONS)
def test_grpo_eps_at_reward_scale_1e_4_by_hand(convention):
    output = GRPO(convention=convention)(one_group([1e-4], [0.0]))
    value = SEPARATED_SMALL[convention]
    np.testing.assert_allclose(np.concatenate(output.step_advantages), [value, -value], rtol=1e-5)


# A group of one, three steps, return 1. creditgym: A = R. TRL: the row is its own mean,
# A = 0, and TRL counts it as zero std. verl: mean 0, std 1, A = 1 / (1 + 1e-6). verl-agent:
# three rows of 1 are a group of three with std 0, so A = 0 / (0 + 1e-6) = 0.
SINGLETON_THREE_STEPS = {
    "creditgym": (1.0, 0.0),
    "trl": (0.0, 1.0),
    "verl": (1.0 / (1.0 + 1e-6), 0.0),
    "verl-agent": (0.0, 1.0),
}


@pytest.mark.parametrize("convention", GRPO_CONVENTIONS)
def test_grpo_group_of_one_with_three_steps_by_hand(convention):
    output = GRPO(convention=convention)(one_group([0.0, 0.0, 1.0]))
    value, frac_zero_std = SINGLETON_THREE_STEPS[convention]
    np.testing.assert_allclose(output.step_advantages[0], [value] * 3, rtol=1e-7, atol=0)
    assert output.metrics["frac_reward_zero_std"] == frac_zero_std
    assert output.metrics["num_singleton_groups"] == 1.0


def test_verl_agent_one_step_group_of_one_is_verls_rule():
    # One row: verl-agent's singleton rule (mean 0, std 1) applies, A = R / (1 + 1e-6).
    output = GRPO(convention="verl-agent")(one_group([2.0]))
    np.testing.assert_allclose(output.step_advantages[0], [2.0 / (1.0 + 1e-6)], rtol=1e-7)


def test_trl_zero_std_fraction_counts_rows_and_follows_the_batch_std():
    # Groups a: [1, 0] and b: [0, 0]. Per row (TRL): rows of b have std 0 -> 2 of 4 rows.
    batch = [
        scripted_trajectory("a", [1.0], True),
        scripted_trajectory("a", [0.0], False),
        scripted_trajectory("b", [0.0], False),
        scripted_trajectory("b", [0.0], False),
    ]
    assert GRPO(convention="trl")(batch).metrics["frac_reward_zero_std"] == 0.5
    # Scaled by the batch std (0.5 over [1, 0, 0, 0]), no row counts as zero std; A = 0.5 /
    # (0.5 + 1e-4) for the success, -0.5 / (0.5 + 1e-4) for its partner, 0 in group b.
    by_batch = GRPO(GRPOOptions("batch"), convention="trl")(batch)
    assert by_batch.metrics["frac_reward_zero_std"] == 0.0
    np.testing.assert_allclose(
        np.concatenate(by_batch.step_advantages),
        [0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0],
        rtol=1e-6,
    )


def test_statistics_over_steps_need_the_lengths():
    with pytest.raises(ValueError, match="lengths"):
        group_normalised(np.array([1.0, 0.0]), {"g": [0, 1]}, convention=CONVENTIONS["verl-agent"])


def test_a_convention_mixes_options_the_peers_do_not():
    # creditgym's guard and float64 with statistics over step rows: lengths (1, 3) give
    # verl-agent's +1.5 / -0.5, and three returns of 0.9 stay exactly 0.
    steps_with_guard = Convention(rows="steps")
    lengths = np.array([1, 3])
    values, _ = group_normalised(
        np.array([1.0, 0.0]), {"g": [0, 1]}, convention=steps_with_guard, lengths=lengths
    )
    np.testing.assert_allclose(values, [0.75 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6)])
    uniform, frac = group_normalised(
        np.full(3, 0.9), {"g": [0, 1, 2]}, convention=steps_with_guard, lengths=np.ones(3)
    )
    assert np.all(uniform == 0.0) and frac == 1.0


def test_gigpo_lengths_one_and_three_with_a_shared_first_state_by_hand():
    # A: s0 (return 1, one step). B: s0 -> b1 -> b2 (returns 0). Anchor s0 holds step returns
    # [1, 0] (B's step returns are all 0): step term +-0.5 / (sqrt(0.5) + 1e-6) for both
    # conventions (an anchor group pools steps in any convention); b1, b2 are singletons.
    batch = [
        scripted_trajectory("g", [1.0], True, observations=["s0"]),
        scripted_trajectory("g", [0.0, 0.0, 0.0], False, observations=["s0", "b1", "b2"]),
    ]
    step = HALF_OVER_STD
    creditgym = GiGPO()(batch)
    np.testing.assert_allclose(creditgym.step_advantages[0], [HALF_OVER_STD + step], rtol=1e-6)
    np.testing.assert_allclose(
        creditgym.step_advantages[1],
        [-HALF_OVER_STD - step, -HALF_OVER_STD, -HALF_OVER_STD],
        rtol=1e-6,
    )
    verl_agent = GiGPO(convention="verl-agent")(batch)
    plus, minus = LENGTHS_1_3["verl-agent"]
    np.testing.assert_allclose(verl_agent.step_advantages[0], [plus + step], rtol=1e-6)
    np.testing.assert_allclose(
        verl_agent.step_advantages[1], [minus - step, minus, minus], rtol=1e-6
    )


def test_gigpo_verl_agent_mean_norm_centres_step_rows_without_scaling():
    # algorithm.gigpo.mode=mean_norm: rows [1, 0, 0, 0] minus their mean 0.25; no state
    # repeats, so there is no step term.
    batch = [
        scripted_trajectory("g", [1.0], True, observations=["a0"]),
        scripted_trajectory("g", [0.0, 0.0, 0.0], False, observations=["b0", "b1", "b2"]),
    ]
    output = GiGPO(GiGPOOptions(normalise_by_std=False), convention="verl-agent")(batch)
    assert advantages(output) == [[0.75], [-0.25, -0.25, -0.25]]


@pytest.mark.parametrize(
    ("convention", "value", "frac_zero_std"),
    [
        ("creditgym", 0.0, 1.0),
        ("verl-agent", 1.0 / (math.sqrt(1.5) + 1e-6 / ULP_24), 1.0),
    ],
)
def test_gigpo_three_identical_returns_of_0_9_by_hand(convention, value, frac_zero_std):
    # One-step rollouts from one state: the episode term is UNIFORM_09's, and the anchor
    # group s0 holds the same three float32 returns, so its step term is the same value.
    batch = [scripted_trajectory("g", [0.9], True, observations=["s0"]) for _ in range(3)]
    output = GiGPO(convention=convention)(batch)
    np.testing.assert_allclose(np.concatenate(output.step_advantages), [2 * value] * 3, rtol=1e-5)
    assert output.metrics["frac_reward_zero_std"] == frac_zero_std


@pytest.mark.parametrize(("convention", "value"), [("creditgym", 1.0), ("verl-agent", 0.0)])
def test_gigpo_group_of_one_with_three_steps_by_hand(convention, value):
    output = GiGPO(convention=convention)(one_group([0.0, 0.0, 1.0]))
    np.testing.assert_allclose(output.step_advantages[0], [value] * 3, rtol=1e-7, atol=0)


def test_the_builder_passes_the_convention_and_refuses_one_a_module_lacks():
    grpo = build(GRPO, CreditContext(convention="trl"))
    assert grpo.convention == CONVENTIONS["trl"]
    # What `benchmarks.run` trains with: --credit-convention reaches the module.
    assert (
        build_credit("gigpo", None, convention="verl-agent").convention == CONVENTIONS["verl-agent"]
    )
    assert build(GiGPO, CreditContext()).convention == CONVENTIONS["creditgym"]
    with pytest.raises(ValueError, match="valid: creditgym, verl-agent"):
        build(GiGPO, CreditContext(convention="trl"))
    with pytest.raises(ValueError, match="convention must be one of"):
        GRPO(convention="deepspeed")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--credit", "grpo", "--credit-convention", "verll"], "Did you mean verl"),
        (["--credit", "gigpo", "--credit-convention", "trl"], "valid: creditgym, verl-agent"),
        (["--credit", "hcapo", "--credit-convention", "verl"], "valid: creditgym."),
    ],
)
def test_a_convention_the_module_lacks_is_one_line_and_exit_2(argv, expected, capsys, tmp_path):
    assert main([*argv, "--model", "tiny", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert expected in err


def test_the_convention_is_part_of_the_run_identity():
    # Hashed at its default too; any other convention is another run.
    base = RunConfig(credit="gigpo", model="tiny")
    assert resolve(base).identity["credit_convention"] == "creditgym"
    assert (
        resolve(dataclasses.replace(base, credit_convention="verl-agent")).name
        != resolve(base).name
    )


# --- verl-agent's float32 sums: returns equal in exact arithmetic, an ulp apart ---------------

# gamma 0.95; one group. A: rewards 0.5, 1, 10 on s, a1, a2; B: 10, 0.5 on s, b1. Both
# returns from s are 10.475 in exact arithmetic. Summed in float32 step by step, as
# verl-agent's `compute_step_discounted_returns` does, A's is one ulp (2^-20 at 10) below
# B's: 0.95f * 10.5 rounds to 9.974999, and 0.5 + 9.974999 to 10.474999.
ULP_AT_10 = 2.0**-20
EQUAL_RETURNS = [
    scripted_trajectory("g", [0.5, 1.0, 10.0], True, observations=["s", "a1", "a2"]),
    scripted_trajectory("g", [10.0, 0.5], True, observations=["s", "b1"]),
]


def test_verl_agent_step_returns_are_summed_in_float32_one_ulp_apart():
    a = discounted_returns_float32([0.5, 1.0, 10.0], 0.95)
    b = discounted_returns_float32([10.0, 0.5], 0.95)
    assert a.dtype == np.float32 and a.tolist()[1:] == [10.5, 10.0]
    assert float(b[0]) - float(a[0]) == ULP_AT_10
    # Rounded once from float64 the two are the same float32.
    assert np.float32(discounted_returns([0.5, 1.0, 10.0], 0.95)[0]) == np.float32(10.475)
    assert np.float32(discounted_returns([10.0, 0.5], 0.95)[0]) == np.float32(10.475)


def test_gigpo_on_two_equal_returns_an_ulp_apart_by_hand():
    # Episode term over step rows: returns 11.5 (x3) and 10.5 (x2), mean 11.1, std
    # sqrt(1.2 / 4): A^E = 0.4 / sqrt(0.3) and -0.6 / sqrt(0.3). Anchor group s: A's and B's
    # step returns, an ulp d apart; the float32 mean rounds to B's, so the deviations are
    # (-d, 0), the std (ddof 1) is d, and A's step term is -d / (d + 1e-6) = -0.488
    # (verl-agent's own functions give A's first step 0.2422; the episode term's float32
    # mean and std of 11.1 and sqrt(0.3) leave 1e-6 relative). creditgym sums in float64:
    # the two returns are equal, the guard zeroes the step term, and its episode term is
    # over trajectories (+-0.7071).
    std = math.sqrt(0.3)
    plus, minus = 0.4 / (std + 1e-6), -0.6 / (std + 1e-6)
    step = -ULP_AT_10 / (ULP_AT_10 + 1e-6)
    verl_agent = GiGPO(convention="verl-agent")(EQUAL_RETURNS)
    np.testing.assert_allclose(verl_agent.step_advantages[0], [plus + step, plus, plus], rtol=1e-5)
    np.testing.assert_allclose(verl_agent.step_advantages[1], [minus, minus], rtol=1e-5)
    assert verl_agent.step_advantages[0][0] == pytest.approx(0.2422, abs=1e-4)
    creditgym = GiGPO()(EQUAL_RETURNS)
    np.testing.assert_allclose(
        np.concatenate(creditgym.step_advantages), [HALF_OVER_STD] * 3 + [-HALF_OVER_STD] * 2
    )


def test_a_return_summed_in_float32_keeps_its_rounding_and_only_verl_agent_sums_so():
    # 0.1 + 0.6 in float32 is 0.70000005, one ulp above float32(0.7): two returns equal
    # in exact arithmetic are unequal in verl-agent's float32 `episode_rewards`.
    batch = [scripted_trajectory("g", [0.1, 0.6], True), scripted_trajectory("g", [0.0, 0.7], True)]
    summed = episode_returns(batch, CONVENTIONS["verl-agent"])
    assert summed[0] - summed[1] == ULP_24
    assert episode_returns(batch, CONVENTIONS["verl"]).tolist() == [0.7, 0.7]
    assert [name for name, c in CONVENTIONS.items() if c.float32_sums] == ["verl-agent"]
    # No guard: the ulp d becomes an advantage. Step rows [a, a, b, b] with a = b + d: the
    # float32 mean rounds to a, the deviations are (0, 0, -d, -d), the std (ddof 1)
    # d sqrt(2/3), so B gets -d / (d sqrt(2/3) + 1e-6) = -0.057 and A 0. creditgym's guard
    # sees one return and gives 0 to both.
    verl_agent = GRPO(convention="verl-agent")(batch).step_advantages
    expected_b = -ULP_24 / (ULP_24 * math.sqrt(2 / 3) + 1e-6)
    np.testing.assert_allclose(
        np.concatenate(verl_agent), [0, 0, expected_b, expected_b], rtol=1e-5
    )
    assert np.all(np.concatenate(GRPO()(batch).step_advantages) == 0.0)
