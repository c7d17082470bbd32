"""The batched multi-process rollout engine: agreement with play_episode, groups, faults."""

import gymnasium as gym
import pytest

import tests.rollout_envs  # noqa: F401  (registers Corridor-v0 in this process)
from creditgym import envs
from creditgym.agents.base import ExpertAgent, RandomAgent
from creditgym.agents.episode import group_id, play_episode
from creditgym.agents.rollout import close_workers, collect, resolve_env_workers
from creditgym.agents.workers import (
    _POOLS,
    Failed,
    Reset,
    ResetDone,
    StepDone,
    TakeStep,
    WorkerPool,
)
from tests.registry_kwargs import REGISTRY_KWARGS
from tests.rollout_envs import KeyedRandomAgent

CORRIDOR = "tests.rollout_envs:Corridor-v0"


def test_expert_rollouts_equal_play_episode_and_share_groups():
    seeds = [3, 4, 5]
    trajectories, stats = collect(
        CORRIDOR, ExpertAgent(), seeds, group_size=2, num_envs=3, progress=False
    )
    assert len(trajectories) == 6 and stats.num_trajectories == 6 and not stats.dropped
    assert [t.seed for t in trajectories] == [3, 3, 4, 4, 5, 5]
    env = gym.make(CORRIDOR)
    for trajectory in trajectories:
        # Group ids included: both loops apply the one rule of `agents.episode.group_id`.
        assert trajectory == play_episode(env, ExpertAgent(), trajectory.seed)
        expected = group_id(trajectory.env_id, trajectory.task_id, trajectory.seed)
        assert trajectory.group_id == expected
    assert trajectories[0].group_id == f"Corridor-v0/{trajectories[0].task_id}/seed3"
    groups = [t.group_id for t in trajectories]
    assert groups[0] == groups[1] != groups[2] == groups[3] != groups[4] == groups[5]
    assert stats.num_steps == sum(t.length for t in trajectories)
    assert stats.tokens_generated == 0 and stats.valid_action_ratio == 1.0


def test_random_agent_uses_the_same_path_and_counts_truncation():
    trajectories, stats = collect(
        CORRIDOR, RandomAgent(seed=1), [0, 1], group_size=2, num_envs=2, progress=False
    )
    assert stats.num_trajectories == 4
    for trajectory in trajectories:
        assert trajectory.terminated or trajectory.truncated
        assert trajectory.success == trajectory.terminated
        assert all(s.action in s.admissible_commands for s in trajectory.steps)
    assert stats.valid_action_ratio == 1.0


@pytest.mark.parametrize(
    ("fault", "reason", "env_workers"),
    [
        ("raise", "RuntimeError: simulated env crash", "process"),
        ("exit", "worker died", "process"),
        ("hang", "timeout", "process"),
        ("raise", "RuntimeError: simulated env crash", "inline"),
    ],
)
def test_broken_env_drops_only_its_episodes(fault, reason, env_workers, caplog):
    trajectories, stats = collect(
        CORRIDOR,
        ExpertAgent(),
        [1, 2, 3],
        group_size=2,
        num_envs=3,
        env_kwargs={"fault": fault, "fault_seed": 2},
        step_timeout_s=2.0,
        progress=False,
        env_workers=env_workers,
    )
    assert [t.seed for t in trajectories] == [1, 1, 3, 3]
    assert all(t.success for t in trajectories)
    assert len(stats.dropped) == 2 and all(reason in line for line in stats.dropped)
    assert stats.num_episodes == 6 and stats.num_trajectories == 4
    assert "dropped episode" in caplog.text


def test_unknown_env_is_a_clear_error():
    with pytest.raises(ValueError, match=r"registered: .*creditgym/SysDiag-v0"):
        collect("creditgym/NoSuchEnv-v0", ExpertAgent(), [0], progress=False)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="group_size"):
        collect(CORRIDOR, ExpertAgent(), [0], group_size=0, progress=False)
    with pytest.raises(ValueError, match="options"):
        collect(CORRIDOR, ExpertAgent(), [0, 1], options=[None], progress=False)


def test_alfworld_expert_rollouts_equal_play_episode():
    env_id = "creditgym/ALFWorld-v0"
    # The expert reads the planner's action, which ALFWorld publishes only when asked.
    kwargs = {**REGISTRY_KWARGS[env_id], **envs.ENVS[env_id].expert_kwargs}
    trajectories, stats = collect(
        env_id, ExpertAgent(), [0, 1], num_envs=2, env_kwargs=kwargs, progress=False
    )
    assert stats.num_trajectories == 2 and all(t.success for t in trajectories)
    env = gym.make(env_id, **kwargs)
    for trajectory in trajectories:
        assert trajectory == play_episode(env, ExpertAgent(), trajectory.seed)


def test_workers_are_reused_across_calls_and_closed_on_request():
    close_workers()  # earlier tests' pools (in-process ones hold no process)
    first, _ = collect(CORRIDOR, ExpertAgent(), [7, 8], num_envs=2, progress=False)
    processes = [worker.process for pool in _POOLS.values() for worker in pool.idle]
    assert len(processes) >= 2 and all(process.is_alive() for process in processes)
    second, _ = collect(CORRIDOR, ExpertAgent(), [7, 8], num_envs=2, progress=False)
    assert first == second
    assert {w.process.pid for pool in _POOLS.values() for w in pool.idle} == {
        p.pid for p in processes
    }
    close_workers()
    assert not _POOLS and not any(process.is_alive() for process in processes)


def test_a_worker_speaks_typed_messages_and_reports_env_errors_without_dying():
    worker = WorkerPool(CORRIDOR, {"fault": "raise", "fault_seed": 2}).take()
    try:
        worker.send(Reset(seed=1, options=None))
        reset = worker.receive()
        assert isinstance(reset, ResetDone) and reset.env_id == "Corridor-v0"
        worker.send(TakeStep(reset.info["expert_action"]))
        step = worker.receive()
        assert isinstance(step, StepDone) and isinstance(step.reward, float)
        # Seed 2 raises at its second step: the worker answers Failed and keeps serving.
        worker.send(Reset(seed=2, options=None))
        worker.send(TakeStep(worker.receive().info["expert_action"]))
        worker.receive()
        worker.send(TakeStep("go right"))
        failed = worker.receive()
        assert isinstance(failed, Failed) and "simulated env crash" in failed.reason
        worker.send(Reset(seed=1, options=None))
        assert worker.receive() == reset
    finally:
        worker.close()
    assert not worker.is_alive()


@pytest.mark.parametrize("env_id", ["creditgym/KeyDoor-v0", "creditgym/Umbrella-v0", CORRIDOR])
def test_inline_envs_play_the_same_episodes_as_worker_processes(env_id):
    kwargs = {"group_size": 3, "num_envs": 4, "progress": False}
    # actions drawn from (episode, step) alone: rounds are composed differently on the two
    inline, stats = collect(env_id, KeyedRandomAgent(), [1, 2], env_workers="inline", **kwargs)
    process, _ = collect(env_id, KeyedRandomAgent(), [1, 2], env_workers="process", **kwargs)
    assert stats.num_trajectories == 6 and inline == process


def test_auto_runs_only_the_in_memory_envs_inline():
    assert resolve_env_workers("creditgym/KeyDoor-v0", "auto") == "inline"
    assert resolve_env_workers("creditgym/Umbrella-v0", "auto") == "inline"
    for env_id in ("creditgym/SysDiag-v0", "creditgym/CodeExec-v1", "creditgym/ALFWorld-v0"):
        assert resolve_env_workers(env_id, "auto") == "process"
    assert resolve_env_workers(CORRIDOR, "auto") == "process"  # not registered in_process
    assert resolve_env_workers(CORRIDOR, "ray") == "ray"
    with pytest.raises(ValueError, match=r"unknown env_workers 'threads'.*auto, process"):
        resolve_env_workers(CORRIDOR, "threads")
