"""Write or check the lock files in locks/: `python -m creditgym.benchmarks.dependency_locks`.

pyproject.toml holds ranges; each lock is one exact resolution of them for CPython 3.11 on
x86-64 Linux (locks/README.md says why uv and what each set is for):
- `core.txt`: the core dependencies alone, what `pip install creditgym` gives env users;
- `main.txt`: the dev, train and trl extras, the environment `make` builds (`.venv`):
  TRL's own resolution, so the TRL adapter's tests run against it;
- `verl.txt`: the dev, train and verl extras, verl 0.9.1 with its own dependencies
  (transformers below 5.11), the second environment `make test` builds (`.venv-verl`)
  for the verl adapter's tests.

Each lock starts with the sha256 of pyproject's dependency tables (`dependency_digest`), so
`--check` (and tests/test_packaging_lock.py) tells offline and at once whether a lock is
older than pyproject. Writing needs uv (`make lock` installs it) and a package registry.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

from creditgym.benchmarks.cli import exit_on_usage_error, parse_arguments, prog_of

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCKS_DIR = REPO_ROOT / "locks"
DIGEST_PREFIX = "# pyproject-sha256: "
# What every lock is resolved under (the CPU build of torch; the file says why).
CONSTRAINTS = LOCKS_DIR / "constraints.txt"


class Lock(NamedTuple):
    """One lock file: its name in locks/ and the extras resolved with the core set."""

    name: str
    extras: tuple[str, ...]


LOCKS = (
    Lock("core.txt", ()),
    Lock("main.txt", ("dev", "train", "trl")),
    Lock("verl.txt", ("dev", "train", "verl")),
)


def dependency_digest(repo: Path = REPO_ROOT) -> str:
    """sha256 of what a resolution reads: pyproject's requires-python, dependencies and
    extras (list order kept, so reordering counts as a change) and locks/constraints.txt."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    tables = {
        "requires-python": project.get("requires-python", ""),
        "dependencies": project.get("dependencies", []),
        "optional-dependencies": project.get("optional-dependencies", {}),
        "constraints": (repo / CONSTRAINTS.relative_to(REPO_ROOT)).read_text(),
    }
    return hashlib.sha256(json.dumps(tables, sort_keys=False).encode()).hexdigest()


def recorded_digest(lock_path: Path) -> str | None:
    """The digest a lock file was written for (None if it has no digest line)."""
    for line in lock_path.read_text().splitlines():
        if line.startswith(DIGEST_PREFIX):
            return line.removeprefix(DIGEST_PREFIX).strip()
    return None


def pins(lock_path: Path) -> dict[str, str]:
    """{normalised name: version} of every `name==version` line of a lock file."""
    found = {}
    for line in lock_path.read_text().splitlines():
        requirement = line.split("#")[0].split(";")[0].strip()
        if "==" in requirement:
            name, version = requirement.split("==", 1)
            found[name.strip().lower().replace("_", "-").replace(".", "-")] = version.strip()
    return found


def stale_locks(repo: Path = REPO_ROOT) -> list[str]:
    """One line per lock of `repo` that is missing or was written for other dependency
    tables or constraints than the ones there now."""
    digest = dependency_digest(repo)
    problems = []
    for lock in LOCKS:
        path = repo / "locks" / lock.name
        if not path.is_file():
            problems.append(f"locks/{lock.name} is missing")
        elif recorded_digest(path) != digest:
            problems.append(
                f"locks/{lock.name} was written for other dependencies than pyproject.toml's "
                "and locks/constraints.txt"
            )
    return problems


def compile_lock(lock: Lock, uv: str) -> str:
    """The text of `lock`: uv's resolution under a header that records the digest."""
    command = [uv, "pip", "compile", "pyproject.toml", "--no-header", "--annotation-style=line"]
    command += ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"]
    command += [f"--extra={extra}" for extra in lock.extras]
    # uv reads no pip settings: the folder where pip finds the CPU build of torch is
    # passed on, so uv resolves that build's dependencies (no nvidia-* packages).
    find_links = os.environ.get("PIP_FIND_LINKS", "")
    command += [f"--find-links={folder}" for folder in find_links.split()]
    command += ["--constraint", str(CONSTRAINTS.relative_to(REPO_ROOT))]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"error: uv pip compile failed for {lock.name}:\n{result.stderr}")
    # `torch==2.13.0`, not the file's `2.13.0+cpu`: pip takes the CPU build where it lies
    # on disk (a CPU machine of this project) and the registry's build elsewhere.
    body = re.sub(r"^torch==([^+\s]+)\+\S+", r"torch==\1", result.stdout, flags=re.M)
    extras = ",".join(lock.extras) or "none"
    header = [
        f"# creditgym lock {lock.name}: the core dependencies and extras [{extras}],",
        "# resolved by uv for CPython 3.11 on x86-64 Linux. Written by `make lock`",
        "# (python -m creditgym.benchmarks.dependency_locks); do not edit by hand.",
        f"{DIGEST_PREFIX}{dependency_digest()}",
    ]
    return "\n".join(header) + "\n" + body


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only check that every lock matches pyproject"
    )
    parser.add_argument("--uv", default="uv", help="the uv program to resolve with (uv)")
    args = parse_arguments(parser, argv, prog_of("dependency_locks"))
    if args.check:
        problems = stale_locks()
        for problem in problems:
            print(f"error: {problem}; run `make lock`", file=sys.stderr)
        return 1 if problems else 0
    for lock in LOCKS:
        text = compile_lock(lock, args.uv)
        (LOCKS_DIR / lock.name).write_text(text)
        print(f"{lock.name}: {len(pins(LOCKS_DIR / lock.name))} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
