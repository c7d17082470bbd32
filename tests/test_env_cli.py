"""Every registered env runs through `python -m benchmarks.run` the day it is registered.

An env's identity (short name, default step limit, splits, training kwargs) is declared
beside its `register_env` call; nothing in the runner is keyed by env id. These tests
play each registered id through the command line with the scripted agents, on the
env's own default step limit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from creditgym import envs
from creditgym.benchmarks.run import main
from creditgym.report import records
from tests.registry_kwargs import TEST_DATA

ENV_IDS = sorted(envs.ENVS)
# `--env-options` for an env whose default data would be built first: ALFWorld plays the
# ten committed games (tests/data/alfworld, two per evaluation split) instead of
# generating its 360 default games, which took 159 s of a fresh clone's `make test`.
TEST_ENV_OPTIONS = {"creditgym/ALFWorld-v0": [f"data_dir={TEST_DATA / 'alfworld'}"]}


def env_options(env_id: str) -> list[str]:
    """`--env-options ...` for `env_id`, or nothing."""
    options = TEST_ENV_OPTIONS.get(env_id)
    return ["--env-options", *options] if options else []


def play(tmp_path: Path, env_id: str, env: str, model: str, episodes: int) -> tuple[dict, list]:
    argv = ["--env", env, "--model", model, "--credit", "none", "--eval-episodes", str(episodes)]
    argv += env_options(env_id)
    assert main([*argv, "--sample-group-size", "0", "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    config = json.loads((run_dir / records.CONFIG_FILE).read_text())
    return config, records.read_episodes(run_dir)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_random_agent_runs_every_registered_env_by_id(env_id, tmp_path):
    info = envs.ENVS[env_id]
    config, episodes = play(tmp_path, env_id, env_id, "random", episodes=2)
    assert config["env_id"] == env_id
    assert config["max_episode_steps"] == info.max_episode_steps
    assert sorted((e.split, e.index) for e in episodes) == sorted(
        (split.name, index) for split in info.eval_splits for index in range(2)
    )
    assert all(e.env == env_id and 1 <= e.steps <= info.max_episode_steps for e in episodes)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_expert_wins_on_the_env_default_step_limit(env_id, tmp_path, capsys):
    # The default step limit must leave the scripted expert room to win: a run whose
    # episodes are all truncated measures nothing (ALFWorld once ran 5-step episodes).
    info = envs.ENVS[env_id]
    _, episodes = play(tmp_path, env_id, info.short_name, "expert", episodes=2)
    assert episodes and all(e.success and not e.truncated for e in episodes)
    assert "warning" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_one_training_step_on_every_registered_env(env_id, tmp_path):
    # The smallest real training run: rollouts in worker processes, credit, one update,
    # evaluation. Short episodes and responses keep it cheap; what is checked is that
    # nothing in the runner or the trainer needs a per-env table to train on a new env.
    argv = ["--env", env_id, "--model", "tiny", "--credit", "grpo", "--steps", "1"]
    argv += ["--group-size", "2", "--max-episode-steps", "2", "--max-new-tokens", "16"]
    argv += ["--eval-episodes", "1", "--sample-group-size", "0", "--out", str(tmp_path)]
    assert main([*argv, *env_options(env_id)]) == 0
    (run_dir,) = tmp_path.iterdir()
    (metrics,) = records.read_metrics(run_dir)
    assert metrics["rollout/num_trajectories"] >= 2 and metrics["charts/grad_norm"] >= 0
    assert len(records.read_episodes(run_dir)) == len(envs.ENVS[env_id].eval_splits)


def test_summary_warns_when_most_episodes_are_truncated(tmp_path, capsys):
    argv = ["--env", "sysdiag", "--model", "random", "--credit", "none", "--eval-episodes", "4"]
    assert (
        main(
            [*argv, "--max-episode-steps", "1", "--sample-group-size", "0", "--out", str(tmp_path)]
        )
        == 0
    )
    assert "hit the step limit T = 1" in capsys.readouterr().out
