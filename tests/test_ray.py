"""Scale-out on Ray, on one local Ray of 2 CPUs shared by the module: env workers as
actors (the process pool's trajectories, a killed or hung actor dropping only its
episode) and sweeps as tasks (the local executor's run folders, a killed worker retried
without losing or repeating an episode)."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import ray

import tests.rollout_envs  # noqa: F401  (registers Corridor-v0 in this process)
from creditgym.agents.base import AgentAction, AgentInput
from creditgym.agents.ray_workers import RayActorPool
from creditgym.agents.rollout import close_workers, collect
from creditgym.agents.workers import _POOLS
from creditgym.benchmarks import sweep
from creditgym.benchmarks.run import RunConfig, resolve, run
from creditgym.benchmarks.run.train import trainer_configs
from creditgym.report import records
from tests.rollout_envs import KeyedRandomAgent

CORRIDOR = "tests.rollout_envs:Corridor-v0"


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module: starting one costs seconds on this machine."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    close_workers()  # the actor pools, before the Ray they live on goes
    ray.shutdown()


class KillingAgent(KeyedRandomAgent):
    """Kills `victim` (an env actor) on its second call: mid-episode, one step sent."""

    def __init__(self, victim: ray.actor.ActorHandle) -> None:
        self.victim, self.calls = victim, 0

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        self.calls += 1
        if self.calls == 2:
            ray.kill(self.victim)
        return super().act(inputs)


def rollouts(env_workers: str, **kwargs):
    return collect(
        CORRIDOR,
        KeyedRandomAgent(),
        [0, 1, 2],
        group_size=2,
        num_envs=3,
        progress=False,
        env_workers=env_workers,
        **kwargs,
    )


@pytest.mark.slow  # starts three env actors (Ray worker processes)
def test_ray_actors_play_the_same_trajectories_as_worker_processes(local_ray):
    processes, process_stats = rollouts("process")
    actors, actor_stats = rollouts("ray")
    assert len(actors) == 6 and not actor_stats.dropped and not process_stats.dropped
    assert actors == processes
    assert len({t.length for t in actors}) > 1  # episodes of different lengths compared


@pytest.mark.slow
def test_a_killed_actor_drops_its_episode_and_the_batch_completes(local_ray, caplog):
    expected, _ = rollouts("process")
    rollouts("ray")  # leaves three idle actors in the pool, which the next call takes
    [pool] = [pool for pool in _POOLS.values() if isinstance(pool, RayActorPool)]
    victim = pool.idle[0].actor
    trajectories, stats = collect(
        CORRIDOR, KillingAgent(victim), [0, 1, 2], group_size=2, num_envs=3,
        progress=False, env_workers="ray",
    )  # fmt: skip
    assert stats.num_episodes == 6 and stats.num_trajectories == 5
    assert len(stats.dropped) == 1 and "worker died during step" in stats.dropped[0]
    assert "ActorDiedError" in stats.dropped[0] and "dropped episode" in caplog.text
    # The others are the episodes the process pool played; the slot went on with a new actor.
    assert all(trajectory in expected for trajectory in trajectories)


@pytest.mark.slow
def test_a_hung_actor_is_killed_at_its_deadline_and_drops_only_its_episode(local_ray, caplog):
    trajectories, stats = collect(
        CORRIDOR, KeyedRandomAgent(), [2, 3], num_envs=2, step_timeout_s=2.0,
        env_kwargs={"fault": "hang", "fault_seed": 2}, progress=False, env_workers="ray",
    )  # fmt: skip
    assert [t.seed for t in trajectories] == [3]
    assert len(stats.dropped) == 1 and "timeout" in stats.dropped[0]
    assert "dropped episode" in caplog.text


def test_unknown_env_workers_is_a_clear_error():
    with pytest.raises(ValueError, match="valid: auto, process, inline, ray"):
        collect(CORRIDOR, KeyedRandomAgent(), [0], progress=False, env_workers="threads")


SWEEP_TOML = """
[common]
env = "sysdiag"
credit = "none"
eval_episodes = 4
sample_group_size = 0

[[grid]]
model = "random"
seed = [0, 1]

[[grid]]
model = "{broken_model}"
"""


def run_folders(root: Path) -> dict[str, tuple]:
    """Per run folder: its episodes, evaluation trajectories and summary."""
    return {
        folder.name: (
            records.read_episodes(folder),
            list(records.iter_jsonl(folder / records.EVAL_TRAJECTORIES_FILE)),
            records.read_json(folder / records.DONE_FILE)["summary"],
        )
        for folder in records.run_dirs(root)
    }


@pytest.mark.slow  # Ray workers import benchmarks.run (torch, transformers) on first use
def test_ray_sweep_writes_the_run_folders_of_the_local_one_and_reports_a_failed_run(
    local_ray, tmp_path, capsys
):
    broken = tmp_path / "not-a-model"  # a folder, so it passes validation; loading fails
    broken.mkdir()
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP_TOML.format(broken_model=broken))
    argv = ["--config", str(config), "--no-leaderboard"]
    assert sweep.main([*argv, "--out", str(tmp_path / "local")]) == 1
    capsys.readouterr()
    assert sweep.main([*argv, "--out", str(tmp_path / "ray"), "--executor", "ray"]) == 1
    err = capsys.readouterr().err
    local, on_ray = run_folders(tmp_path / "local"), run_folders(tmp_path / "ray")
    assert len(on_ray) == 2 and on_ray == local  # the broken run left no folder in either
    [failed] = [line for line in err.splitlines() if line.startswith("failed: ")]
    assert "not-a-model" in failed and "cannot load model" in failed
    # Finished runs are skipped on Ray too: only the broken run is submitted again.
    assert sweep.main([*argv, "--out", str(tmp_path / "ray"), "--executor", "ray"]) == 1
    assert capsys.readouterr().out.count("finished, skipped") == 2


def ray_worker_running(task_name: str) -> int | None:
    """The pid of the Ray worker process executing the task `task_name` (Ray titles a
    busy worker `ray::<task name>`), or None."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if title == f"ray::{task_name}":
            return int(entry.name)
    return None


@pytest.mark.slow  # a Ray worker killed and restarted (imports torch again)
def test_a_killed_ray_worker_is_retried_and_its_run_loses_and_repeats_no_episode(
    local_ray, tmp_path
):
    episodes = 100
    config = tmp_path / "sweep.toml"
    config.write_text(
        f'[common]\nenv = "sysdiag"\ncredit = "none"\nmodel = "random"\n'
        f"eval_episodes = {episodes}\nsample_group_size = 0\n[[grid]]\nseed = 0\n"
    )
    argv = ["--config", str(config), "--out", str(tmp_path / "ray"), "--executor", "ray"]
    [cell] = sweep.load_sweep(config, tmp_path / "ray")
    name = resolve(cell).name
    exit_codes = []
    driver = threading.Thread(target=lambda: exit_codes.append(sweep.main(argv)))
    driver.start()
    episodes_file = tmp_path / "ray" / name / records.EPISODES_FILE
    deadline, killed = time.monotonic() + 120, None
    while time.monotonic() < deadline and driver.is_alive() and killed is None:
        if episodes_file.exists() and episodes_file.read_text().count("\n") >= 5:
            killed = ray_worker_running(name)
            if killed is not None:
                os.kill(killed, signal.SIGKILL)
        time.sleep(0.01)
    driver.join(timeout=180)
    assert killed is not None, "the run ended or stalled before the kill"
    assert exit_codes == [0]
    written = records.read_episodes(episodes_file.parent)
    assert [e.index for e in written] == list(range(episodes))
    # The retry ran the same command into the same folder: two commands, one run.
    assert len((episodes_file.parent / records.COMMANDS_FILE).read_text().splitlines()) == 2
    clean = records.read_episodes(run(resolve(dataclasses.replace(cell, out=tmp_path / "clean"))))
    assert written == clean  # the episodes an uninterrupted run plays


def test_env_workers_reach_the_trainers_and_leave_the_run_name_alone(tmp_path):
    on_ray = RunConfig(env_workers="ray", out=tmp_path)
    assert resolve(on_ray).name == resolve(RunConfig(out=tmp_path)).name
    for _trainer, config in trainer_configs(resolve(on_ray)).values():
        assert config.env_workers == "ray"


@pytest.mark.slow  # loads `small` and plays its episodes twice
def test_a_run_on_ray_env_actors_plays_the_episodes_of_one_on_worker_processes(local_ray, tmp_path):
    config = RunConfig(env="keydoor", model="small", credit="none", eval_episodes=3,
                       sample_group_size=0, out=tmp_path / "process")  # fmt: skip
    on_processes = run(resolve(config))
    on_actors = run(resolve(dataclasses.replace(config, env_workers="ray", out=tmp_path / "ray")))
    assert on_actors.name == on_processes.name
    assert records.read_episodes(on_actors) == records.read_episodes(on_processes)


def test_a_sweep_joining_a_cluster_refuses_a_relative_out_in_one_line(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")  # never reached: refused first
    (tmp_path / "sweep.toml").write_text('[common]\nmodel = "random"\n[[grid]]\nseed = 0\n')
    argv = ["--config", "sweep.toml", "--out", "runs", "--executor", "ray"]
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "absolute path on shared storage" in err
    assert sweep.main([*argv[:-2], "--executor", "ray", "--retries", "-1"]) == 2
    assert not (tmp_path / "runs").exists()
