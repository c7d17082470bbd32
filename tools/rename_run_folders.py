"""Rename run folders once, from the names of the old run identity to those of the current one.

Kept as a record of what was done to results/ and to rename copies the repository's commit
did not reach: one's own results/local/runs, a sweep's folders in progress, a checkout
that had not pulled it. Run it from the repository root, as `benchmarks.run` is:

    python -m tools.rename_run_folders                       # every run folder under results/
    python -m tools.rename_run_folders results/local/runs    # the run folders under these

Until this change the hash in a run name left out, so that folders written before a field
existed kept their names: the fields added later while at their defaults (`faults`,
`env_options`, `credit_options`, `credit_convention`, `reward_channel`, `eval_every`,
`curve_episodes`), a prompt history that resolved to K = 2, the float32 dtype and
ALFWorld's generated game set of before game sets were fingerprinted. The run identity
(benchmarks/run/identity.py) now hashes every result-deciding field as resolved, so each
folder named the old way gets another name, and a run started again (a sweep resuming)
looks for it under that name.

For each run folder (a folder whose config.json records a `run_name` or an `identity`;
model exports inside a run folder are not searched), the `RunConfig` is rebuilt from its
config.json, where a field it does not record takes the value the run played with (the
field's default; K = 2 and float32 for the two fields resolved since). The folder's name
must be the one the old rules give that configuration (then it is renamed: `git mv` where
git tracks it, else a plain rename, so a sweep's unfinished folders move too) or the one
the current rules give (then it has been renamed already). Its config.json gets the new
`run_name`, `identity` and `method_config` and every `RunConfig` field. A folder named with
`--name` keeps its name; only its config.json is rewritten. Then every old name is replaced
by its new one in the text files under the same folders (reports, CSVs listing runs) and
in the repository's README.md, docs/ and benchmarks/configs/.

Nothing is changed when a problem is found first (one line, exit status 2): a target name
that exists as another folder, a folder whose name follows from its config.json by neither
rule, or a folder whose lock (benchmarks/lock.py) a live process holds; a lock file left by
a killed process moves with its folder. A second run renames nothing and says so.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from creditgym.benchmarks import lock
from creditgym.benchmarks.cli import UsageError
from creditgym.benchmarks.run import RunConfig, resolve
from creditgym.benchmarks.run.identity import hashed_name, method_config
from creditgym.report import records

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")  # what a rename's `examine` makes of a run folder
RUN_FIELDS = {spec.name: spec for spec in dataclasses.fields(RunConfig)}

# Each field the old identity left out, with the value (as JSON) at which it left it out.
OLD_OMITTED: dict[str, Any] = {
    "faults": [],
    "env_options": [],
    "credit_options": [],
    "credit_convention": "creditgym",
    "reward_channel": "return",
    "eval_every": 0,
    "curve_episodes": 32,
    "history_len": 2,
    "dtype": "float32",
    # ALFWorld-v0's games before game sets were fingerprinted (envs/alfworld/data.py).
    "game_set": {
        "kind": "generated",
        "generator_version": 1,
        "seed": 0,
        "sizes": {"train": 240, "eval_in_distribution": 60, "eval_out_of_distribution": 60},
    },
}
# What a run played with where its config.json predates the field: the prompt history was
# K = 2 everywhere and the policy float32 before either was an option.
UNRECORDED = {"history_len": 2, "dtype": "float32"}
# Text files that may name run folders: reports, CSVs of runs, logs, configs.
TEXT_SUFFIXES = frozenset({".md", ".csv", ".html", ".txt", ".log", ".toml", ".json"})
# A run name as a word: it ends in the hash's six hex digits.
NAME_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*_[0-9a-f]{6}(?![A-Za-z0-9])")


class Folder(NamedTuple):
    """One run folder: where it is, what its config.json records, what it is to be called."""

    path: Path
    recorded: dict[str, Any]
    config: dict[str, Any]  # config.json as it is to be written
    new_name: str
    old_name: str | None  # None: named with --name


def old_identity(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The identity the old rules hashed: `identity` less the fields at OLD_OMITTED."""
    return {
        key: value
        for key, value in identity.items()
        if key not in OLD_OMITTED or value != OLD_OMITTED[key]
    }


def rebuilt_config(recorded: Mapping[str, Any]) -> RunConfig:
    """The `RunConfig` a run folder's config.json records (JSON lists as tuples)."""
    values = {**UNRECORDED, **{key: recorded[key] for key in RUN_FIELDS if key in recorded}}
    values = {key: tuple(v) if isinstance(v, list) else v for key, v in values.items()}
    return RunConfig(**{**values, "out": Path(values.get("out", RunConfig.out))})


def run_folders(root: Path) -> Iterator[Path]:
    """Every run folder under `root`, in sorted order, not looking inside one."""
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        if records.CONFIG_FILE in files:
            recorded = json.loads((Path(folder) / records.CONFIG_FILE).read_text())
            if "run_name" in recorded or "identity" in recorded:
                subfolders.clear()
                yield Path(folder)


def examine(path: Path) -> Folder:
    """What to do with the run folder `path`.

    Raises:
        UsageError: its name follows from its config.json by neither rule.
    """
    recorded = records.read_json(path / records.CONFIG_FILE)
    try:
        cfg = rebuilt_config(recorded)
        plan = resolve(cfg)
        identity = plan.identity
        new_name = plan.name
        old_name = None if cfg.name else hashed_name(plan, old_identity(identity))
        row = method_config(plan)
    except (UsageError, TypeError, ValueError) as error:
        raise UsageError(f"{path}: its config.json is no RunConfig here: {error}") from error
    if old_name is not None and path.name not in (old_name, new_name):
        raise UsageError(
            f"{path}: its config.json gives the old name {old_name} and the new {new_name}, "
            "neither of which it has (ALFWORLD_DATA set to other data than it played?)"
        )
    if old_name is None and recorded.get("identity") not in (old_identity(identity), identity):
        # `benchmarks.run` refuses to resume such a folder; rewriting would hide why.
        return Folder(path, recorded, recorded, new_name, old_name)
    config = {
        **recorded,
        **json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
        "out": recorded.get("out", str(cfg.out)),
        "game_set": recorded.get("game_set", identity.get("game_set")),
        "run_name": new_name,
        "identity": identity,
        "method_config": row,
    }
    return Folder(path, recorded, config, new_name, old_name)


def lock_held(path: Path) -> bool:
    """A live process holds the run folder's lock (a file left by a killed one is free)."""
    lock_file = lock.run_folder_lock(path)
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def problems(folders: Sequence[Folder]) -> list[str]:
    """Why the renames cannot all be done: taken targets and folders being written."""
    found = []
    targets: dict[Path, Path] = {}
    for folder in folders:
        target = folder.path.with_name(folder.new_name)
        if target != folder.path and (target.exists() or target in targets):
            other = targets.get(target, target)
            found.append(f"{folder.path} would become {target}, which {other} already is")
        targets[target] = folder.path
        if folder.config != folder.recorded and lock_held(folder.path):
            holder = lock.holder_text(lock.run_folder_lock(folder.path))
            found.append(f"{folder.path} is being written by {holder}; stop it first")
    return found


def tracked(path: Path) -> bool:
    """git tracks a file under `path` (False outside a git work tree)."""
    listed = subprocess.run(
        ["git", "-C", str(path.parent), "ls-files", "--", path.name],
        capture_output=True,
        text=True,
    )
    return listed.returncode == 0 and bool(listed.stdout.strip())


def rename(path: Path, new_name: str) -> str:
    """Rename the folder, with `git mv` where git tracks it (untracked files move too)."""
    if tracked(path):
        subprocess.run(["git", "-C", str(path.parent), "mv", path.name, new_name], check=True)
        return "git mv"
    path.rename(path.with_name(new_name))
    return "renamed"


def text_files(roots: Sequence[Path]) -> Iterator[Path]:
    """The text files that may name run folders: under `roots`, and the repository's
    README.md, docs/ and sweep configs."""
    seen = set()
    for root in [*roots, REPO / "README.md", REPO / "docs", REPO / "benchmarks" / "configs"]:
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in candidates:
            if path.suffix in TEXT_SUFFIXES and path.is_file() and path not in seen:
                seen.add(path)
                yield path


def replace_names(paths: Iterator[Path], new_of: Mapping[str, str]) -> list[Path]:
    """Replace every old name by its new one in `paths`; the files changed."""
    changed = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        updated = NAME_WORD.sub(lambda match: new_of.get(match[0], match[0]), text)
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            changed.append(path)
    return changed


def examine_all(
    roots: Sequence[Path],
    examine: Callable[[Path], T],
    problems: Callable[[list[T]], list[str]],
) -> list[T]:
    """`examine` of every run folder under `roots`; a UsageError naming the first of
    `problems` (and how many there are) before anything is changed."""
    for root in roots:
        if not root.is_dir():
            raise UsageError(f"{root} is no folder")
    folders = [examine(path) for root in roots for path in run_folders(root)]
    found = problems(folders)
    if found:
        raise UsageError(f"{found[0]} ({len(found)} problem(s)); nothing was changed")
    return folders


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and set(args) <= {"-h", "--help"}:
        print(__doc__)
        return 0
    roots = [Path(arg) for arg in args] or [REPO / "results"]
    try:
        folders = examine_all(roots, examine, problems)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    renamed: dict[str, int] = {}
    rewritten = 0
    for folder in folders:
        if folder.config != folder.recorded:
            records.atomic_write_json(folder.path / records.CONFIG_FILE, folder.config)
            rewritten += 1
        if folder.path.name != folder.new_name:
            how = rename(folder.path, folder.new_name)
            print(f"{how} {folder.path} -> {folder.new_name}")
            where = str(folder.path.parent)
            renamed[where] = renamed.get(where, 0) + 1
    new_of = {f.old_name: f.new_name for f in folders if f.old_name and f.old_name != f.new_name}
    changed = replace_names(text_files(roots), new_of)
    for path in changed:
        print(f"replaced old run names in {path}")
    if not renamed and not rewritten and not changed:
        print(f"nothing to rename: the {len(folders)} run folder(s) already have their names")
        return 0
    counts = ", ".join(f"{count} in {where}" for where, count in sorted(renamed.items()))
    print(
        f"renamed {sum(renamed.values())} of {len(folders)} run folder(s)"
        f"{': ' + counts if counts else ''}; rewrote {rewritten} config.json; "
        f"replaced old names in {len(changed)} file(s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
