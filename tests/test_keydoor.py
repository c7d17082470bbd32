"""KeyDoor: rewards and key-step labels worked out by hand, the expert always wins, random
play succeeds at its analytic rate, apples pay what the variance setting says, and any
action (garbage, non-strings) is answered without an exception."""

from __future__ import annotations

import math
import random
from functools import partial

import gymnasium
import pytest

from creditgym import envs  # noqa: F401  (registers creditgym/KeyDoor-v0)
from creditgym.agents.base import ExpertAgent, RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.credit.policy_evaluation import evaluate_policy, reachable_states
from creditgym.envs import ENVS
from creditgym.envs.keydoor.dynamics import (
    APPLE_REWARDS,
    DISGUISES,
    DOOR_REWARD,
    EAT,
    KEY,
    OPEN,
    WAIT,
)
from creditgym.envs.keydoor.env import KeyDoorEnv
from creditgym.envs.keydoor.options import KeyDoorOptions
from creditgym.measure.ground_truth import OutcomeMDP

DEFAULT_DELAY = KeyDoorOptions().delay

SEEDS = range(200)


def take(thing: str) -> str:
    return f"take the {thing}"


def distractor(info: dict) -> str:
    """A table thing other than the key, read off the admissible commands."""
    return next(c for c in info["admissible_commands"] if c != take(KEY)).removeprefix("take the ")


def play(env: KeyDoorEnv, actions: list[str], seed: int = 0) -> list[tuple]:
    """(reward, terminated, truncated, info) of each of `actions` after a reset."""
    env.reset(seed=seed)
    return [env.step(action)[1:] for action in actions]


@pytest.mark.parametrize("variance", sorted(APPLE_REWARDS))
def test_expert_wins_every_seed_within_the_registered_limit(variance: str) -> None:
    limit = ENVS["creditgym/KeyDoor-v0"].max_episode_steps
    env = gymnasium.make("creditgym/KeyDoor-v0", variance=variance, max_steps=limit)
    for seed in SEEDS:
        trajectory = play_episode(env, ExpertAgent(), seed=seed)
        assert trajectory.success, trajectory.feedback
        assert len(trajectory.steps) == DEFAULT_DELAY + 2
        assert [s.action for s in trajectory.steps] == [take(KEY), *[EAT] * DEFAULT_DELAY, OPEN]
        assert trajectory.steps[-1].reward == DOOR_REWARD
        assert all(s.reward in APPLE_REWARDS[variance] for s in trajectory.steps[1:-1])
        assert [s.info["key_step"] for s in trajectory.steps] == [
            True,
            *[False] * DEFAULT_DELAY,
            True,
        ]


def test_key_then_waiting_pays_only_the_door() -> None:
    env = KeyDoorEnv(delay=3)
    steps = play(env, [take(KEY), WAIT, WAIT, WAIT, OPEN])
    assert [reward for reward, *_ in steps] == [0.0, 0.0, 0.0, 0.0, DOOR_REWARD]
    assert [info["key_step"] for *_, info in steps] == [True, False, False, False, True]
    assert [info["phase"] for *_, info in steps[:-1]] == ["orchard"] * 3 + ["door"]
    _reward, terminated, truncated, info = steps[-1]
    assert terminated and not truncated and info["success"]
    assert info["admissible_commands"] == [] and "expert_action" not in info
    assert info["feedback"] == "The door opened and you stepped through: solved."


def test_a_distractor_makes_the_door_pay_nothing_and_no_step_is_key() -> None:
    env = KeyDoorEnv(delay=2)
    _observation, info = env.reset(seed=4)
    thing = distractor(info)
    steps = [env.step(action)[1:] for action in (take(thing), WAIT, WAIT, OPEN)]
    reward, terminated, truncated, info = steps[-1]
    assert reward == 0.0 and terminated and not truncated and not info["success"]
    assert not any(step_info["key_step"] for *_, step_info in steps)
    # The feedback states the verdict, not what should have been taken.
    assert info["feedback"] == "The door stayed locked: not solved."


def test_low_variance_apples_pay_one_each() -> None:
    env = KeyDoorEnv(delay=5, variance="low")
    steps = play(env, [take(KEY), *[EAT] * 5, OPEN])
    assert sum(reward for reward, *_ in steps) == 5 * 1.0 + DOOR_REWARD


def test_high_variance_apples_pay_one_or_ten_with_equal_chance() -> None:
    env = KeyDoorEnv(delay=20, variance="high")
    apples = []
    for seed in range(100):
        apples += [reward for reward, *_ in play(env, [take(KEY), *[EAT] * 20], seed=seed)[1:]]
    assert set(apples) == {1.0, 10.0}
    share_of_tens = apples.count(10.0) / len(apples)
    assert abs(share_of_tens - 0.5) < 4 * math.sqrt(0.25 / len(apples))


def test_apples_do_not_depend_on_the_room() -> None:
    # The same seed gives the same apple draws whatever was taken in the room: phase 1
    # does not touch phase 2's randomness.
    env = KeyDoorEnv(delay=6, variance="high")
    _observation, info = env.reset(seed=9)
    thing = distractor(info)
    with_key = [r for r, *_ in play(env, [take(KEY), *[EAT] * 6], seed=9)]
    without = [r for r, *_ in play(env, [take(thing), *[EAT] * 6], seed=9)]
    assert with_key[1:] == without[1:]


def test_waiting_at_the_door_runs_into_the_step_limit() -> None:
    env = KeyDoorEnv(delay=1, max_steps=4)
    steps = play(env, [take(KEY), EAT, WAIT, WAIT])
    _reward, terminated, truncated, info = steps[-1]
    assert truncated and not terminated and not info["success"]
    assert info["feedback"] == "Step limit (4) reached before the door was opened: not solved."
    assert info["mdp_next_state"] is None and info["steps"] == 4


def test_random_agent_succeeds_at_its_analytic_rate() -> None:
    # 1/(n + 1) to take the key, then the door opens within m = 3 turns with probability
    # 1 - (1/2)^3 (two commands there): 1/4 * 7/8 = 7/32 with the defaults.
    env = gymnasium.make("creditgym/KeyDoor-v0")
    agent = RandomAgent(seed=0)
    episodes = 4000
    wins = sum(play_episode(env, agent, seed=seed).success for seed in range(episodes))
    expected = 1 / 4 * (1 - 0.5**3)
    assert abs(wins / episodes - expected) < 4 * math.sqrt(expected * (1 - expected) / episodes)


def test_inadmissible_room_command_leaves_carrying_nothing() -> None:
    # The causal feedback names what was carried, so it shows the room's no-op too.
    env = KeyDoorEnv(delay=1, causal_feedback=True)
    steps = play(env, ["take the door", EAT, OPEN])
    _reward, _terminated, _truncated, info = steps[0]
    assert info["mdp_next_state"] == "orchard|t=1|holding=nothing"
    reward, terminated, _truncated, info = steps[-1]
    assert reward == 0.0 and terminated and not info["success"]
    assert "took nothing" in info["feedback"]


def test_commands_ignore_case_and_surrounding_space() -> None:
    env = KeyDoorEnv(delay=0)
    steps = play(env, ["  Take The KEY \n", "OPEN THE DOOR"])
    assert steps[0][-1]["key_step"] and steps[-1][-1]["success"]


def test_garbage_and_non_string_actions_are_answered() -> None:
    rng = random.Random(0)
    env = KeyDoorEnv(delay=3, variance="high")
    env.action_space.seed(0)
    samples = [env.action_space.sample() for _ in range(10)]  # slow to draw: drawn once
    junk = [None, 3, 2.5, b"take the key", ["take the key"], {"a": 1}, "", "\x00" * 50, *samples]
    for seed in range(200):
        observation, info = env.reset(seed=seed)
        done = False
        while not done:
            action = rng.choice([*junk, *info["admissible_commands"]])
            observation, _reward, terminated, truncated, info = env.step(action)
            assert isinstance(observation, str) and env.observation_space.contains(observation)
            done = terminated or truncated


def test_stepping_outside_an_episode_is_an_error() -> None:
    env = KeyDoorEnv(delay=0)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(OPEN)
    play(env, [take(KEY), OPEN])
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step(OPEN)


def test_task_id_fixes_the_table_and_seeds_vary_the_tasks() -> None:
    env = KeyDoorEnv()
    first, info = env.reset(seed=0, options={"task_id": "keydoor-5"})
    again, _ = env.reset(seed=99, options={"task_id": "keydoor-5"})
    assert first == again and info["task_id"] == "keydoor-5"
    key_positions = set()
    for seed in range(60):
        _observation, info = env.reset(seed=seed)
        key_positions.add(info["admissible_commands"].index(take(KEY)))
    # Shuffled tables: the key's place in the command list tells nothing.
    assert key_positions == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="keydoor-<n>"):
        env.reset(options={"task_id": "umbrella-5"})


def test_observations_show_phase_turns_and_what_is_carried() -> None:
    env = KeyDoorEnv(delay=2, num_objects=2)
    observation, _info = env.reset(seed=0)
    assert "room" in observation and "a key" in observation and "carrying nothing" in observation
    observation = env.step(take(KEY))[0]
    assert "orchard (turn 1 of 2)" in observation and "carrying the key" in observation
    assert "Turns left: 5." in observation


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delay": -1},
        {"delay": 1.5},
        {"variance": "medium"},
        {"num_objects": 0},
        {"num_objects": 13},
        {"max_steps": 0},
        {"causal_feedback": 1},
        {"causal_feedback": "true"},
        {"render_mode": "human"},
    ],
)
def test_bad_options_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        KeyDoorEnv(**kwargs)


def test_default_limit_leaves_two_spare_turns_at_the_door() -> None:
    assert KeyDoorEnv(delay=5).max_steps == 5 + 2 + 2
    assert ENVS["creditgym/KeyDoor-v0"].max_episode_steps == KeyDoorEnv().max_steps
    assert ENVS["creditgym/KeyDoor-v0"].markov


# ---------------------------------------------------------------- several keys (num_keys)


def room_policy(mdp, states, room_choice) -> dict:
    """A policy table over `states`: `room_choice(state, action)` in the rooms; past them,
    eat every apple and open the door."""
    return {
        s: {
            a: room_choice(s, a) if s.startswith("room") else float(a in (OPEN, EAT))
            for a in mdp.actions(s)
        }
        for s in states
    }


def test_one_key_is_the_env_every_committed_run_used():
    """num_keys=1 draws the same tasks, shows the same text and pays the same: the
    default env, episode for episode (the committed runs' name leaves it out)."""
    for seed in range(3):
        plain, one = (
            KeyDoorEnv(delay=3, variance="high"),
            KeyDoorEnv(delay=3, variance="high", num_keys=1),
        )
        observation, info = plain.reset(seed=seed)
        assert one.reset(seed=seed) == (observation, info)
        for action in ["take the lamp", EAT, "dance", EAT, OPEN]:
            assert one.step(action) == plain.step(action)


def test_several_keys_the_scripted_expert_opens_the_door_every_time():
    env = KeyDoorEnv(delay=2, variance="high", num_keys=3)
    for seed in range(20):
        observation, info = env.reset(seed=seed)
        assert observation.startswith("You are in room 1 of 3.")
        total, keys = 0.0, 0
        while True:
            observation, reward, terminated, truncated, info = env.step(info["expert_action"])
            total += reward
            keys += info["key_step"] and not terminated
            if terminated or truncated:
                break
        assert terminated and info["success"] and keys == 3
        assert total >= DOOR_REWARD + 2  # the door and at least 1 per apple
        assert observation == "You unlock the door with every key and step through."


def test_several_keys_a_missing_key_locks_the_door_and_the_expert_needs_each_room():
    env = KeyDoorEnv(delay=1, num_objects=2, num_keys=2)
    observation, info = env.reset(seed=0)
    first = info["admissible_commands"]
    _, _, _, _, info = env.step(f"take the {KEY}")
    second = info["admissible_commands"]
    other = next(c for c in second if c != f"take the {KEY}")
    _, _, _, _, info = env.step(other)
    assert info["phase"] == "orchard"
    env.step(WAIT)
    observation, reward, terminated, _, info = env.step(OPEN)
    assert terminated and not info["success"] and reward == 0.0
    assert observation.startswith(
        "The door is locked, and you lack a key: you are carrying the key and"
    )
    assert len(first) == len(second) == 3


def test_several_keys_the_exact_mdp_puts_random_play_off_the_ceiling():
    """Positive control on the exact MDP: the expert's policy succeeds with probability 1;
    a uniformly random room choice with (1 / (n + 1))^K, n distractors per room (then
    opening the door at once: the door's only other choice is to wait)."""
    env = KeyDoorEnv(delay=2, num_objects=3, num_keys=3)
    env.reset(seed=4)
    mdp = OutcomeMDP(env.finite_mdp())
    table = partial(room_policy, mdp, reachable_states(mdp))
    expert = table(lambda s, a: float(a == f"take the {KEY}"))
    uniform = table(lambda s, a: 1.0 / len(mdp.actions(s)))
    start = mdp.initial_states()[0][1]
    assert evaluate_policy(mdp, expert).values[start] == pytest.approx(1.0)
    assert evaluate_policy(mdp, uniform).values[start] == pytest.approx((1 / 4) ** 3)


@pytest.mark.parametrize("options", [{"num_keys": 0}, {"num_keys": 5}, {"num_keys": "2"}])
def test_num_keys_out_of_range_is_refused(options):
    with pytest.raises(ValueError, match="num_keys must be an integer"):
        KeyDoorEnv(**options)
    with pytest.raises(ValueError, match="needs num_keys=1"):
        KeyDoorEnv(num_keys=2, causal_feedback=True)


# ------------------------------------------------------- disguised keys (disguised_keys)


def test_disguised_keys_each_room_needs_its_own_everyday_thing():
    """Room r's key is DISGUISES[r] in every task, on the table among distractors that
    never include it, never named a key; the door opens only for the right thing of each
    room, and the label and the expert follow it."""
    env = KeyDoorEnv(delay=1, num_objects=6, num_keys=3, disguised_keys=True)
    for seed in range(10):
        observation, info = env.reset(seed=seed)
        assert "key" not in observation
        for room in range(3):
            commands = info["admissible_commands"]
            assert len(commands) == 7 and commands.count(f"take the {DISGUISES[room]}") == 1
            assert info["expert_action"] == f"take the {DISGUISES[room]}"
            _, _, _, _, info = env.step(info["expert_action"])
            assert info["key_step"]
        env.step(EAT)
        _, reward, terminated, _, info = env.step(OPEN)
        assert terminated and info["success"] and reward == DOOR_REWARD
    # One wrong room (the second) locks the door, and its step is not a key step.
    _, info = env.reset(seed=0)
    _, _, _, _, info = env.step(f"take the {DISGUISES[0]}")
    wrong = next(c for c in info["admissible_commands"] if c != f"take the {DISGUISES[1]}")
    _, _, _, _, info = env.step(wrong)
    assert not info["key_step"]
    _, _, _, _, info = env.step(f"take the {DISGUISES[2]}")
    env.step(EAT)
    _, reward, terminated, _, info = env.step(OPEN)
    assert terminated and not info["success"] and reward == 0.0


def test_disguised_keys_the_exact_mdp_random_play_and_expert():
    """Positive control on the exact MDP, as for plain keys: the expert succeeds with
    probability 1, a uniformly random room choice with (1 / (n + 1))^K; the plain "take
    the key" policy never does (the right thing differs from room to room)."""
    env = KeyDoorEnv(delay=1, num_objects=3, num_keys=2, disguised_keys=True)
    env.reset(seed=2)
    mdp = OutcomeMDP(env.finite_mdp())
    table = partial(room_policy, mdp, reachable_states(mdp))
    start = mdp.initial_states()[0][1]
    expert = table(lambda s, a: float(a == f"take the {DISGUISES[int(s.split('t=')[1][0])]}"))
    uniform = table(lambda s, a: 1.0 / len(mdp.actions(s)))
    assert evaluate_policy(mdp, expert).values[start] == pytest.approx(1.0)
    assert evaluate_policy(mdp, uniform).values[start] == pytest.approx((1 / 4) ** 2)


def test_disguised_keys_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match="num_objects must be at most 11"):
        KeyDoorEnv(num_objects=12, disguised_keys=True)
    with pytest.raises(ValueError, match="needs disguised_keys=false"):
        KeyDoorEnv(causal_feedback=True, disguised_keys=True)
