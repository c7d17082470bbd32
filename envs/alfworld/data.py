"""Where ALFWorld games come from, and which ones are played.

Resolution order for the data root (a folder holding `json_2.1.1/`):
1. the `data_dir` argument;
2. `$ALFWORLD_DATA`, when set and holding `json_2.1.1` (the official download);
3. the generated default set, created on first use under
   `$CREDITGYM_CACHE/alfworld` (default `~/.cache/creditgym/alfworld`).
Game selection follows ALFWorld's `AlfredTWEnv.collect_game_files`: folders with a
traj_data.json, not "movable" / "Sliced", of an allowed task type, with a game.tw-pddl whose
`solvable` is true, sorted for determinism (ALFWorld keeps `os.walk` order).
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from envs.alfworld.engine import GAME_FILE, TRAJ_FILE, GameFileError, read_game_file
from envs.alfworld.generate import GENERATOR_VERSION, SPLIT_DIRS, generate_dataset
from envs.alfworld.scenes import TASK_TYPES

# The default generated set: small enough to build in about a minute on two cores.
DEFAULT_SIZES: dict[str, int] = {
    "train": 240,
    "eval_in_distribution": 60,
    "eval_out_of_distribution": 60,
}


class ALFWorldDataError(ValueError):
    """No playable games where the env was told to look; the message says what to do."""


@dataclass(frozen=True)
class GameEntry:
    """One playable game: its file, id (path relative to the split folder), task type."""

    game_file: Path
    task_id: str
    task_type: str
    pddl_params: dict


def cache_root() -> Path:
    """`$CREDITGYM_CACHE/alfworld`, default `~/.cache/creditgym/alfworld`."""
    base = os.environ.get("CREDITGYM_CACHE") or Path.home() / ".cache" / "creditgym"
    return Path(base) / "alfworld"


def generated_root(sizes: dict[str, int], seed: int) -> Path:
    """The cache folder of one generated set (named by generator version, seed, sizes)."""
    tag = "-".join(f"{SPLIT_DIRS[split]}{sizes.get(split, 0)}" for split in SPLIT_DIRS)
    return cache_root() / f"generated-v{GENERATOR_VERSION}-seed{seed}-{tag}"


def ensure_generated(sizes: dict[str, int], seed: int, workers: int) -> Path:
    """Create the generated set on first use (one process builds, others wait on a lock)."""
    root = generated_root(sizes, seed)
    if (root / "manifest.json").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "manifest.json").exists():
            print(f"creditgym: generating the default ALFWorld games into {root} (first use)")
            generate_dataset(root, sizes, seed=seed, workers=workers)
    return root


def resolve_data_root(
    data_dir: str | Path | None, sizes: dict[str, int], seed: int, workers: int
) -> Path:
    """The folder holding `json_2.1.1`, by the resolution order of this module."""
    if data_dir is not None:
        root = Path(data_dir).expanduser()
        if not root.is_dir():
            raise ALFWorldDataError(
                f"data_dir {root} does not exist. Pass a folder that contains json_2.1.1/ "
                "(the official ALFWorld data or `python -m envs.alfworld.generate --out DIR`)."
            )
        return root
    official = os.environ.get("ALFWORLD_DATA")
    if official:
        root = Path(official).expanduser()
        if not root.is_dir():
            raise ALFWorldDataError(
                f"ALFWORLD_DATA={official} does not exist. Point it at the folder holding "
                "json_2.1.1/, or unset it to use creditgym's generated games."
            )
        if (root / "json_2.1.1").is_dir():
            return root
    return ensure_generated(sizes, seed, workers)


def collect_games(root: Path, split: str, task_types: tuple[str, ...]) -> list[GameEntry]:
    """The playable games of `split` under `root`, by ALFWorld's selection rules.

    Raises:
        ALFWorldDataError: unknown split or task type, missing split folder, or no game.
    Warns:
        for every corrupt game.tw-pddl / traj_data.json, which is skipped.
    """
    if split not in SPLIT_DIRS:
        raise ALFWorldDataError(f"unknown split {split!r}; expected one of {sorted(SPLIT_DIRS)}")
    unknown = sorted(set(task_types) - set(TASK_TYPES))
    if unknown:
        raise ALFWorldDataError(f"unknown task types {unknown}; expected a subset of {TASK_TYPES}")
    split_dir = root / "json_2.1.1" / SPLIT_DIRS[split]
    if not split_dir.is_dir():
        raise ALFWorldDataError(
            f"{split_dir} does not exist: {root} is not an ALFWorld data tree "
            "(expected json_2.1.1/{train,valid_seen,valid_unseen})."
        )
    games = []
    for traj_path in sorted(split_dir.rglob(TRAJ_FILE)):
        folder = traj_path.parent
        relative = folder.relative_to(split_dir).as_posix()
        if "movable" in relative or "Sliced" in relative:
            continue  # ALFWorld skips movable-receptacle and sliced tasks too
        try:
            traj = json.loads(traj_path.read_text())
            task_type = traj["task_type"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
            warnings.warn(
                f"skipping {traj_path}: unreadable traj_data.json ({error})", stacklevel=2
            )
            continue
        if task_type not in task_types or not (folder / GAME_FILE).exists():
            continue
        try:
            game = read_game_file(folder / GAME_FILE)
        except GameFileError as error:
            warnings.warn(f"skipping corrupt game: {error}", stacklevel=2)
            continue
        if game.get("solvable") is not True:
            continue  # ALFWorld skips games not known solvable
        games.append(
            GameEntry(folder / GAME_FILE, relative, task_type, traj.get("pddl_params", {}))
        )
    if not games:
        raise ALFWorldDataError(
            f"no playable {SPLIT_DIRS[split]} games of types {list(task_types)} under {split_dir}. "
            "Check the folder (each game needs traj_data.json and a solvable game.tw-pddl) or "
            "generate games with `python -m envs.alfworld.generate --out DIR`."
        )
    return games
