"""Envs that describe themselves as a finite MDP (`envs.mdp`) agree with what they sample.

For KeyDoor and Umbrella at small sizes: every step of random episodes is one of the
outcomes `transitions` lists, in the state `info` names, with the observation, task and
commands `view` gives; the reachable states enumerate to a finite set of the size the
env's docstring states; the uniform policy's value by dynamic programming over the MDP
equals the env's Monte-Carlo return; and with no history the LLM prompt is a function of
`view(s)` alone.
"""

from __future__ import annotations

import json
import math
import random
from collections import deque
from collections.abc import Callable
from functools import cache

import gymnasium
import pytest

from creditgym import envs  # noqa: F401  (registers the creditgym/ ids)
from creditgym.agents.base import RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.agents.prompts import build_messages, messages_for_step
from creditgym.envs.keydoor.env import KeyDoorEnv
from creditgym.envs.mdp import FiniteMDP
from creditgym.envs.umbrella.env import UmbrellaEnv

# (name, env factory, number of states reachable with admissible commands, hand-counted
# from the layouts in the MDP classes' docstrings).
CASES: list[tuple[str, Callable[[], gymnasium.Env], int]] = [
    # Room 1 + (orchard 3 + door 2 turns) x 3 things carried.
    ("keydoor-low", lambda: KeyDoorEnv(delay=3, num_objects=2, max_steps=6), 1 + 5 * 3),
    # Room 1 + (orchard 2 + door 3) x 4 things.
    ("keydoor-high", lambda: KeyDoorEnv(delay=2, variance="high"), 1 + 5 * 4),
    # The limit (3) cuts the orchard (delay 4): room 1 + 2 orchard turns x 2 things.
    ("keydoor-truncated", lambda: KeyDoorEnv(delay=4, num_objects=1, max_steps=3), 1 + 2 * 2),
    # No orchard: room 1 + 4 door turns x 4 things.
    ("keydoor-no-delay", lambda: KeyDoorEnv(delay=0), 1 + 3 * 4),
    # Home 2 * 4 + walking 3 steps x 2 forecasts x 2 umbrella x 4 fact patterns.
    ("umbrella", lambda: UmbrellaEnv(length=4, num_distractors=2), 8 + 3 * 16),
    ("umbrella-one-step", lambda: UmbrellaEnv(length=1, num_distractors=1), 4),
    # The limit (3) cuts the walk (length 6): home 2 + 2 steps x 4.
    ("umbrella-truncated", lambda: UmbrellaEnv(length=6, num_distractors=0, max_steps=3), 2 + 8),
    # Options that change text or draws, never the layout: room 1 + 4 turns x 2 things.
    (
        "keydoor-causal-feedback",
        lambda: KeyDoorEnv(delay=1, num_objects=1, causal_feedback=True),
        9,
    ),
    # The forecast in every view, drawn per replica: home 4 + 3 steps x 8, as without.
    (
        "umbrella-forecast-visible-per-replica",
        lambda: UmbrellaEnv(
            length=4, num_distractors=1, forecast_visible=True, forecast_per_replica=True
        ),
        4 + 3 * 8,
    ),
]
CASE_IDS = [name for name, _, _ in CASES]
EPISODES = 300
GARBAGE = ("", "   ", "open the window", "TAKE THE KEY!", "\x00\ufffd", "take the")
PROBABILITY_TOLERANCE = 1e-12  # sums of at most 2 ** 13 dyadic probabilities: exact in floats


def outcome_key(transition) -> tuple:
    return (transition.next_state, transition.reward, transition.terminated, transition.truncated)


def reachable_states(mdp: FiniteMDP) -> set[str]:
    """Breadth-first closure of the initial states under every admissible action."""
    seen = {state for _probability, state in mdp.initial_states()}
    frontier = deque(seen)
    while frontier:
        state = frontier.popleft()
        for action in mdp.actions(state):
            for transition in mdp.transitions(state, action):
                if transition.next_state is not None and transition.next_state not in seen:
                    seen.add(transition.next_state)
                    frontier.append(transition.next_state)
    return seen


def uniform_policy_value(mdp: FiniteMDP) -> tuple[float, float]:
    """(expected return, success probability) of the uniform policy over admissible
    commands, by dynamic programming; success = the episode ends terminated with
    positive reward on its last step (both envs' success rule)."""

    @cache
    def value(state: str) -> tuple[float, float]:
        actions = mdp.actions(state)
        total_return = total_success = 0.0
        for action in actions:
            for t in mdp.transitions(state, action):
                later_return, later_success = (
                    (0.0, 0.0) if t.next_state is None else value(t.next_state)
                )
                won = 1.0 if t.next_state is None and t.terminated and t.reward > 0 else 0.0
                total_return += t.probability * (t.reward + later_return) / len(actions)
                total_success += t.probability * (won + later_success) / len(actions)
        return total_return, total_success

    pairs = [(p, value(s)) for p, s in mdp.initial_states()]
    return sum(p * v[0] for p, v in pairs), sum(p * v[1] for p, v in pairs)


def assert_view_matches(mdp: FiniteMDP, state: str, observation: str, info: dict) -> None:
    view = mdp.view(state)
    assert view.observation == observation
    assert view.task == info["task"]
    assert list(view.admissible_commands) == info["admissible_commands"]
    assert view.admissible_commands == mdp.actions(state)


@pytest.mark.parametrize(("name", "make", "num_states"), CASES, ids=CASE_IDS)
def test_every_sampled_step_is_a_listed_transition_seen_as_view_shows(
    name: str, make: Callable[[], gymnasium.Env], num_states: int
) -> None:
    env = make()
    chooser = random.Random(0)
    for seed in range(EPISODES):
        observation, info = env.reset(seed=seed)
        mdp = env.unwrapped.finite_mdp()
        assert isinstance(mdp, FiniteMDP)
        state = info["mdp_state"]
        assert state in {s for _p, s in mdp.initial_states()}
        done = False
        while not done:
            assert_view_matches(mdp, state, observation, info)
            action = chooser.choice(info["admissible_commands"])
            observation, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            json.dumps(info)  # ids and labels travel in info: JSON-serialisable
            assert info["mdp_state"] == state
            transitions = mdp.transitions(state, action)
            assert abs(sum(t.probability for t in transitions) - 1.0) < PROBABILITY_TOLERANCE
            assert all(0.0 < t.probability <= 1.0 for t in transitions)
            sampled = (info["mdp_next_state"], reward, terminated, truncated)
            assert sampled in [outcome_key(t) for t in transitions]
            state = info["mdp_next_state"]
            assert (state is None) == done


@pytest.mark.parametrize(("name", "make", "num_states"), CASES, ids=CASE_IDS)
def test_inadmissible_actions_lead_to_states_the_mdp_describes(
    name: str, make: Callable[[], gymnasium.Env], num_states: int
) -> None:
    env = make()
    chooser = random.Random(1)
    for seed in range(100):
        observation, info = env.reset(seed=seed)
        mdp = env.unwrapped.finite_mdp()
        done = False
        while not done:
            commands = info["admissible_commands"]
            action = chooser.choice([*GARBAGE, None, 7, *commands])
            state = info["mdp_state"] if "mdp_next_state" not in info else info["mdp_next_state"]
            observation, _reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            assert info["mdp_state"] == state
            if not done:
                assert_view_matches(mdp, info["mdp_next_state"], observation, info)


@pytest.mark.parametrize(("name", "make", "num_states"), CASES, ids=CASE_IDS)
def test_reachable_states_are_finite_and_as_many_as_the_layout_says(
    name: str, make: Callable[[], gymnasium.Env], num_states: int
) -> None:
    env = make()
    _observation, info = env.reset(seed=0)
    task = {"task_id": info["task_id"]}
    mdp = env.unwrapped.finite_mdp()
    states = reachable_states(mdp)
    assert len(states) == num_states
    for state in states:
        assert mdp.view(state).admissible_commands == mdp.actions(state)
        for action in mdp.actions(state):
            transitions = mdp.transitions(state, action)
            assert abs(sum(t.probability for t in transitions) - 1.0) < PROBABILITY_TOLERANCE
            assert len({outcome_key(t) for t in transitions}) == len(transitions), "merged"
    assert math.isclose(sum(p for p, _s in mdp.initial_states()), 1.0)
    # Every state random play of the same task visits is among them.
    chooser = random.Random(2)
    for seed in range(50):
        _observation, info = env.reset(seed=seed, options=task)
        while info["admissible_commands"]:
            _o, _r, _te, _tr, info = env.step(chooser.choice(info["admissible_commands"]))
            assert info["mdp_state"] in states
            assert info["mdp_next_state"] is None or info["mdp_next_state"] in states


@pytest.mark.parametrize(("name", "make", "num_states"), CASES, ids=CASE_IDS)
def test_uniform_policy_value_by_dynamic_programming_matches_sampled_returns(
    name: str, make: Callable[[], gymnasium.Env], num_states: int
) -> None:
    env = make()
    env.reset(seed=0)
    expected_return, expected_success = uniform_policy_value(env.unwrapped.finite_mdp())
    agent = RandomAgent(seed=0)
    episodes = [play_episode(env, agent, seed=seed) for seed in range(2000)]
    returns = [t.total_return for t in episodes]
    mean = sum(returns) / len(returns)
    spread = math.sqrt(sum((r - mean) ** 2 for r in returns) / (len(returns) - 1))
    # 4 standard errors: a wrong probability or reward moves the mean by far more.
    assert abs(mean - expected_return) <= 4 * spread / math.sqrt(len(returns)) + 1e-9
    success = sum(t.success for t in episodes) / len(episodes)
    assert abs(success - expected_success) <= 4 * math.sqrt(0.25 / len(episodes))


@pytest.mark.parametrize("env_id", ["creditgym/KeyDoor-v0", "creditgym/Umbrella-v0"])
def test_prompt_without_history_is_a_function_of_the_view(env_id: str) -> None:
    env = gymnasium.make(env_id)
    agent = RandomAgent(seed=3)
    for seed in range(20):
        trajectory = play_episode(env, agent, seed=seed)
        mdp = env.unwrapped.finite_mdp()
        for index, step in enumerate(trajectory.steps):
            view = mdp.view(step.info["mdp_state"])
            assert messages_for_step(trajectory, index, history_len=0) == build_messages(
                env_id, view.task, [], view.observation, view.admissible_commands
            )


@pytest.mark.parametrize("make", [KeyDoorEnv, UmbrellaEnv])
def test_finite_mdp_before_reset_is_an_error(make: Callable[[], gymnasium.Env]) -> None:
    with pytest.raises(RuntimeError, match="before reset"):
        make().finite_mdp()


@pytest.mark.parametrize(("name", "make", "num_states"), CASES[:1] + CASES[4:5], ids=["k", "u"])
def test_unknown_state_ids_and_actions_are_rejected(
    name: str, make: Callable[[], gymnasium.Env], num_states: int
) -> None:
    env = make()
    _observation, info = env.reset(seed=0)
    mdp = env.unwrapped.finite_mdp()
    start = info["mdp_state"]
    # Malformed, out of range, and a non-canonical spelling of the start state itself.
    for bad in (
        "",
        "t=99",
        start + "|extra",
        start.replace("0", "9"),
        start.replace("t=0", "t=00"),
    ):
        with pytest.raises(ValueError):
            mdp.view(bad)
    with pytest.raises(ValueError, match="not admissible"):
        mdp.transitions(info["mdp_state"], "dance")


def test_uniform_policy_value_worked_out_by_hand() -> None:
    # KeyDoor, one distractor, delay 1, high variance, limit 3: the room picks the key
    # with 1/2; the orchard eats with 1/2 an apple worth (1 + 10) / 2; the door (one
    # turn, t = 2) opens with 1/2. Return 1/2 * 5.5 + 1/2 * 1/2 * 1 = 3.0; success 1/4.
    env = KeyDoorEnv(delay=1, variance="high", num_objects=1, max_steps=3)
    env.reset(seed=0)
    assert uniform_policy_value(env.finite_mdp()) == (3.0, 0.25)
    # Umbrella: coins of mean 0 and a final +-1 right half the time: return 0, success 1/2.
    env = UmbrellaEnv(length=3, num_distractors=1)
    env.reset(seed=0)
    assert uniform_policy_value(env.finite_mdp()) == (0.0, 0.5)
