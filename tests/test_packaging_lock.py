"""The lock files (locks/, benchmarks/dependency_locks.py): in step with pyproject.toml's
ranges, each one a resolution those ranges admit, and the environment `make` built holding
exactly its lock. Offline and quick: the digest a lock records is compared, nothing is
resolved again."""

from __future__ import annotations

import shutil
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from creditgym.benchmarks.dependency_locks import (
    LOCKS,
    dependency_digest,
    pins,
    recorded_digest,
    stale_locks,
)

REPO = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# The environment markers of the machines the locks are resolved for.
MARKERS = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}


def normalised(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def requirements_of(extras: tuple[str, ...]) -> list[Requirement]:
    """The core requirements and those of `extras`, the project's own extras followed."""
    found = [Requirement(text) for text in PROJECT["dependencies"]]
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in map(Requirement, PROJECT["optional-dependencies"][extra]):
            if requirement.name == PROJECT["name"]:
                pending.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def test_every_lock_was_written_for_pyprojects_dependency_tables():
    assert stale_locks() == []
    assert {recorded_digest(REPO / "locks" / lock.name) for lock in LOCKS} == {dependency_digest()}


@pytest.mark.parametrize(
    "edit",
    [
        ('"gymnasium>=1.0"', '"gymnasium>=1.1"'),  # a core range
        ('"trl>=1.16"', '"trl>=1.17"'),  # an extra's range
    ],
)
def test_a_changed_range_or_constraint_makes_every_lock_stale(tmp_path, edit):
    shutil.copytree(REPO / "locks", tmp_path / "locks")
    text = (REPO / "pyproject.toml").read_text()
    assert text.count(edit[0]) == 1
    (tmp_path / "pyproject.toml").write_text(text.replace(*edit))
    assert len(stale_locks(tmp_path)) == len(LOCKS)
    (tmp_path / "pyproject.toml").write_text(text)
    assert stale_locks(tmp_path) == []
    with open(tmp_path / "locks" / "constraints.txt", "a") as constraints:
        constraints.write("numpy<2.4\n")
    assert len(stale_locks(tmp_path)) == len(LOCKS)


@pytest.mark.parametrize("lock", LOCKS, ids=[lock.name for lock in LOCKS])
def test_each_lock_pins_a_version_every_range_admits(lock):
    locked = pins(REPO / "locks" / lock.name)
    for requirement in requirements_of(lock.extras):
        if requirement.marker and not requirement.marker.evaluate(MARKERS):
            continue
        name = normalised(requirement.name)
        assert name in locked, f"{lock.name} lacks {name}"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"{lock.name}: {name}=={locked[name]} is outside {requirement}"
        )


def test_the_locks_hold_what_each_install_is_for():
    core, main, verl = (pins(REPO / "locks" / lock.name) for lock in LOCKS)
    # The light install: the environments' packages and none of the training stack.
    assert {"gymnasium", "alfworld", "textworld", "numpy"} <= set(core)
    assert not {"torch", "transformers", "peft", "accelerate", "ray"} & set(core)
    # The main set is TRL's own resolution (the TRL adapter's tests run in it), no verl.
    assert {"trl", "torch", "transformers", "peft", "datasets"} <= set(main)
    assert "verl" not in main
    # verl with its own dependencies, as `pip install .[verl]` resolves them: its cap
    # keeps transformers below 5.11, inside creditgym's range (pyproject.toml).
    assert verl["verl"] == "0.9.1" and "trl" not in verl
    assert Version(verl["transformers"]) < Version("5.11")
    assert Version(verl["tensordict"]) >= Version("0.10")
    # Every set shares the CPU build of torch (locks/constraints.txt).
    assert main["torch"] == verl["torch"] == "2.13.0"


def test_this_environment_holds_exactly_the_lock_make_installed_it_from():
    stamp = Path(sys.prefix) / ".installed"
    if not stamp.is_file() or not stamp.read_text().strip():
        pytest.skip("this Python's environment was not built by `make` (no lock named)")
    lock = REPO / stamp.read_text().strip()
    # `==` as pip reads it: the lock's torch==2.13.0 is met by the CPU build 2.13.0+cpu.
    wrong = {
        name: (version, metadata.version(name))
        for name, version in pins(lock).items()
        if not SpecifierSet(f"=={version}").contains(metadata.version(name), prereleases=True)
    }
    assert wrong == {}, f"installed versions differ from {lock.name} (run make setup)"
