"""The folders are the data flow, and imports follow it (docs/overview.md, "Layout").

envs -> models -> agents -> credit -> measure -> trainers -> report -> benchmarks, with trainers
beside measure (neither imports the other) and nothing importing benchmarks: a package
imports only packages before it.
Checked on the source text, so no import runs. Three ways one folder reaches another:
- an import of `creditgym.<folder>` (`import`, `from ... import`, inside functions too;
  `from creditgym import <folder>`; a bare `<folder>` import is read the same way);
- a relative import (`from ..credit import x`), resolved against the file's own folder;
- a loader string that is imported later, as Gymnasium's entry points are:
  `"creditgym.<folder>.module[:name]"` or `"<folder>.module:name"`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from creditgym import FOLDERS

ROOT = Path(__file__).resolve().parents[1]
# The project's folders in the order of the flow (creditgym/__init__.py lists them once).
OURS = FOLDERS
# Package -> the packages of ours it must never import.
FORBIDDEN = {
    "envs": set(OURS) - {"envs"},
    "models": set(OURS) - {"envs", "models"},
    "agents": {"credit", "measure", "trainers", "report", "benchmarks"},
    "credit": {"measure", "trainers", "report", "benchmarks"},
    "measure": {"trainers", "report", "benchmarks"},
    "trainers": {"measure", "report", "benchmarks"},
    "report": {"benchmarks", "integrations"},
    "integrations": {"benchmarks"},
}
# Violations known today, each with the work that removes it. A listed violation that is
# gone fails `test_every_known_violation_is_still_there`, so the list cannot outlive it.
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()
_FOLDERS = "|".join(OURS)
# "creditgym.<folder>..." with or without ":name"; a bare "<folder>.module:name" needs the
# colon, so that a program name such as "benchmarks.run" is not read as a loader.
LOADER = re.compile(
    rf"creditgym\.(?P<named>{_FOLDERS})(?:\.\w+)*(?::\w+)?"
    rf"|(?P<bare>{_FOLDERS})(?:\.\w+)+:\w+"
)


def _folder_of(dotted: str) -> str | None:
    """The folder of ours a dotted module name lies in (`creditgym.` prefix or not)."""
    parts = dotted.split(".")
    if parts[0] == "creditgym":
        parts = parts[1:]
    return parts[0] if parts and parts[0] in OURS else None


def reached_packages(path: Path, root: Path = ROOT) -> dict[str, int]:
    """Packages of ours that `path` (a file under `root`) imports or names in a loader
    string -> the first line doing so."""
    package = list(path.relative_to(root).parent.parts)
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module.split(".") if node.module else []
            if node.level:
                # `from .x` is the file's own package; each further dot one folder up.
                base = package[: len(package) - node.level + 1] + base
            if base in ([], ["creditgym"]):  # `from creditgym import credit`, `from .. import x`
                names = [alias.name for alias in node.names]
            else:
                names = [".".join(base)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = LOADER.fullmatch(node.value)
            names = [match.group("named") or match.group("bare")] if match else []
        else:
            continue
        for name in names:
            folder = _folder_of(name)
            if folder is not None:
                found[folder] = min(node.lineno, found.get(folder, node.lineno))
    return found


def violations(package: str, root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(file, forbidden package, first line) for the files under `root/package`."""
    return sorted(
        (
            (path.relative_to(root).as_posix(), reached, line)
            for path in (root / package).rglob("*.py")
            for reached, line in reached_packages(path, root).items()
            if reached in FORBIDDEN[package]
        ),
        key=lambda found: (found[0], found[2]),
    )


def unexpected(package: str, root: Path = ROOT) -> list[str]:
    """`file:line reaches package` for each violation not in KNOWN_VIOLATIONS."""
    return [
        f"{file}:{line} reaches {reached}"
        for file, reached, line in violations(package, root)
        if (file, reached) not in KNOWN_VIOLATIONS
    ]


@pytest.mark.parametrize("package", list(FORBIDDEN))
def test_a_package_never_reaches_a_later_one_in_the_flow(package: str) -> None:
    wrong = unexpected(package)
    assert not wrong, "\n".join(wrong)


def test_every_known_violation_is_still_there() -> None:
    found = {(file, reached) for package in FORBIDDEN for file, reached, _ in violations(package)}
    assert found >= KNOWN_VIOLATIONS, f"fixed, so drop from the list: {KNOWN_VIOLATIONS - found}"


PLANTED = '''\
"""A docstring naming creditgym.trainers.core:Trainer is text, not a loader."""
import creditgym.envs.registry
from creditgym.agents import trajectory
from creditgym import measure
import numpy


def f():
    from creditgym.benchmarks.records import read_episodes

    return read_episodes


from .. import integrations
from ..credit.grpo import GRPO
LOADER = "creditgym.trainers.warm_start:load_small_warm"
BARE = "envs.keydoor.env:KeyDoorEnv"
PROGRAM = "benchmarks.run"
'''


def test_the_check_sees_imports_relative_imports_and_loader_strings(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    source = tmp_path / "agents" / "planted.py"
    source.write_text(PLANTED)
    assert reached_packages(source, tmp_path) == {
        "envs": 2,
        "agents": 3,
        "measure": 4,
        "benchmarks": 9,
        "integrations": 14,
        "credit": 15,
        "trainers": 16,
    }
    # The module docstring, `numpy` and the program name are not counted; the string line
    # 17 names envs, already counted on line 2.


def test_the_flow_check_fails_on_a_planted_violation(tmp_path: Path) -> None:
    # A credit module that names a trainer's loader as a string, and one that imports
    # measure/ relatively: both reported, with their lines.
    (tmp_path / "credit").mkdir()
    (tmp_path / "credit" / "planted.py").write_text(
        'LOADER = "trainers.core:Trainer"\n\n\ndef f():\n    from ..measure import pools\n'
    )
    assert unexpected("credit", tmp_path) == [
        "credit/planted.py:1 reaches trainers",
        "credit/planted.py:5 reaches measure",
    ]


def test_the_models_floor_may_not_name_a_loader_above_it(tmp_path: Path) -> None:
    # The loop the model registry once had: a loader string naming a trainer's module, and
    # an import of agents/ (the rollouts run a model, not the other way round).
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "planted.py").write_text(
        "from creditgym.envs import registry\nfrom creditgym.agents import trajectory\n"
        'LOADER = "creditgym.trainers.warm_start:load_small_warm"\n'
    )
    assert unexpected("models", tmp_path) == [
        "models/planted.py:2 reaches agents",
        "models/planted.py:3 reaches trainers",
    ]


def test_nothing_before_report_reads_it_and_report_reads_no_command(tmp_path: Path) -> None:
    # measure/ reading a statistic of report/ is reported; report/ may read trainers/, not
    # benchmarks/.
    (tmp_path / "measure").mkdir()
    (tmp_path / "measure" / "planted.py").write_text("from creditgym.report import stats\n")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "planted.py").write_text(
        "from creditgym.trainers import core\nfrom creditgym.benchmarks import common\n"
    )
    assert unexpected("measure", tmp_path) == ["measure/planted.py:1 reaches report"]
    assert unexpected("report", tmp_path) == ["report/planted.py:2 reaches benchmarks"]
