"""CodeExec-v1: episodes, observations, key steps, scripted agents, hostile code via the env."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from creditgym import envs  # noqa: F401  (registers the creditgym ids)
from creditgym.agents.code_scripted import CanonicalSubmitter, PromptSubmitter, WrongThenFix
from creditgym.agents.episode import play_episode
from creditgym.envs.code.env import CodeExecEnv, truncate
from creditgym.envs.code.sandbox import SandboxLimits

FAST_LIMITS = SandboxLimits(
    cpu_seconds=1, wall_seconds=2.0, memory_bytes=256 * 2**20, max_output_bytes=64 * 2**10
)
FIRST = {"task_id": "HumanEval/0"}  # has_close_elements: 7 hidden tests, 2 visible examples


@pytest.fixture(scope="module")
def env() -> CodeExecEnv:
    return CodeExecEnv(sandbox_limits=FAST_LIMITS)


def canonical_write(env: CodeExecEnv) -> str:
    assert env.task is not None and env.task.canonical_solution is not None
    return f"write\n```python\n{env.task.canonical_solution}```"


def test_passes_gymnasium_check_env() -> None:
    check_env(gym.make("creditgym/CodeExec-v1", max_steps=3).unwrapped, skip_render_check=True)


def test_same_seed_same_task_and_observation(env: CodeExecEnv) -> None:
    first = env.reset(seed=7)[0]
    assert env.reset(seed=7)[0] == first
    task_ids = {env.reset(seed=seed)[1]["task_id"] for seed in range(8)}
    assert len(task_ids) > 4  # seeds spread over tasks


def test_reset_by_task_id_and_unknown_id(env: CodeExecEnv) -> None:
    observation, info = env.reset(options=FIRST)
    assert info["task_id"] == "HumanEval/0" and "has_close_elements" in observation
    assert info["task"] == env.task.prompt and not info["key_step"] and not info["success"]
    assert info["admissible_commands"] == ["run", "test", "submit"]
    with pytest.raises(ValueError, match=r"unknown task_id 'nope'.*164 tasks"):
        env.reset(options={"task_id": "nope"})


def test_step_before_reset_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="call reset"):
        CodeExecEnv(sandbox_limits=FAST_LIMITS).step("run")


def test_test_action_lists_failing_visible_examples(env: CodeExecEnv) -> None:
    env.reset(options=FIRST)
    saved = env.step("write\n```python\n    return True\n```")[0]
    assert saved == "Code saved (1 lines, as the function body); it loads"
    observation, reward, terminated, truncated, _ = env.step("test")
    assert observation.startswith("Visible tests: 1/2 pass.")
    assert "FAILED >>> has_close_elements([1.0, 2.0, 3.0], 0.5)" in observation
    assert "expected: False" in observation and "got: True" in observation
    assert (reward, terminated, truncated) == (0.0, False, False)


def test_run_shows_stdout_stderr_and_traceback(env: CodeExecEnv) -> None:
    env.reset(options=FIRST)
    env.step("write\n```python\n    print('trace me')\n    return 1 / 0\n```")
    observation = env.step("run")[0]
    assert ">>> has_close_elements([1.0, 2.0, 3.0], 0.5)" in observation
    assert "trace me" in observation and "ZeroDivisionError" in observation


def test_syntax_error_is_reported_at_write(env: CodeExecEnv) -> None:
    env.reset(options=FIRST)
    observation, *_, info = env.step("write\n```python\n    return (\n```")
    assert "does not load" in observation and "SyntaxError" in observation
    assert info["hidden_passed"] == 0 and "does not load" in info["feedback"]


def test_feedback_names_failing_hidden_tests(env: CodeExecEnv) -> None:
    env.reset(options=FIRST)
    info = env.step("write\n```python\n    return False\n```")[-1]
    assert info["hidden_passed"] == 3 and info["hidden_total"] == 7
    assert info["feedback"].startswith("Hidden tests: 3/7 pass.")
    assert (
        "FAILED assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True" in (info["feedback"])
    )
    assert "AssertionError" in info["feedback"]


def test_key_step_only_when_code_beats_every_earlier_version(env: CodeExecEnv) -> None:
    env.reset(options=FIRST)
    steps = [
        "write\n```python\n    return False\n```",  # 3/7 > stub's 0/7: key
        "write\n```python\n    return True\n```",  # 4/7: key
        "write\n```python\n    return False\n```",  # 3/7 again: not key
        "run",
        canonical_write(env),  # 7/7: key
        "submit",
    ]
    labels = [env.step(action)[-1]["key_step"] for action in steps]
    assert labels == [True, True, False, False, True, False]


def test_full_function_write_works_like_body(env: CodeExecEnv) -> None:
    env.reset(options={"task_id": "HumanEval/2"})  # truncate_number
    code = "def truncate_number(number: float) -> float:\n    return number % 1.0"
    assert "as a full definition" in env.step(f"write\n```python\n{code}\n```")[0]
    observation, reward, terminated, _, info = env.step("submit")
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    assert "accepted" in observation


def test_failed_submissions_end_the_episode_when_used_up() -> None:
    env = CodeExecEnv(max_submissions=2, sandbox_limits=FAST_LIMITS)
    env.reset(options=FIRST)
    first = env.step("submit")
    assert first[0] == "Submission rejected: 0/7 hidden tests pass. 1 submission(s) left."
    assert not first[2]
    _, reward, terminated, truncated, info = env.step("submit")
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    with pytest.raises(RuntimeError):
        env.step("run")


def test_step_limit_truncates_and_hidden_tests_judge_current_code() -> None:
    env = CodeExecEnv(max_steps=2, sandbox_limits=FAST_LIMITS)
    env.reset(options=FIRST)
    env.step(canonical_write(env))
    observation, reward, terminated, truncated, info = env.step("run")
    assert (reward, terminated, truncated, info["success"]) == (1.0, False, True, True)
    assert "Step limit (2) reached" in observation


def test_invalid_action_is_flagged_and_costs_a_step(env: CodeExecEnv) -> None:
    env.reset(options=FIRST)
    observation, reward, terminated, truncated, info = env.step("dance")
    assert observation.startswith("Invalid action: unrecognised action")
    assert info["invalid_action"] and (reward, terminated, truncated) == (0.0, False, False)


def test_non_string_action_gets_an_invalid_action_observation(env: CodeExecEnv) -> None:
    env.reset(options=FIRST)
    observation, reward, terminated, truncated, info = env.step(42)  # type: ignore[arg-type]
    assert observation == "Invalid action: an action is text, not int."
    assert info["invalid_action"] and (reward, terminated, truncated) == (0.0, False, False)


def test_observation_output_is_truncated_to_documented_length() -> None:
    env = CodeExecEnv(max_output_chars=300, sandbox_limits=FAST_LIMITS)
    env.reset(options=FIRST)
    env.step("write\n```python\n    print('y' * 5000)\n    return False\n```")
    observation = env.step("run")[0]
    assert "characters cut" in observation
    assert len(observation) < 1000
    assert truncate("abcdefghij" * 100, 100).count("characters cut") == 1
    assert len(truncate("abcdefghij" * 100, 100)) <= 100


def test_expert_action_is_canonical_write_then_submit(env: CodeExecEnv) -> None:
    info = env.reset(options=FIRST)[1]
    assert info["expert_action"] == canonical_write(env).rstrip("`").rstrip() + "\n```"
    assert env.step(info["expert_action"])[-1]["expert_action"] == "submit"


def test_scripted_agents_win_fail_and_fix() -> None:
    env = gym.make("creditgym/CodeExec-v1", sandbox_limits=FAST_LIMITS)
    for seed in range(3):
        won = play_episode(env, CanonicalSubmitter(), seed=seed)
        assert won.success and won.total_return == 1.0
        assert [s.key_step for s in won.steps] == [True, False]
        lost = play_episode(env, PromptSubmitter(), seed=seed)
        assert not lost.success and lost.total_return == 0.0 and lost.terminated
        assert lost.length == 3  # the default three submissions, all rejected
        fixed = play_episode(env, WrongThenFix(), seed=seed)
        assert [s.action.split()[0] for s in fixed.steps] == [
            "write",
            "test",
            "submit",
            "write",
            "submit",
        ]
        assert [s.key_step for s in fixed.steps] == [False, False, False, True, False]
        assert fixed.success and [s.reward for s in fixed.steps] == [0, 0, 0, 0, 1.0]
        assert "rejected" in fixed.steps[3].observation
        json.dumps(fixed.to_dict())  # the trajectory record is serialisable


@pytest.mark.slow
def test_canonical_submitter_wins_every_humaneval_task() -> None:
    env = CodeExecEnv(max_steps=3)
    failures = []
    for task in env.tasks:
        trajectory = play_episode(
            env, CanonicalSubmitter(), seed=0, options={"task_id": task.task_id}
        )
        if not trajectory.success:
            failures.append((task.task_id, trajectory.feedback))
    assert failures == []


def test_custom_task_file_plays(tmp_path: Path) -> None:
    record = {
        "task_id": "mine/square",
        "prompt": 'def square(x):\n    """Square x.\n    >>> square(3)\n    9\n    """\n',
        "entry_point": "square",
        "test": "def check(f):\n    assert f(2) == 4\n    assert f(-1) == 1\n",
    }
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    env = CodeExecEnv(tasks_path=path, sandbox_limits=FAST_LIMITS)
    info = env.reset(seed=0)[1]
    assert info["task_id"] == "mine/square" and "expert_action" not in info
    assert env.step("write ```python\nreturn x * x```")[-1]["key_step"]
    assert env.step("test")[0].startswith("Visible tests: 1/1 pass.")
    assert env.step("submit")[-1]["success"]


ESCAPE_PATH = Path("/var/tmp/creditgym-escape")
HOSTILE_PROGRAMS = {
    "infinite loop": ("while True:\n    pass", "limit"),
    "fork bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "limit",
    ),
    # Gigabyte blocks: the address-space limit refuses the first at once (growing in
    # small blocks, tests/test_sandbox.py, can take seconds of page faults under load).
    "memory bomb": ("blocks = []\nwhile True:\n    blocks.append(bytearray(2**30))", "MemoryError"),
    "disk filler": (
        "with open('f', 'wb') as h:\n    while True:\n        h.write(b'0' * 2**20)",
        "File too large",
    ),
    # /var/tmp: a host directory that does not exist in the sandbox's file tree.
    "write outside cwd": (
        f"open({str(ESCAPE_PATH)!r}, 'w')",
        "No such file or directory",
    ),
    "kill the parent": (
        "import os\nos.kill(os.getppid(), 9)\nraise SystemExit('survived')",
        "survived",
    ),
    "close stdout": (
        "import os\nos.close(1)\nos.close(2)",
        "exited with status 1",
    ),
    "print gigabytes": ("while True:\n    print('x' * 2**20)", "output limit exceeded"),
    "network connect": (
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)",
        "Network is unreachable",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PROGRAMS))
def test_hostile_code_is_reported_and_env_keeps_working(env: CodeExecEnv, name: str) -> None:
    code, expected = HOSTILE_PROGRAMS[name]
    env.reset(options=FIRST)
    stub = "def has_close_elements(numbers, threshold):\n    return False"
    env.step(f"write\n```python\n{code}\n\n{stub}\n```")
    observation = env.step("run")[0]
    assert expected in observation, observation
    assert not ESCAPE_PATH.exists()
    env.step(canonical_write(env))
    assert env.step("submit")[-1]["success"]
