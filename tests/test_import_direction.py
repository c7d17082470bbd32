"""The folders are the data flow, and imports follow it (docs/overview.md, "Layout").

envs -> agents -> credit -> measure -> benchmarks, with trainers after credit (beside
measure) and nothing importing benchmarks: a package imports only packages before it.
Checked on the source text (every `import` and `from ... import`, inside functions too),
so no import runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("envs", "agents", "credit", "measure", "trainers", "benchmarks", "integrations")
# Package -> the packages of ours it must never import.
FORBIDDEN = {
    "envs": set(OURS) - {"envs"},
    "agents": {"credit", "measure", "trainers", "benchmarks"},
    "credit": {"measure", "trainers", "benchmarks"},
    "measure": {"trainers", "benchmarks"},
    "trainers": {"measure", "benchmarks"},
    "integrations": {"benchmarks"},
}


def imported_packages(path: Path) -> dict[str, int]:
    """Top-level packages of ours that `path` imports -> the first line importing each."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in OURS:
                found.setdefault(top, node.lineno)
    return found


@pytest.mark.parametrize("package", list(FORBIDDEN))
def test_a_package_never_imports_a_later_one_in_the_flow(package: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for imported, line in imported_packages(path).items()
        if imported in FORBIDDEN[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_import_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("def f():\n    from measure.ground_truth import TaskMDPs\nimport credit\n")
    assert imported_packages(source) == {"measure": 2, "credit": 3}
