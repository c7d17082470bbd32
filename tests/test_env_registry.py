"""Every registered `creditgym/` env: gymnasium's `check_env` and a same-seed rollout.

An id whose module cannot be imported FAILS here (it is not skipped): a registered
environment that does not load is a bug. Also runs the README's "Adding an environment"
example end to end.
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
from tests.registry_kwargs import registry_kwargs_for

CREDITGYM_IDS = sorted(env_id for env_id in gymnasium.registry if env_id.startswith("creditgym/"))
README = Path(__file__).resolve().parents[1] / "README.md"
ROLLOUT_STEPS = 8


def test_the_three_environments_are_registered() -> None:
    assert {"creditgym/SysDiag-v0", "creditgym/ALFWorld-v0", "creditgym/CodeExec-v0"} <= set(
        CREDITGYM_IDS
    )


@pytest.mark.parametrize("env_id", CREDITGYM_IDS)
def test_check_env(env_id: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    env = gymnasium.make(env_id, **registry_kwargs_for(env_id, tmp_path_factory))
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


@pytest.mark.parametrize("env_id", CREDITGYM_IDS)
def test_same_seed_same_rollout(env_id: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    kwargs = registry_kwargs_for(env_id, tmp_path_factory)
    first, second = gymnasium.make(env_id, **kwargs), gymnasium.make(env_id, **kwargs)
    try:
        assert rollout(first, seed=7) == rollout(second, seed=7)
    finally:
        first.close()
        second.close()


def readme_section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match is not None, f"README.md has no '## {title}' section"
    return match.group(1)


def test_readme_adding_an_environment_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", readme_section("Adding an environment"), re.S)
    assert len(blocks) == 2, "expected the module and the register call as two python blocks"
    module_code, register_code = blocks

    # The register snippet is exactly one `register(id="creditgym/...", entry_point=...)`.
    calls = [node for node in ast.walk(ast.parse(register_code)) if isinstance(node, ast.Call)]
    assert [ast.unparse(call.func) for call in calls] == ["register"]
    keywords = {kw.arg: ast.literal_eval(kw.value) for kw in calls[0].keywords}
    assert keywords["id"].startswith("creditgym/")
    module_path, _, class_name = keywords["entry_point"].partition(":")

    # Run the module as the module the entry point names, register it under a test id.
    module = types.ModuleType(module_path)
    sys.modules[module_path] = module
    try:
        exec(compile(module_code, f"README:{module_path}", "exec"), module.__dict__)
        test_id = "readme-test/" + keywords["id"].split("/", 1)[1]
        gymnasium.register(id=test_id, entry_point=keywords["entry_point"])
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
    finally:
        sys.modules.pop(module_path, None)
        gymnasium.registry.pop(test_id, None)
