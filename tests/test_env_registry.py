"""Every registered `creditgym/` env: gymnasium's `check_env` and a same-seed rollout.

An id whose module cannot be imported FAILS here (it is not skipped): a registered
environment that does not load is a bug. Also runs docs/extending.md's "Adding an
environment" recipe end to end, through `benchmarks.run`.
"""

from __future__ import annotations

import ast
import importlib
import random
import re
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from creditgym import envs  # noqa: F401  (registers the creditgym/ ids)
from creditgym.benchmarks.run import main as run_main
from creditgym.envs.registry import ENVS, GENERIC_INTRO, EnvInfo, register_env
from creditgym.report import records
from tests.doc_recipes import check_entry_point, docs_section, documented_file, documented_module
from tests.registry_kwargs import OPTION_KWARGS, registry_kwargs_for

CREDITGYM_IDS = sorted(env_id for env_id in gymnasium.registry if env_id.startswith("creditgym/"))
# Every id with its registry kwargs, then with each set of non-default options.
CONTRACT_CASES = [(env_id, {}) for env_id in CREDITGYM_IDS] + [
    (env_id, options) for env_id, variants in OPTION_KWARGS.items() for options in variants
]
CONTRACT_IDS = [
    f"{env_id}{''.join(f'-{k}={v}' for k, v in o.items())}" for env_id, o in CONTRACT_CASES
]
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


def recipe() -> tuple[str, str, dict[str, Any], str]:
    """The recipe's module file, its code, its EnvInfo keywords and its entry point."""
    section = docs_section("Adding an environment")
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
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
    return documented_file(section), module_code, info, ast.literal_eval(entry.value)


def test_the_recipe_entry_point_names_the_recipe_file() -> None:
    path, _, _, entry_point = recipe()
    check_entry_point(entry_point, path)
    # The spelling the page had before the namespace change is refused.
    with pytest.raises(AssertionError, match=r"does not name envs/guess/env\.py"):
        check_entry_point("envs.guess.env:GuessNumberEnv", "envs/guess/env.py")


@pytest.fixture
def recipe_env(tmp_path_factory: pytest.TempPathFactory):
    """The recipe's env, its module written as the file the page names and registered as
    the page says under a test id; then removed."""
    path, module_code, info, entry_point = recipe()
    class_name = entry_point.partition(":")[2]
    test_id = "readme-test/" + info["id"].split("/", 1)[1]
    with documented_module(path, module_code, tmp_path_factory.mktemp("recipe")):
        register_env(EnvInfo(**{**info, "id": test_id}), entry_point=entry_point)
        try:
            yield test_id, class_name
        finally:
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


# --- the env's own facts, beside its registration -----------------------------------------
SOURCE_PACKAGES = ("models", "agents", "credit", "measure", "trainers", "benchmarks")


def _entry_class(env_id: str) -> type:
    module, _, name = gymnasium.registry[env_id].entry_point.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("env_id", list(ENVS))
def test_env_info_says_finite_mdp_exactly_when_the_env_describes_one(env_id: str) -> None:
    assert ENVS[env_id].finite_mdp == hasattr(_entry_class(env_id), "finite_mdp")


@pytest.mark.parametrize("env_id", list(ENVS))
def test_every_registered_env_brings_its_own_prompt_intro(env_id: str) -> None:
    from creditgym.agents.prompts import build_messages

    assert ENVS[env_id].intro != GENERIC_INTRO
    content = build_messages(env_id, "a task", (), "an observation")[0]["content"]
    assert content.startswith(ENVS[env_id].intro)


def test_a_bumped_env_keeps_the_intro_it_registers() -> None:
    from creditgym.agents.prompts import build_messages

    bumped = "readme-test/KeyDoor-v9"
    intro = ENVS["creditgym/KeyDoor-v0"].intro
    register_env(
        EnvInfo(id=bumped, short_name="kd9", max_episode_steps=12, intro=intro),
        entry_point="creditgym.envs.keydoor.env:KeyDoorEnv",
    )
    try:
        assert build_messages(bumped, "t", (), "o")[0]["content"].startswith(intro)
        assert build_messages("unregistered/X-v0", "t", (), "o")[0]["content"].startswith(
            GENERIC_INTRO
        )
    finally:
        gymnasium.registry.pop(bumped, None)
        ENVS.pop(bumped, None)


def test_the_entry_points_share_the_env_option_parser(capsys) -> None:
    from creditgym.benchmarks import credit_truth
    from creditgym.benchmarks.run import RunConfig, resolve

    pairs = ("delay=2", "variance=high")
    plan = resolve(RunConfig(env="keydoor", env_options=pairs))
    assert credit_truth.parse_kwargs("creditgym/KeyDoor-v0", pairs) == plan.env_options.kwargs()
    assert plan.env_options.kwargs() == {"delay": 2, "variance": "high"}
    argv = ["--env", "sysdiag", "--model", "uniform", "--out", "/nonexistent"]
    assert credit_truth.main(argv) == 2
    assert "does not describe itself as a finite MDP" in capsys.readouterr().err


def test_task_families_come_from_env_info() -> None:
    families = ENVS["creditgym/SysDiag-v0"].task_families
    assert families is not None and families.kwarg == "faults"
    assert "memory_leak" in families.load()
    assert all(info.task_families is None for i, info in ENVS.items() if "SysDiag" not in i)


def test_faults_are_checked_against_the_envs_declared_task_families(tmp_path, capsys) -> None:
    base = ["--model", "random", "--credit", "none", "--out", str(tmp_path)]
    assert run_main(["--env", "keydoor", "--faults", "memory_leak", *base]) == 2
    assert "creditgym/KeyDoor-v0 has none" in capsys.readouterr().err
    assert run_main(["--env", "sysdiag", "--faults", "memory_leek", *base]) == 2
    assert "Did you mean memory_leak" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before any work


def _env_names() -> set[str]:
    return {name for info in ENVS.values() for name in (info.id, info.short_name)} | {
        info.id.split("/")[-1] for info in ENVS.values()
    }


def test_no_env_id_or_short_name_is_tested_outside_envs() -> None:
    # A condition on an env's name belongs in its EnvInfo: compare nodes whose operands
    # are an env's id, short name or display name, or a lookup of SHORT_NAMES by one.
    # Also a module constant holding one (`SYSDIAG_ID = "creditgym/SysDiag-v0"`) compared.
    names, root, found = _env_names(), Path(__file__).resolve().parents[1], []
    for package in SOURCE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            constants = {
                target.id
                for node in tree.body
                if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and node.value.value in names
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            for node in ast.walk(tree):
                operands = []
                if isinstance(node, ast.Compare):
                    operands = [node.left, *node.comparators]
                    operands += [e for o in operands if isinstance(o, ast.Tuple) for e in o.elts]
                elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith(
                    "SHORT_NAMES"
                ):
                    operands = [node.slice]
                for operand in operands:
                    if (isinstance(operand, ast.Constant) and operand.value in names) or (
                        isinstance(operand, ast.Name) and operand.id in constants
                    ):
                        found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, found
