"""Every registered `creditgym/` env: gymnasium's `check_env` and a same-seed rollout.

An id whose module cannot be imported FAILS here (it is not skipped): a registered
environment that does not load is a bug. Also runs docs/extending.md's "Adding an
environment" recipe end to end, through `benchmarks.run`.
"""

from __future__ import annotations

import ast
import random
import re
import sys
import types
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the creditgym/ ids)
from benchmarks import records
from benchmarks.run import main as run_main
from envs.registry import ENVS, EnvInfo, register_env
from tests.registry_kwargs import OPTION_KWARGS, registry_kwargs_for

CREDITGYM_IDS = sorted(env_id for env_id in gymnasium.registry if env_id.startswith("creditgym/"))
# Every id with its registry kwargs, then with each set of non-default options.
CONTRACT_CASES = [(env_id, {}) for env_id in CREDITGYM_IDS] + [
    (env_id, options) for env_id, variants in OPTION_KWARGS.items() for options in variants
]
CONTRACT_IDS = [
    f"{env_id}{''.join(f'-{k}={v}' for k, v in o.items())}" for env_id, o in CONTRACT_CASES
]
EXTENDING = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
ROLLOUT_STEPS = 8


def test_the_three_environments_are_registered() -> None:
    assert {"creditgym/SysDiag-v0", "creditgym/ALFWorld-v0", "creditgym/CodeExec-v1"} <= set(
        CREDITGYM_IDS
    )


@pytest.mark.parametrize(("env_id", "options"), CONTRACT_CASES, ids=CONTRACT_IDS)
def test_check_env(env_id: str, options: dict, tmp_path_factory: pytest.TempPathFactory) -> None:
    env = gymnasium.make(env_id, **registry_kwargs_for(env_id, tmp_path_factory), **options)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def rollout(env: gymnasium.Env, seed: int) -> list[tuple[Any, ...]]:
    """Reset with `seed`, then act with a seeded choice over the admissible commands
    (or seeded samples of the action space); record everything the env returns."""
    chooser = random.Random(seed)
    env.action_space.seed(seed)
    observation, info = env.reset(seed=seed)
    record: list[tuple[Any, ...]] = [(observation, info)]
    for _ in range(ROLLOUT_STEPS):
        commands = info.get("admissible_commands") or []
        action = chooser.choice(commands) if commands else env.action_space.sample()
        observation, reward, terminated, truncated, info = env.step(action)
        record.append((action, observation, reward, terminated, truncated, info))
        if terminated or truncated:
            observation, info = env.reset(seed=seed + 1)
            record.append((observation, info))
    return record


@pytest.mark.parametrize(("env_id", "options"), CONTRACT_CASES, ids=CONTRACT_IDS)
def test_same_seed_same_rollout(
    env_id: str, options: dict, tmp_path_factory: pytest.TempPathFactory
) -> None:
    kwargs = {**registry_kwargs_for(env_id, tmp_path_factory), **options}
    first, second = gymnasium.make(env_id, **kwargs), gymnasium.make(env_id, **kwargs)
    try:
        assert rollout(first, seed=7) == rollout(second, seed=7)
    finally:
        first.close()
        second.close()


def docs_section(title: str) -> str:
    text = EXTENDING.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match is not None, f"docs/extending.md has no '## {title}' section"
    return match.group(1)


def recipe() -> tuple[str, dict[str, Any], str]:
    """The recipe's module code, its EnvInfo keywords and its entry point."""
    blocks = re.findall(r"```python\n(.*?)```", docs_section("Adding an environment"), re.S)
    assert len(blocks) == 2, "expected the module and the register call as two python blocks"
    module_code, register_code = blocks
    # The register snippet is exactly `register_env(EnvInfo(...), entry_point=...)`.
    (call,) = [n for n in ast.parse(register_code).body if isinstance(n, ast.Expr)]
    assert ast.unparse(call.value.func) == "register_env"
    (info_call,) = call.value.args
    assert ast.unparse(info_call.func) == "EnvInfo"
    info = {kw.arg: ast.literal_eval(kw.value) for kw in info_call.keywords}
    (entry,) = [kw for kw in call.value.keywords if kw.arg == "entry_point"]
    assert info["id"].startswith("creditgym/")
    return module_code, info, ast.literal_eval(entry.value)


@pytest.fixture
def recipe_env():
    """The recipe's env, registered as its docs say under a test id, then removed."""
    module_code, info, entry_point = recipe()
    module_path, _, class_name = entry_point.partition(":")
    module = types.ModuleType(module_path)
    sys.modules[module_path] = module
    test_id = "readme-test/" + info["id"].split("/", 1)[1]
    try:
        exec(compile(module_code, f"docs:{module_path}", "exec"), module.__dict__)
        register_env(EnvInfo(**{**info, "id": test_id}), entry_point=entry_point)
        yield test_id, class_name
    finally:
        sys.modules.pop(module_path, None)
        gymnasium.registry.pop(test_id, None)
        ENVS.pop(test_id, None)


def test_the_adding_an_environment_recipe_gives_a_real_env(recipe_env) -> None:
    test_id, class_name = recipe_env
    env = gymnasium.make(test_id)
    check_env(env.unwrapped, skip_render_check=True)
    assert class_name == type(env.unwrapped).__name__
    # The example is a real env: bisection on its hints always wins.
    for seed in range(20):
        observation, info = env.reset(seed=seed)
        low, high = 1, 100
        terminated = False
        while not terminated:
            guess = (low + high) // 2
            observation, reward, terminated, truncated, info = env.step(str(guess))
            assert not truncated
            if "higher" in observation:
                low = guess + 1
            elif "lower" in observation:
                high = guess - 1
        assert info["success"] and reward == 1.0
    env.close()


def test_the_recipe_env_runs_through_the_command_line(recipe_env, tmp_path):
    # Training needs rollout workers, which import `envs` and so see only the envs
    # registered there; tests/test_env_cli.py trains on every one of those.
    test_id, _ = recipe_env
    argv = ["--env", test_id, "--model", "random", "--credit", "none", "--eval-episodes", "2"]
    assert run_main([*argv, "--sample-group-size", "0", "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    episodes = records.read_episodes(run_dir)
    assert len(episodes) == 2 and all(e.env == test_id for e in episodes)
