"""SysDiag: the expert solves every family, random play does far worse, episodes are
deterministic, and only root-cause fixes count (reboots and symptom kills do not)."""

from __future__ import annotations

import gymnasium
import pytest

from creditgym import envs  # noqa: F401  (registers creditgym/SysDiag-v0)
from creditgym.agents.base import ExpertAgent, RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.envs.sysdiag.env import STEP_COST, SysDiagEnv
from creditgym.envs.sysdiag.faults import FAULT_FAMILIES
from creditgym.envs.sysdiag.options import SUCCESS_REWARD, SysDiagOptions

SEEDS = range(200)


@pytest.fixture(scope="module")
def expert_and_random_runs():
    env = gymnasium.make("creditgym/SysDiag-v0")
    expert = [play_episode(env, ExpertAgent(), seed=seed) for seed in SEEDS]
    random_agent = RandomAgent(seed=0)
    random = [play_episode(env, random_agent, seed=seed) for seed in SEEDS]
    return expert, random


def test_at_least_eight_fault_families() -> None:
    assert len(FAULT_FAMILIES) >= 8


def test_expert_solves_every_seed_of_every_family(expert_and_random_runs) -> None:
    expert, _ = expert_and_random_runs
    families = {t.steps[-1].info["fault_family"] for t in expert}
    assert families == set(FAULT_FAMILIES), "200 seeds should cover every family"
    failures = [(t.task_id, t.feedback) for t in expert if not t.success]
    assert not failures
    for trajectory in expert:
        # Diagnose, then fix: the last step earns the success reward, every other step pays.
        assert trajectory.steps[-1].reward == SUCCESS_REWARD
        assert all(step.reward == -STEP_COST for step in trajectory.steps[:-1])
        assert trajectory.steps[-1].terminated and not trajectory.steps[-1].truncated
        assert any(step.key_step for step in trajectory.steps[:-1]), "diagnosis is a key step"
        assert trajectory.feedback.startswith("Fixed and verified")


def test_expert_only_types_admissible_commands(expert_and_random_runs) -> None:
    expert, _ = expert_and_random_runs
    for trajectory in expert:
        for step in trajectory.steps:
            assert step.action in step.admissible_commands
            assert 10 <= len(step.admissible_commands) <= 25


def test_random_agent_scores_far_lower(expert_and_random_runs) -> None:
    expert, random = expert_and_random_runs
    expert_rate = sum(t.success for t in expert) / len(expert)
    random_rate = sum(t.success for t in random) / len(random)
    expert_return = sum(t.total_return for t in expert) / len(expert)
    random_return = sum(t.total_return for t in random) / len(random)
    assert expert_rate == 1.0
    assert random_rate <= 0.5, random_rate
    assert expert_return - random_return >= 0.5, (expert_return, random_return)


def test_same_seed_same_episode() -> None:
    first, second = SysDiagEnv(), SysDiagEnv()
    for seed in (0, 1, 99):
        assert first.reset(seed=seed) == second.reset(seed=seed)
        for action in ("ps aux", "df -h", "journalctl -u nginx", "kill 1", "reboot"):
            assert first.step(action) == second.step(action)
            if first.done:
                break


def test_task_id_reproduces_the_instance_a_seed_drew() -> None:
    env = SysDiagEnv()
    observation, info = env.reset(seed=5)
    replay = SysDiagEnv()
    assert replay.reset(seed=123, options={"task_id": info["task_id"]}) == (observation, info)
    assert env.step("ps aux") == replay.step("ps aux")


def test_different_instances_differ() -> None:
    env = SysDiagEnv(faults=["cpu_hog"])
    outputs = set()
    for index in range(5):
        env.reset(options={"task_id": f"cpu_hog-{index}"})
        outputs.add(env.step("ps aux")[0])
    assert len(outputs) == 5


@pytest.mark.parametrize(
    ("family", "expected_reward"),
    [
        (name, SysDiagOptions().reboot_reward if cls.REBOOT_CLEARS else 0.0)
        for name, cls in FAULT_FAMILIES.items()
    ],
)
def test_reboot_ends_the_episode_with_partial_or_no_credit(family, expected_reward) -> None:
    env = SysDiagEnv()
    env.reset(options={"task_id": f"{family}-1"})
    _observation, reward, terminated, truncated, info = env.step("reboot")
    assert (reward, terminated, truncated, info["success"]) == (expected_reward, True, False, False)
    assert ("persisted" in info["feedback"]) == (expected_reward == 0.0)
    # Clearing the symptoms is not progress on the root cause: never a key step.
    assert info["key_step"] is False


@pytest.mark.parametrize("family", sorted(FAULT_FAMILIES))
def test_reboot_reward_option_sets_what_a_clearing_reboot_pays(family: str) -> None:
    # reboot_reward=0 takes the one-step trap away; everything else stays as it was.
    clears = FAULT_FAMILIES[family].REBOOT_CLEARS
    for reboot_reward in (0.0, 0.5):
        env = SysDiagEnv(reboot_reward=reboot_reward)
        env.reset(options={"task_id": f"{family}-1"})
        _observation, reward, terminated, _truncated, info = env.step("reboot")
        assert reward == (reboot_reward if clears else 0.0) and terminated
        assert not info["success"] and info["key_step"] is False
    trap_free = play_episode(SysDiagEnv(reboot_reward=0.0), ExpertAgent(), seed=5)
    default = play_episode(SysDiagEnv(), ExpertAgent(), seed=5)
    assert [s.reward for s in trap_free.steps] == [s.reward for s in default.steps]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"reboot_reward": -0.1},
        {"reboot_reward": 1.5},
        {"reboot_reward": float("nan")},
        {"reboot_reward": True},
        {"reboot_reward": "0"},
        {"causal_feedback": 1},
    ],
)
def test_bad_reward_and_feedback_options_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SysDiagEnv(**kwargs)


def test_killing_fork_storm_workers_does_not_fix_it() -> None:
    env = SysDiagEnv(max_steps=100)
    env.reset(options={"task_id": "fork_storm-2"})
    fault, host = env.fault, env.host
    workers = [p.pid for p in host.procs.values() if p.ppid == fault.parent.pid][:12]
    for pid in workers:
        _obs, reward, terminated, _tr, _info = env.step(f"kill -9 {pid}")
        assert not terminated and reward == -STEP_COST
    children = {p.pid: p for p in host.procs.values() if p.ppid == fault.parent.pid}
    zombies = [pid for pid in workers if host.procs.get(pid, None) and host.procs[pid].stat == "Z"]
    assert zombies and all(pid in children for pid in zombies), "zombies ignore signals"
    running = [pid for pid in workers if pid not in zombies]
    assert running and not set(running) & set(children), "killed workers are gone..."
    assert sum(p.stat == "R" for p in children.values()) >= len(running), "...and replaced"
    *_rest, terminated, _tr, info = env.step(f"kill {fault.parent.pid}")
    assert terminated and info["success"]


def test_deleting_an_open_log_frees_nothing_until_the_writer_restarts() -> None:
    env = SysDiagEnv()
    env.reset(options={"task_id": "disk_full_log-4"})
    log = env.fault.log_path
    _observation, _r, terminated, _tr, info = env.step(f"rm {log}")
    assert not terminated and info["key_step"] is False
    assert " /var" in env.step("df -h")[0] and "100% /var" in env.step("df -h")[0]
    assert "(deleted)" in env.step("lsof +L1")[0]
    *_rest, terminated, _tr, info = env.step(f"systemctl restart {env.fault.unit}")
    assert terminated and info["success"]


@pytest.mark.parametrize(
    ("task_id", "symptom_fix"),
    [
        ("port_conflict-0", "systemctl restart {unit}"),
        ("config_permissions-0", "systemctl restart {unit}"),
        ("crashed_service-0", "systemctl restart {unit}"),
        ("cpu_hog-0", "systemctl restart {unit}"),
        ("expired_tls_cert-0", "systemctl restart {unit}"),
        ("dns_misconfig-0", "systemctl restart {unit}"),
        ("inode_exhaustion-0", "rm /var/log/syslog.1"),
    ],
)
def test_treating_the_symptom_does_not_fix_the_root_cause(task_id, symptom_fix) -> None:
    env = SysDiagEnv()
    env.reset(options={"task_id": task_id})
    for _ in range(2):
        _obs, reward, terminated, _tr, info = env.step(symptom_fix.format(unit=env.fault.unit))
        assert not terminated and not info["success"] and reward == -STEP_COST


def test_step_limit_truncates_with_feedback() -> None:
    env = SysDiagEnv(max_steps=3)
    env.reset(seed=3)
    results = [env.step("uptime") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)
    assert "Step limit (3)" in results[-1][4]["feedback"]
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("uptime")


def test_key_step_marks_the_first_reveal_only() -> None:
    env = SysDiagEnv()
    env.reset(options={"task_id": "cpu_hog-7"})
    assert env.step("uptime")[4]["key_step"] is False
    assert env.step("top -bn1")[4]["key_step"] is True
    assert env.step("ps aux")[4]["key_step"] is False  # shows the hog again: nothing new


def test_pids_become_admissible_only_once_seen() -> None:
    env = SysDiagEnv()
    _obs, info = env.reset(options={"task_id": "cpu_hog-7"})
    kill = f"kill {env.fault.hog.pid}"
    assert kill not in info["admissible_commands"]
    assert kill in env.step("top -bn1")[4]["admissible_commands"]


def test_curriculum_subset_and_bad_arguments() -> None:
    env = SysDiagEnv(faults=["dns_misconfig"])
    assert {env.reset(seed=s)[1]["fault_family"] for s in range(10)} == {"dns_misconfig"}
    with pytest.raises(ValueError, match="unknown fault families"):
        SysDiagEnv(faults=["meteor_strike"])
    with pytest.raises(ValueError, match="max_steps"):
        SysDiagEnv(max_steps=0)
    with pytest.raises(ValueError, match="task_id"):
        env.reset(options={"task_id": "cpu_hog-7"})  # not in this env's families
    with pytest.raises(ValueError, match="task_id"):
        SysDiagEnv().reset(options={"task_id": "cpu_hog-x"})
    with pytest.raises(RuntimeError, match="before reset"):
        SysDiagEnv().step("ls")


def test_a_simulator_bug_answers_like_a_shell_and_the_episode_goes_on(monkeypatch) -> None:
    from creditgym.envs.sysdiag.shell import Shell

    env = SysDiagEnv()
    env.reset(seed=3)

    def broken_run(self, line):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(Shell, "run", broken_run)
    observation, reward, terminated, truncated, _ = env.step("ps aux")
    assert "bash: ps: internal error" in observation
    assert reward == -STEP_COST and not terminated and not truncated
    monkeypatch.undo()
    observation, *_ = env.step("uptime")
    assert "load average" in observation
