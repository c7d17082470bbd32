"""Exact hindsight (credit.exact_hindsight) against hand values, Bayes' rule and the trie.

The hand-worked chain (`RiskyChain`, also used by tests/test_credit_oracle.py and
tests/test_credit_hca.py):

    s0 --risky (pi 0.6)--> s1, reward 0
    s0 --safe  (pi 0.4)--> end, reward 0.5, failure
    s1 --go    (pi 0.5)--> end: reward 1, success (p 0.5) | reward 0, failure (p 0.5)
    s1 --stop  (pi 0.5)--> end, reward 0, failure
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch

from creditgym import envs  # noqa: F401  (registers the creditgym envs)
from creditgym.agents.constrained import action_token_sequences
from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import Step, Trajectory
from creditgym.credit.exact_hindsight import (
    DIVERGENCE_TOL,
    OUTCOMES,
    exact_hindsight,
    exact_step_logprobs,
    step_trie,
    trie_conditionals,
    trie_divergences,
)
from creditgym.credit.exact_source import EXACT_OPTIONS, HPRLVRExactOptions
from creditgym.credit.policy_evaluation import evaluate_policy, reachable_states
from creditgym.envs.mdp import StateView, Transition
from creditgym.measure.ground_truth import TaskMDPs, llm_table_source
from creditgym.models.registry import build_small

KEYDOOR = "creditgym/KeyDoor-v0"
UMBRELLA = "creditgym/Umbrella-v0"


class RiskyChain:
    """The hand-worked chain of the module docstring (`envs.mdp.FiniteMDP`)."""

    ACTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"s0": ("risky", "safe"), "s1": ("go", "stop")}
    TRANSITIONS: ClassVar[dict[tuple[str, str], tuple[Transition, ...]]] = {
        ("s0", "risky"): (Transition(1.0, "s1", 0.0),),
        ("s0", "safe"): (Transition(1.0, None, 0.5, terminated=True, success=False),),
        ("s1", "go"): (
            Transition(0.5, None, 1.0, terminated=True, success=True),
            Transition(0.5, None, 0.0, terminated=True, success=False),
        ),
        ("s1", "stop"): (Transition(1.0, None, 0.0, terminated=True, success=False),),
    }

    def initial_states(self):
        return ((1.0, "s0"),)

    def actions(self, state):
        return self.ACTIONS[state]

    def view(self, state):
        return StateView(f"You are at {state}.", "Reach the goal.", self.ACTIONS[state])

    def transitions(self, state, action):
        return self.TRANSITIONS[(state, action)]


CHAIN_POLICY = {"s0": {"risky": 0.6, "safe": 0.4}, "s1": {"go": 0.5, "stop": 0.5}}


def chain_trajectory(path, task_id: str = "chain") -> Trajectory:
    """A sampled chain episode: `path` is [(state, action, reward)], success if it paid 1."""
    steps = tuple(
        Step(
            observation=f"You are at {state}.",
            action=action,
            response_text=action,
            reward=reward,
            terminated=t == len(path) - 1,
            info={"mdp_state": state},
        )
        for t, (state, action, reward) in enumerate(path)
    )
    return Trajectory(
        env_id="chain",
        task_id=task_id,
        seed=0,
        group_id="g",
        task="Reach the goal.",
        initial_observation="You are at s0.",
        steps=steps,
        success=any(reward == 1.0 for _, _, reward in path),
    )


def random_table(mdp, seed: int) -> dict[str, dict[str, float]]:
    """A policy table far from uniform (Dirichlet(0.5) rows), reproducible per seed."""
    rng = np.random.default_rng(seed)
    table = {}
    for state in reachable_states(mdp):
        actions = mdp.actions(state)
        row = rng.dirichlet(np.full(len(actions), 0.5))
        table[state] = dict(zip(actions, row.tolist(), strict=True))
    return table


def keydoor_mdp(**kwargs):
    return TaskMDPs(KEYDOOR, kwargs)("keydoor-3")


def test_success_hindsight_on_the_chain_matches_hand_values():
    exact = exact_hindsight(RiskyChain(), CHAIN_POLICY, "success")
    # P(Z=1 | s1, go) = 0.5, P(Z=1 | s1, stop) = 0: P(Z=1 | s1) = 0.25, P(Z=0 | s1) = 0.75.
    assert exact.probability("s1", 1.0) == pytest.approx(0.25)
    assert exact.probability("s1", 0.0) == pytest.approx(0.75)
    # h(go | s1, 1) = 0.5 * 0.5 / 0.25 = 1; h(go | s1, 0) = 0.5 * 0.5 / 0.75 = 1/3.
    assert exact.hindsight_row("s1", 1.0) == pytest.approx({"go": 1.0, "stop": 0.0})
    assert exact.hindsight_row("s1", 0.0) == pytest.approx({"go": 1 / 3, "stop": 2 / 3})
    # P(Z=1 | s0) = 0.6 * 0.25 = 0.15; h(risky | s0, 0) = 0.6 * 0.75 / 0.85 = 9/17.
    assert exact.probability("s0", 1.0) == pytest.approx(0.15)
    assert exact.hindsight_row("s0", 1.0) == pytest.approx({"risky": 1.0, "safe": 0.0})
    assert exact.hindsight_row("s0", 0.0) == pytest.approx({"risky": 9 / 17, "safe": 8 / 17})


def test_return_hindsight_on_the_chain_matches_hand_values():
    exact = exact_hindsight(RiskyChain(), CHAIN_POLICY, "return")
    # From s0: 1 w.p. 0.6 * 0.25, 0 w.p. 0.6 * 0.75, 0.5 w.p. 0.4 (safe).
    assert exact.state_outcomes["s0"] == pytest.approx({1.0: 0.15, 0.0: 0.45, 0.5: 0.4})
    assert exact.action_outcomes["s0"]["risky"] == pytest.approx({1.0: 0.25, 0.0: 0.75})
    assert exact.hindsight_row("s0", 0.5) == pytest.approx({"risky": 0.0, "safe": 1.0})
    assert exact.hindsight_row("s0", 0.0) == pytest.approx({"risky": 1.0, "safe": 0.0})
    # pi / h = P(z | s) / P(z | s, a): 0.15 / 0.25 for the risky road to the goal.
    assert exact.ratio("s0", "risky", 1.0) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="cannot follow 'risky'"):
        exact.ratio("s0", "risky", 0.5)
    with pytest.raises(ValueError, match="probability 0 from state 's1'"):
        exact.hindsight("s1", "go", 0.5)


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
@pytest.mark.parametrize("variance", ["low", "high"])
def test_bayes_consistency_on_keydoor(outcome, variance):
    mdp = keydoor_mdp(delay=2, variance=variance)
    table = random_table(mdp, seed=1)
    exact = exact_hindsight(mdp, table, outcome)
    for state in exact.states:
        assert sum(exact.state_outcomes[state].values()) == pytest.approx(1.0)
        mixed = dict.fromkeys(table[state], 0.0)
        for z, p_z in exact.state_outcomes[state].items():
            row = exact.hindsight_row(state, z)
            assert sum(row.values()) == pytest.approx(1.0)
            for action, h in row.items():
                mixed[action] += p_z * h
        # sum_z P(z | s) h(a | s, z) = pi(a | s).
        assert mixed == pytest.approx(table[state], abs=1e-12)


def test_outcome_laws_have_the_values_of_dynamic_programming():
    mdp = keydoor_mdp(delay=2, variance="high")
    table = random_table(mdp, seed=2)
    truth = evaluate_policy(mdp, table)
    returns = exact_hindsight(mdp, table, "return")
    success = exact_hindsight(mdp, table, "success")

    class SuccessOnly:
        """KeyDoor paying 1 on success and nothing else: Q is P(success | s, a)."""

        def __getattr__(self, name):
            return getattr(mdp, name)

        def transitions(self, state, action):
            return tuple(
                Transition(t.probability, t.next_state, float(bool(t.success)), t.terminated)
                for t in mdp.transitions(state, action)
            )

    success_truth = evaluate_policy(SuccessOnly(), table)
    for state in truth.states:
        for action in table[state]:
            law = returns.action_outcomes[state][action]
            # E[return-to-go | s, a] is Q(s, a).
            assert sum(z * p for z, p in law.items()) == pytest.approx(
                truth.q_values[state][action]
            )
            assert success.probability(state, 1.0, action) == pytest.approx(
                success_truth.q_values[state][action]
            )


def test_trie_conditionals_on_a_hand_trie():
    sequences = [[1, 2, 9], [1, 3, 9], [4, 9]]
    conditionals = trie_conditionals(sequences, [0.2, 0.3, 0.5])
    # Prefix [1] holds 0.5 of the mass, [1, 2] 0.2 of it: 0.2 / 0.5 = 0.4.
    np.testing.assert_allclose(conditionals[0], [0.5, 0.4, 1.0])
    np.testing.assert_allclose(conditionals[1], [0.5, 0.6, 1.0])
    np.testing.assert_allclose(conditionals[2], [0.5, 1.0])
    # A prefix no mass reaches gives 0 along its path, so the product is still q.
    np.testing.assert_allclose(trie_conditionals(sequences, [0.0, 0.0, 1.0])[0], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="is a prefix of another"):
        trie_conditionals([[1, 2], [1, 2, 3]], [0.5, 0.5])


def test_trie_divergences_on_a_hand_trie():
    sequences = [[1, 2, 9], [1, 3, 9], [4, 9]]
    policy, hindsight = [0.2, 0.3, 0.5], [0.5, 0.5, 0.0]
    divergences = trie_divergences(sequences, policy, hindsight, taken=0)
    # Root, children {1, 4}: (0.5, 0.5) against (1, 0), m = (0.75, 0.25):
    # KL = 0.5 ln(2/3) + 0.5 ln 2 = 0.143841 and ln(4/3) = 0.287682, JS = 0.215762 nats,
    # 0.311278 bits. Node [1], children {2, 3}: (0.4, 0.6) against (0.5, 0.5): 0.0072992
    # bits. Node [1, 2] has one child: both put all their mass on it, 0.
    np.testing.assert_allclose(divergences, [0.311278, 0.0072992, 0.0], atol=1e-6)
    # Identical distributions diverge nowhere; no mass at a node (q on [4, 9]) counts 0.
    np.testing.assert_array_equal(trie_divergences(sequences, policy, policy, taken=1), 0.0)
    np.testing.assert_array_equal(trie_divergences(sequences, policy, hindsight, taken=2)[1:], 0.0)


def test_trie_divergences_below_the_tolerance_are_exactly_zero_never_negative():
    sequences = [[1, 2, 9], [1, 3, 9], [4, 9]]
    policy = [0.39546198954297845, 0.5930180594914135, 0.011519950965607977]
    # The same distribution up to the last bit (rescaled and renormalised): float64 gives
    # a divergence of rounding noise, of either sign.
    hindsight = [0.3954619895429785, 0.5930180594914136, 0.011519950965607977]
    noisy = trie_divergences(sequences, policy, hindsight, taken=0)
    assert noisy[0] < 0 < noisy[1] < DIVERGENCE_TOL
    mended = trie_divergences(sequences, policy, hindsight, taken=0, tol=DIVERGENCE_TOL)
    np.testing.assert_array_equal(mended, 0.0)
    assert not np.signbit(mended).any()
    # A divergence above the tolerance is kept as it is (the hand trie's values above).
    far = trie_divergences(sequences, [0.2, 0.3, 0.5], [0.5, 0.5, 0.0], 0, DIVERGENCE_TOL)
    np.testing.assert_allclose(far, [0.311278, 0.0072992, 0.0], atol=1e-6)


def test_hp_rlvr_exact_keeps_the_committed_arithmetic_unless_told_the_tolerance():
    assert HPRLVRExactOptions().divergence_tol == 0.0
    assert EXACT_OPTIONS["hp_rlvr"].divergence_tol == DIVERGENCE_TOL
    with pytest.raises(ValueError, match="divergence_tol must be >= 0"):
        HPRLVRExactOptions(divergence_tol=-1.0)


def test_token_conditionals_of_exact_hindsight_multiply_back_to_the_command():
    torch.set_num_threads(1)
    small = build_small()
    agent = LLMAgent(small, constrained=True, history_len=0, max_new_tokens=8)
    mdp = keydoor_mdp(delay=1)
    table = llm_table_source(agent, KEYDOOR)(mdp)
    exact = exact_hindsight(mdp, table, "return")
    checked = 0
    for state in exact.states:
        commands = mdp.actions(state)
        sequences = action_token_sequences(small.tokenizer, commands)
        for z in exact.state_outcomes[state]:
            row = exact.hindsight_row(state, z)
            q = [row[command] for command in commands]
            for conditionals, probability in zip(trie_conditionals(sequences, q), q, strict=True):
                assert np.all((conditionals >= 0) & (conditionals <= 1 + 1e-12))
                assert np.prod(conditionals) == pytest.approx(probability, abs=1e-12)
                checked += 1
    assert checked > 20


def test_success_needs_an_mdp_that_states_it():
    class Silent(RiskyChain):
        def transitions(self, state, action):
            return tuple(
                Transition(t.probability, t.next_state, t.reward, t.terminated)
                for t in super().transitions(state, action)
            )

    with pytest.raises(ValueError, match="does not describe its success verdict"):
        exact_hindsight(Silent(), CHAIN_POLICY, "success")
    assert exact_hindsight(Silent(), CHAIN_POLICY, "return").probability("s0", 0.5) == 0.4
    with pytest.raises(ValueError, match="unknown outcome 'reward'"):
        exact_hindsight(RiskyChain(), CHAIN_POLICY, "reward")


def test_the_exact_source_is_refused_in_one_line_on_an_env_that_is_no_finite_mdp():
    with pytest.raises(ValueError, match=r"SysDiag-v0 does not describe itself as a finite MDP"):
        TaskMDPs("creditgym/SysDiag-v0", {})
    mdps = TaskMDPs(KEYDOOR, {"delay": 1})
    assert mdps("keydoor-5") is mdps("keydoor-5")  # built once per task
    env = gym.make(KEYDOOR, delay=1)
    env.reset(options={"task_id": "keydoor-5"})
    expected = env.unwrapped.finite_mdp()
    state = reachable_states(expected)[0]
    assert mdps("keydoor-5").view(state) == expected.view(state)


def test_umbrella_success_hindsight_names_the_first_choice():
    # The first choice alone decides success, so given success the hindsight at home is
    # certain: the umbrella exactly when rain is forecast; given failure, the other one.
    mdp = TaskMDPs(UMBRELLA, {"length": 3, "num_distractors": 1})("umbrella-2")
    table = random_table(mdp, seed=5)
    exact = exact_hindsight(mdp, table, "success")
    homes = [p_s[1] for p_s in mdp.initial_states()]
    for home in homes:
        take, leave = mdp.actions(home)
        right = take if "forecast=rain" in home else leave
        wrong = leave if right == take else take
        assert exact.probability(home, 1.0) == pytest.approx(table[home][right])
        assert exact.hindsight(home, right, 1.0) == pytest.approx(1.0)
        assert exact.hindsight(home, wrong, 0.0) == pytest.approx(1.0)
    later = [s for s in exact.states if s not in homes]
    # After home, nothing the agent does changes the verdict: hindsight is the policy.
    for state in later:
        for z in exact.state_outcomes[state]:
            assert exact.hindsight_row(state, z) == pytest.approx(table[state])


def test_exact_step_logprobs_multiply_back_and_verdict_rows_are_bayes_consistent():
    torch.set_num_threads(1)
    small = build_small()
    agent = LLMAgent(small, constrained=True, history_len=0, max_new_tokens=8, seed=2)
    mdps = TaskMDPs(KEYDOOR, {"delay": 1})
    trajectories, _ = collect(
        KEYDOOR, agent, [21, 22], group_size=4, num_envs=8, env_kwargs={"delay": 1}, progress=False
    )
    tables = llm_table_source(agent, KEYDOOR)
    checked = 0
    for trajectory in trajectories:
        mdp = mdps(trajectory.task_id)
        law = exact_hindsight(mdp, tables(mdp), "return")
        success = trajectory.total_return > 0  # the channel's verdict (credit.base.verdict)
        for t, step in enumerate(trajectory.steps):
            state = step.info["mdp_state"]
            commands = list(law.policy[state])
            spelled = dict(
                zip(commands, action_token_sequences(small.tokenizer, commands), strict=True)
            )
            hindsight, policy = exact_step_logprobs(step_trie(trajectory, t, spelled, law, success))
            past = sum(s.reward for s in trajectory.steps[:t])
            row = law.verdict_row(state, past, success)
            assert np.exp(hindsight.sum()) == pytest.approx(row[step.action], rel=1e-9)
            assert np.exp(policy.sum()) == pytest.approx(law.policy[state][step.action])
            # Bayes over the two verdicts: sum_v P(v | s, past) h(a | s, v) = pi(a | s).
            mixed = dict.fromkeys(commands, 0.0)
            for verdict in (True, False):
                p_v = sum(
                    law.policy[state][a] * law.probability(state, z, a)
                    for a in commands
                    for z in law.action_outcomes[state][a]
                    if (past + z > 0) == verdict
                )
                if p_v > 0:
                    for a, h in law.verdict_row(state, past, verdict).items():
                        mixed[a] += p_v * h
            assert mixed == pytest.approx(law.policy[state])
            checked += 1
    assert checked >= 16
    step, mdp = trajectories[0].steps[0], mdps(trajectories[0].task_id)
    commands = mdp.actions(step.info["mdp_state"])
    spelled = dict(zip(commands, action_token_sequences(small.tokenizer, commands), strict=True))
    other = next(c for c in commands if c != step.action)
    wrong = {**spelled, step.action: spelled[other]}
    with pytest.raises(ValueError, match="not the constrained sequence"):
        step_trie(trajectories[0], 0, wrong, exact_hindsight(mdp, tables(mdp), "return"), True)
