"""The light install: with the core dependencies alone (locks/core.txt, no torch, no
transformers), every registered environment imports and its scripted expert plays it to
success through creditgym's own rollout loop.

The venv is built once per set of core versions and pyproject.toml (under this Python's
prefix, `light-<sha256>`): the core set from the lock, then the project with `--no-deps`
(editable, so the code played is this checkout's). Building it takes a few minutes, hence
`slow`; later runs reuse it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from creditgym.benchmarks.dependency_locks import pins
from creditgym.envs.registry import ENVS
from tests.registry_kwargs import registry_kwargs_for

REPO = Path(__file__).resolve().parent.parent
CORE_LOCK = REPO / "locks" / "core.txt"
SEED = 0

PLAY = textwrap.dedent(
    """
    import importlib.util
    import json
    import sys

    heavy = ("torch", "transformers", "peft", "accelerate", "tokenizers", "trl", "verl", "ray")
    installed = [name for name in heavy if importlib.util.find_spec(name) is not None]

    from creditgym import envs  # noqa: F401
    from creditgym.agents.base import ExpertAgent
    from creditgym.agents.rollout import collect
    from creditgym.envs.registry import ENVS

    kwargs, seed = json.loads(sys.argv[1]), int(sys.argv[2])
    played = {}
    for env_id, info in ENVS.items():
        env_kwargs = {**kwargs.get(env_id, {}), **info.expert_kwargs}
        [trajectory], _ = collect(
            env_id, ExpertAgent(), [seed], num_envs=1, env_kwargs=env_kwargs, progress=False
        )
        played[env_id] = [trajectory.success, trajectory.length]
    imported = sorted({name.split(".")[0] for name in sys.modules} & set(heavy))
    print(json.dumps({"installed": installed, "imported": imported, "played": played}))
    """
)


def pip(python: Path, *arguments: str) -> None:
    command = [str(python), "-m", "pip", "install", "--quiet", *arguments]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="session")
def light_python() -> Path:
    """The Python of a venv holding the core lock and this checkout, built once."""
    # Keyed by the pinned versions, not the lock file (a new digest line changes no
    # package), and by pyproject.toml, whose package mapping the editable install records.
    locked = json.dumps(sorted(pins(CORE_LOCK).items()))
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    digest = hashlib.sha256((locked + project).encode()).hexdigest()[:16]
    venv = Path(sys.prefix) / f"light-{digest}"
    python = venv / "bin" / "python"
    if (venv / ".complete").is_file():
        return python
    shutil.rmtree(venv, ignore_errors=True)  # a build an earlier run left half done
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip(python, "-r", str(CORE_LOCK))
    pip(python, "--no-deps", "-e", str(REPO))
    (venv / ".complete").touch()
    return python


@pytest.mark.slow
def test_every_env_plays_to_success_with_the_core_dependencies_only(
    light_python, tmp_path, tmp_path_factory
):
    kwargs = {env_id: registry_kwargs_for(env_id, tmp_path_factory) for env_id in ENVS}
    result = subprocess.run(
        [str(light_python), "-c", PLAY, json.dumps(kwargs), str(SEED)],
        cwd=tmp_path,  # not the checkout: imports come through the installed project
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["installed"] == []  # the venv really has no training stack
    assert outcome["imported"] == []
    assert set(outcome["played"]) == set(ENVS)  # every registered env, none skipped
    failed = {env_id: played for env_id, played in outcome["played"].items() if not played[0]}
    assert failed == {}, f"the scripted expert did not solve: {failed}"
    assert all(length >= 1 for _, length in outcome["played"].values())
