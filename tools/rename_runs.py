"""Rename run folders named from env options as typed to the names of their parsed form.

Kept as a record of what was done to results/ and to rename copies the repository's commit
did not reach (one's own results/local/runs, a sweep's folders in progress). Run it from
the repository root, as `benchmarks.run` is:

    python -m tools.rename_runs                           # dry run: says what would change
    python -m tools.rename_runs --apply                   # every run folder under results/
    python -m tools.rename_runs --apply results/local/runs

A run's identity once held `--env-options` as typed; it now holds them parsed by the env's
options class (`EnvInfo.options`), off their defaults, in the class's declaration order
(`EnvOptions.canonical`). A folder whose options were typed that way already keeps its
name (`delay=16 variance=high`); one that spelled out a default (`length=10` on Umbrella,
`num_keys=1` on KeyDoor), another order or another spelling of a value gets the name of
its parsed form, and its config.json records the parsed options with the new `run_name`
and `identity`. Nothing else of a run changes: the env played was the same (a default
spelled out is the default).

For each run folder (tools/rename_run_folders.py's `run_folders`), the `RunConfig` is
rebuilt from its config.json and resolved (`benchmarks.run.resolve`). Its name must be the
one the old rule gives that configuration (the options as recorded, hashed as text: then
it is renamed, `git mv` where git tracks it) or the one the current rule gives (then it
has been renamed already). A folder named with `--name` keeps its name; its config.json
gets the new `identity`, which a resumed run compares. Then every old name is replaced
by its new one in the text files under the same folders (reports, CSVs listing runs) and
in the repository's README.md, docs/ and benchmarks/configs/.

Nothing is changed when a problem is found first (one line, exit status 2): a target name
that exists as another folder, a folder whose name follows from its config.json by
neither rule, or a folder whose lock a live process holds. A second run renames nothing
and says so.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from creditgym.benchmarks.cli import UsageError
from creditgym.benchmarks.run import resolve
from creditgym.benchmarks.run.identity import hashed_name, method_config, run_identity
from creditgym.report import records
from tools.rename_run_folders import (
    REPO,
    Folder,
    examine_all,
    problems,
    rebuilt_config,
    rename,
    replace_names,
    text_files,
)

APPLY = "--apply"


def examine(path: Path) -> Folder:
    """What to do with the run folder `path` (`Folder.old_name` None: named with --name).

    Raises:
        UsageError: its name follows from its config.json by neither rule.
    """
    recorded = records.read_json(path / records.CONFIG_FILE)
    try:
        cfg = rebuilt_config(recorded)
        plan = resolve(cfg)
        # The old rule: the same plan with the options as typed (recorded) in its identity.
        as_typed = dataclasses.replace(plan.config, env_options=cfg.env_options)
        old_plan = dataclasses.replace(plan, config=as_typed)
        old_name = None if cfg.name else hashed_name(old_plan, run_identity(old_plan))
        identity = plan.identity
    except (UsageError, TypeError, ValueError) as error:
        raise UsageError(f"{path}: its config.json is no RunConfig here: {error}") from error
    if old_name is not None and path.name not in (old_name, plan.name):
        raise UsageError(
            f"{path}: its config.json gives the old name {old_name} and the new {plan.name}, "
            "neither of which it has"
        )
    config: dict[str, Any] = {
        **recorded,
        "env_options": list(plan.config.env_options),
        "run_name": plan.name,
        "identity": identity,
        "method_config": json.loads(json.dumps(method_config(plan), default=str)),
    }
    return Folder(path, recorded, config, plan.name, old_name)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and set(args) <= {"-h", "--help"}:
        print(__doc__)
        return 0
    apply = APPLY in args
    roots = [Path(arg) for arg in args if arg != APPLY] or [REPO / "results"]
    try:
        folders = examine_all(roots, examine, problems)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    moved = [f for f in folders if f.path.name != f.new_name]
    rewritten = [f for f in folders if f.config != f.recorded]
    for folder in moved:
        print(f"{folder.path} -> {folder.new_name}")
    if not apply:
        print(
            f"dry run: {len(moved)} of {len(folders)} run folder(s) to rename, "
            f"{len(rewritten)} config.json to rewrite; {APPLY} does it"
        )
        return 0
    for folder in rewritten:
        records.atomic_write_json(folder.path / records.CONFIG_FILE, folder.config)
    for folder in moved:
        rename(folder.path, folder.new_name)
    new_of = {f.old_name: f.new_name for f in moved if f.old_name}
    changed = replace_names(text_files(roots), new_of)
    for path in changed:
        print(f"replaced old run names in {path}")
    if not moved and not rewritten and not changed:
        print(f"nothing to rename: the {len(folders)} run folder(s) already have their names")
        return 0
    print(
        f"renamed {len(moved)} of {len(folders)} run folder(s); rewrote {len(rewritten)} "
        f"config.json; replaced old names in {len(changed)} file(s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
