"""One namespace (creditgym/__init__.py, pyproject.toml's package-dir): the wheel installs
`creditgym` and nothing else at the top level, and creditgym works beside the OpenAI Agents
SDK, which installs a top-level `agents` of its own, both as installed (`creditgym.*`, the
`creditgym` console script) and from the repository root (`python -m benchmarks.run`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from creditgym import FOLDERS
from creditgym.cli import COMMANDS
from creditgym.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent
SDK = "openai-agents==0.24.0"  # installs top-level `agents`


def pip(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def sdk(tmp_path_factory) -> Path:
    """The SDK alone (no dependencies: only where `agents` resolves matters) in a folder
    that goes first on PYTHONPATH, as a user's environment that has it installed."""
    target = tmp_path_factory.mktemp("sdk")
    installed = pip("install", "--quiet", "--no-deps", "--target", str(target), SDK)
    assert installed.returncode == 0, installed.stderr
    assert (target / "agents" / "__init__.py").is_file()
    return target


@pytest.mark.slow  # builds the wheel (setuptools in an isolated build environment)
def test_the_wheel_installs_only_the_creditgym_namespace(tmp_path):
    source = tmp_path / "source"  # a copy without .venv, results/ or caches
    ignore = shutil.ignore_patterns(
        ".venv", ".venv-verl", ".git", "results", "*.egg-info", "__pycache__", ".pytest_cache",
        ".ruff_cache", "build",
    )  # fmt: skip
    shutil.copytree(REPO, source, ignore=ignore)
    built = pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path), str(source))
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("creditgym-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"creditgym"}
    for folder in FOLDERS:  # each folder lands under the namespace, with its __init__
        assert f"creditgym/{folder}/__init__.py" in names, folder
    assert "creditgym/envs/keydoor/env.py" in names
    assert "creditgym/models/small_tokenizer_v1.json" in names  # `small`'s committed tokenizer
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "creditgym = creditgym.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


# Installed use, outside any checkout: play KeyDoor twice with its scripted expert (one
# group) and credit the pair with GRPO; equal successes give zero advantages.
PROBE = """
import importlib.util, json
import gymnasium as gym
import creditgym.envs
from creditgym.agents.base import ExpertAgent
from creditgym.agents.episode import play_episode
from creditgym.credit import REGISTRY
env = gym.make("creditgym/KeyDoor-v0")
batch = [play_episode(env, ExpertAgent(), seed=0, group_id="g") for _ in range(2)]
out = REGISTRY["grpo"]()(batch)
print(json.dumps({
    "agents": importlib.util.find_spec("agents").origin,
    "success": batch[0].success,
    "advantages": [float(a[0]) for a in out.step_advantages],
}))
"""


@pytest.mark.slow  # installs the SDK (no dependencies) and starts fresh interpreters
def test_creditgym_runs_beside_the_openai_agents_sdk_installed_and_from_the_root(sdk, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(sdk)}
    # Installed: `import agents` is the SDK's, creditgym's folders are `creditgym.*`.
    found = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=outside, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    probe = json.loads(found.stdout.splitlines()[-1])
    assert probe["agents"].startswith(str(sdk))
    assert probe["success"] == 1.0 and probe["advantages"] == [0.0, 0.0]
    # The console script and `python -m benchmarks.run` from the root: one run each of
    # `tiny` trained with GRPO for one step, then evaluated, the SDK on the path.
    argv = ["--env", "keydoor", "--model", "tiny", "--credit", "grpo", "--steps", "1",
            "--tasks-per-step", "2", "--eval-episodes", "4", "--threads", "1"]  # fmt: skip
    console = Path(sys.executable).with_name("creditgym")
    runs = {
        "console": ([str(console), "run", *argv, "--out", str(tmp_path / "a")], outside),
        "root": ([sys.executable, "-m", "benchmarks.run", *argv, "--out", str(tmp_path / "b")],
                 REPO),
    }  # fmt: skip
    for name, (command, cwd) in runs.items():
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert done.returncode == 0, (name, done.stderr[-2000:])
        (episodes,) = (tmp_path / ("a" if name == "console" else "b")).rglob("episodes.jsonl")
        assert len(episodes.read_text().splitlines()) == 4, name


def test_the_console_script_names_every_entry_point_and_refuses_a_typo(capsys):
    for module in COMMANDS.values():
        command = REPO / "benchmarks" / module  # a module, or a package run by its __main__
        assert command.with_suffix(".py").is_file() or (command / "__main__.py").is_file(), module
    assert cli_main(["rn"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Did you mean run?" in err


def test_no_source_file_imports_a_bare_top_level_folder():
    """Every import of the project's own code goes through `creditgym.`: a bare `import
    agents` would load a second copy of a module (or, installed, the SDK's `agents`)."""
    offending = []
    for path in REPO.rglob("*.py"):
        if {".venv", ".venv-verl", "results", "build", "tools"} & set(path.relative_to(REPO).parts):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            words = line.split()
            bare = len(words) >= 2 and words[0] in ("import", "from")
            if bare and words[1].split(".")[0] in FOLDERS:
                offending.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offending == []
