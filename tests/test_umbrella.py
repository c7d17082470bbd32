"""Umbrella: the first action alone decides the final +-1, every other step pays +-1 noise
(so the return's spread is sqrt(L - 1) and the first action's trajectory-level SNR about
2 / sqrt(L - 1)), the forecast is shown only at home, the expert always wins, random play
wins half the time, and any action is answered without an exception."""

from __future__ import annotations

import math
import random
import statistics

import gymnasium
import pytest

from creditgym import envs  # noqa: F401  (registers creditgym/Umbrella-v0)
from creditgym.agents.base import ExpertAgent, RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.envs import ENVS
from creditgym.envs.umbrella.dynamics import FACT_POOL, LEAVE, TAKE, WALK_COMMANDS
from creditgym.envs.umbrella.env import UmbrellaEnv
from creditgym.envs.umbrella.options import UmbrellaOptions

DEFAULT_LENGTH = UmbrellaOptions().length

SEEDS = range(200)


def reset_with_forecast(env: UmbrellaEnv, rain: bool, first_seed: int = 0) -> tuple[int, dict]:
    """Reset on the first seed from `first_seed` whose forecast is `rain`; (seed, info)."""
    seed = first_seed
    while True:
        _observation, info = env.reset(seed=seed)
        if ("forecast=rain" in info["mdp_state"]) == rain:
            return seed, info
        seed += 1


def test_expert_wins_every_seed_within_the_registered_limit() -> None:
    limit = ENVS["creditgym/Umbrella-v0"].max_episode_steps
    env = gymnasium.make("creditgym/Umbrella-v0", max_steps=limit)
    for seed in SEEDS:
        trajectory = play_episode(env, ExpertAgent(), seed=seed)
        assert trajectory.success, trajectory.feedback
        assert len(trajectory.steps) == DEFAULT_LENGTH
        assert trajectory.steps[-1].reward == 1.0 and trajectory.steps[-1].terminated
        assert all(step.reward in (-1.0, 1.0) for step in trajectory.steps)
        assert [s.info["key_step"] for s in trajectory.steps] == [True] + [False] * (
            DEFAULT_LENGTH - 1
        )


@pytest.mark.parametrize(
    ("rain", "choice", "final"),
    [(True, TAKE, 1.0), (True, LEAVE, -1.0), (False, TAKE, -1.0), (False, LEAVE, 1.0)],
)
def test_final_reward_is_plus_one_exactly_when_the_choice_matches_the_forecast(
    rain: bool, choice: str, final: float
) -> None:
    env = UmbrellaEnv(length=4)
    reset_with_forecast(env, rain)
    steps = [env.step(action)[1:] for action in (choice, *WALK_COMMANDS, WALK_COMMANDS[0])]
    reward, terminated, truncated, info = steps[-1]
    assert reward == final and terminated and not truncated
    assert info["success"] == (final > 0)
    assert steps[0][-1]["key_step"] == (final > 0)
    assert not any(step_info["key_step"] for *_, step_info in steps[1:])
    weather = "in the rain" if rain else "in sunshine"
    verdict = "+1: solved" if final > 0 else "-1: not solved"
    assert info["feedback"] == f"You reached work {weather}; the final reward was {verdict}."


def test_forecast_is_shown_only_at_home() -> None:
    env = UmbrellaEnv(length=6, num_distractors=3)
    for rain in (True, False):
        _seed, _info = reset_with_forecast(env, rain)
        home = env.last_observation
        assert ("forecast for the end of your walk: " + ("rain" if rain else "sunshine")) in home
        observation, *_ = env.step(TAKE)
        while env.state is not None:
            assert "forecast" not in observation and "rain" not in observation
            assert "sunshine" not in observation
            observation, *_ = env.step(WALK_COMMANDS[1])


def test_return_spread_is_the_noise_of_length_minus_one_steps() -> None:
    # Expert play: the final reward is always +1, so the return is 1 + a sum of L - 1
    # independent +-1 coins: mean 1, standard deviation sqrt(L - 1) = 3 at L = 10.
    env = UmbrellaEnv(length=10)
    returns = [play_episode(env, ExpertAgent(), seed=seed).total_return for seed in range(3000)]
    assert abs(statistics.fmean(returns) - 1.0) < 4 * 3 / math.sqrt(len(returns))
    assert abs(statistics.stdev(returns) - 3.0) < 0.15


def test_first_action_changes_the_mean_return_by_two_and_nothing_else() -> None:
    # Right and wrong first choices differ by 2 in expected return (+1 vs -1); the noise
    # steps pay mean 0 whichever was chosen (about 2 / sqrt(L - 1) signal-to-noise).
    env = UmbrellaEnv(length=5)
    by_choice: dict[bool, list[list[float]]] = {True: [], False: []}
    rng = random.Random(0)
    for seed in range(3000):
        _observation, info = env.reset(seed=seed)
        right = rng.random() < 0.5
        first = info["expert_action"] if right else ({TAKE, LEAVE} - {info["expert_action"]}).pop()
        rewards = [env.step(first)[1]] + [env.step(WALK_COMMANDS[0])[1] for _ in range(4)]
        by_choice[right].append(rewards)
    for right, episodes in by_choice.items():
        assert {episode[-1] for episode in episodes} == ({1.0} if right else {-1.0})
        noise = [reward for episode in episodes for reward in episode[:-1]]
        assert abs(statistics.fmean(noise)) < 4 / math.sqrt(len(noise))


def test_random_agent_wins_half_the_time() -> None:
    env = gymnasium.make("creditgym/Umbrella-v0")
    agent = RandomAgent(seed=0)
    episodes = 4000
    wins = sum(play_episode(env, agent, seed=seed).success for seed in range(episodes))
    assert abs(wins / episodes - 0.5) < 4 * math.sqrt(0.25 / episodes)


def test_distractor_facts_are_shown_every_step_and_vary() -> None:
    env = UmbrellaEnv(length=30, num_distractors=4)
    observation, _info = env.reset(seed=1)
    shown = set()
    while True:
        lines = observation.splitlines()
        facts = lines[1:5]
        assert len(facts) == 4
        assert all(any(fact in pair for pair in FACT_POOL) for fact in facts)
        shown.add(tuple(facts))
        observation, _reward, terminated, _truncated, _info = env.step(WALK_COMMANDS[0])
        if terminated:
            break
    assert len(shown) > 4  # fresh bits every step


def test_one_step_chain_is_the_decision_and_the_payoff() -> None:
    env = UmbrellaEnv(length=1)
    _seed, info = reset_with_forecast(env, rain=True)
    observation, reward, terminated, _truncated, info = env.step(TAKE)
    assert reward == 1.0 and terminated and info["success"] and info["key_step"]
    assert "dry" in observation


def test_step_limit_below_length_truncates_before_the_payoff() -> None:
    env = UmbrellaEnv(length=8, max_steps=3)
    _observation, info = env.reset(seed=0)
    steps = [env.step(action)[1:] for action in (info["expert_action"], *WALK_COMMANDS)]
    reward, terminated, truncated, info = steps[-1]
    assert truncated and not terminated and not info["success"]
    assert reward in (-1.0, 1.0)
    assert info["feedback"] == "Step limit (3) reached before work: not solved."


def test_inadmissible_first_command_leaves_the_umbrella() -> None:
    env = UmbrellaEnv(length=2)
    reset_with_forecast(env, rain=True)
    _observation, _reward, _terminated, _truncated, info = env.step("grab the umbrella")
    assert "umbrella=0" in info["mdp_next_state"] and not info["key_step"]
    _observation, reward, _terminated, _truncated, info = env.step("run")
    assert reward == -1.0 and "soaked" in env.last_observation


def test_commands_ignore_case_and_surrounding_space() -> None:
    env = UmbrellaEnv(length=2)
    reset_with_forecast(env, rain=True)
    assert env.step("  Take The Umbrella\n")[-1]["key_step"]


def test_garbage_and_non_string_actions_are_answered() -> None:
    rng = random.Random(0)
    env = UmbrellaEnv(length=6, num_distractors=3)
    env.action_space.seed(0)
    samples = [env.action_space.sample() for _ in range(10)]  # slow to draw: drawn once
    junk = [None, 0, 1, 2.5, b"take the umbrella", [TAKE], "", "\x00" * 50, *samples]
    for seed in range(200):
        observation, info = env.reset(seed=seed)
        done = False
        while not done:
            action = rng.choice([*junk, *info["admissible_commands"]])
            observation, reward, terminated, truncated, info = env.step(action)
            assert isinstance(observation, str) and env.observation_space.contains(observation)
            assert reward in (-1.0, 1.0)
            done = terminated or truncated


def test_stepping_outside_an_episode_is_an_error() -> None:
    env = UmbrellaEnv(length=1)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(TAKE)
    env.reset(seed=0)
    env.step(TAKE)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step(TAKE)


def test_task_id_fixes_the_facts_and_the_forecast_stays_random() -> None:
    env = UmbrellaEnv(num_distractors=3)
    forecasts = set()
    fact_pairs = set()
    for seed in range(40):
        _observation, info = env.reset(seed=seed, options={"task_id": "umbrella-3"})
        assert info["task_id"] == "umbrella-3"
        forecasts.add(info["mdp_state"].split("|")[1])
        fact_pairs.add(env.task.facts)
    assert forecasts == {"forecast=rain", "forecast=sun"} and len(fact_pairs) == 1
    with pytest.raises(ValueError, match="umbrella-<n>"):
        env.reset(options={"task_id": "keydoor-3"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"length": 0},
        {"length": 2.0},
        {"num_distractors": -1},
        {"num_distractors": 13},
        {"max_steps": 0},
        {"forecast_visible": 1},
        {"forecast_per_replica": "yes"},
        {"causal_feedback": None},
        {"render_mode": "human"},
    ],
)
def test_bad_options_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        UmbrellaEnv(**kwargs)


def test_registered_limit_is_the_default_length() -> None:
    assert ENVS["creditgym/Umbrella-v0"].max_episode_steps == UmbrellaEnv().max_steps
    assert UmbrellaEnv(length=25).max_steps == 25
    assert ENVS["creditgym/Umbrella-v0"].markov


def test_forecast_visible_shows_the_forecast_at_every_step() -> None:
    env = UmbrellaEnv(length=5, num_distractors=1, forecast_visible=True)
    for rain in (True, False):
        reset_with_forecast(env, rain)
        shown = "forecast for the end of your walk: " + ("rain" if rain else "sunshine")
        observation = env.last_observation
        while env.state is not None:
            assert shown in observation
            observation, *_ = env.step(WALK_COMMANDS[0] if env.state.steps else LEAVE)


def test_forecast_visible_changes_only_the_observations() -> None:
    plain, visible = UmbrellaEnv(length=4), UmbrellaEnv(length=4, forecast_visible=True)
    for seed in range(20):
        first, second = plain.reset(seed=seed)[1], visible.reset(seed=seed)[1]
        assert first["mdp_state"] == second["mdp_state"]
        for action in (TAKE, *WALK_COMMANDS, WALK_COMMANDS[0]):
            a, b = plain.step(action), visible.step(action)
            assert a[1:4] == b[1:4] and a[4]["mdp_next_state"] == b[4]["mdp_next_state"]


def replica_forecasts(env: UmbrellaEnv, seed: int, group: int = 8) -> list[str]:
    """The forecast each of the `group` replicas of one reset seed plays."""
    return [env.reset(seed=seed, options={"replica": r})[1]["forecast"] for r in range(group)]


def test_by_default_a_group_shares_the_forecast_of_its_seed() -> None:
    # G rollouts of one task are G resets with one seed: one forecast context per group.
    env = UmbrellaEnv()
    for seed in range(30):
        assert len(set(replica_forecasts(env, seed))) == 1


def test_forecast_per_replica_draws_one_per_rollout_and_keeps_the_task() -> None:
    shared, drawn = (
        UmbrellaEnv(num_distractors=3),
        UmbrellaEnv(num_distractors=3, forecast_per_replica=True),
    )
    mixed_groups = 0
    forecasts = []
    for seed in range(30):
        group = replica_forecasts(drawn, seed)
        forecasts += group
        mixed_groups += len(set(group)) == 2
        assert group == replica_forecasts(drawn, seed)  # fixed by (seed, replica)
        for replica in range(3):
            options = {"replica": replica}
            shared.reset(seed=seed, options=options)
            drawn.reset(seed=seed, options=options)
            assert drawn.task == shared.task and drawn.state.facts == shared.state.facts
    # A group of 8 has one forecast with probability 2 / 2**8: nearly every group mixes.
    assert mixed_groups >= 28
    share_of_rain = forecasts.count("rain") / len(forecasts)
    assert abs(share_of_rain - 0.5) < 4 * math.sqrt(0.25 / len(forecasts))


def test_info_reports_the_forecast_so_success_splits_by_it() -> None:
    assert ENVS["creditgym/Umbrella-v0"].task_type_key == "forecast"
    env = UmbrellaEnv(length=3)
    wins: dict[str, list[bool]] = {"rain": [], "sunshine": []}
    for seed in range(60):
        _observation, info = env.reset(seed=seed)
        forecast = info["forecast"]
        assert f"forecast={'rain' if forecast == 'rain' else 'sun'}" in info["mdp_state"]
        for action in (TAKE, *WALK_COMMANDS):
            *_, terminated, truncated, info = env.step(action)
            assert info["forecast"] == forecast
        assert terminated and not truncated
        wins[forecast].append(info["success"])
    # Always taking the umbrella: right on every rainy walk, wrong on every sunny one.
    assert wins["rain"] and all(wins["rain"])
    assert wins["sunshine"] and not any(wins["sunshine"])
