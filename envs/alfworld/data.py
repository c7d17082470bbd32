"""Where ALFWorld games come from, and which ones are played.

Resolution order for the data root (a folder holding `json_2.1.1/`):
1. the `data_dir` argument;
2. `$ALFWORLD_DATA`, when set (the official download);
3. the generated default set, created on first use under
   `$CREDITGYM_CACHE/alfworld` (default `~/.cache/creditgym/alfworld`).
A folder named by 1 or 2 must hold `json_2.1.1/`: one that does not (a typo, the
`json_2.1.1` folder itself, a split folder) is an `ALFWorldDataError` naming the folder
expected, never a silent fall-back to generated games.

Which games a run played is its `DataFingerprint` (`game_set_fingerprint`): a generated
set by its generator version, seed and sizes (generation is deterministic, and the cache
folder is named by them); a named folder by a hash of the sorted task ids of each split.
Game selection follows ALFWorld's `AlfredTWEnv.collect_game_files`: folders with a
traj_data.json, not "movable" / "Sliced", of an allowed task type, with a game.tw-pddl whose
`solvable` is true, sorted for determinism (ALFWorld keeps `os.walk` order).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditgym.envs.alfworld import ALFWORLD_DEFAULT_DATA
from creditgym.envs.alfworld.engine import GAME_FILE, TRAJ_FILE, GameFileError, read_game_file
from creditgym.envs.alfworld.generate import GENERATOR_VERSION, SPLIT_DIRS, generate_dataset
from creditgym.envs.alfworld.scenes import TASK_TYPES
from creditgym.envs.alfworld_options import ALFWorldOptions
from creditgym.envs.registry import DataFingerprint

logger = logging.getLogger(__name__)

# The folder of ALFWorld's data tree, as the official download names it.
DATA_FOLDER = "json_2.1.1"
# The default generated set: small enough to build in about a minute on two cores.
DEFAULT_SIZES: dict[str, int] = {
    "train": 240,
    "eval_in_distribution": 60,
    "eval_out_of_distribution": 60,
}
DEFAULT_SEED = ALFWorldOptions().generated_seed
# Hex digits kept of a split's task-id hash: enough that two sets never collide by chance.
ID_HASH_DIGITS = 16


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
            logger.info("generating the default ALFWorld games into %s (first use)", root)
            generate_dataset(root, sizes, seed=seed, workers=workers)
    return root


def check_data_root(root: Path, named_by: str) -> Path:
    """`root` if it holds json_2.1.1/, else an `ALFWorldDataError` saying which folder to name.

    `named_by` says where the path came from (`ALFWORLD_DATA=...`, `data_dir ...`).
    """
    if (root / DATA_FOLDER).is_dir():
        return root
    if not root.is_dir():
        problem = "is not a folder" if root.exists() else "does not exist"
        raise ALFWorldDataError(
            f"{named_by} {problem}. Point it at the folder holding {DATA_FOLDER}/ (the "
            "official ALFWorld data or `python -m creditgym.envs.alfworld.generate --out DIR`)."
        )
    # Inside the tree (json_2.1.1 itself, a split, a game): the right folder is known.
    for folder in (root, *root.parents):
        if folder.name == DATA_FOLDER:
            raise ALFWorldDataError(
                f"{named_by} points inside the data tree; point it at {folder.parent}, "
                f"the folder holding {DATA_FOLDER}/."
            )
    splits = ",".join(sorted(set(SPLIT_DIRS.values())))
    raise ALFWorldDataError(
        f"{named_by} holds no {DATA_FOLDER}/ folder; expected {root}/{DATA_FOLDER}/"
        f"{{{splits}}}/ (the official ALFWorld data or `python -m creditgym.envs.alfworld.generate "
        "--out DIR`)."
    )


def named_data_root(data_dir: str | Path | None) -> Path | None:
    """The data folder named by `data_dir`, else by `$ALFWORLD_DATA`, checked; None when
    neither names one (the generated set is played)."""
    if data_dir is not None:
        return check_data_root(Path(data_dir).expanduser(), f"data_dir {data_dir}")
    official = os.environ.get("ALFWORLD_DATA")
    if not official:
        return None
    root = Path(official).expanduser()
    # alfworld, when imported before creditgym, sets an unset ALFWORLD_DATA to its default
    # folder (envs/alfworld/__init__.py): that folder without data means "unset".
    if root.absolute() == ALFWORLD_DEFAULT_DATA and not (root / DATA_FOLDER).is_dir():
        return None
    return check_data_root(root, f"ALFWORLD_DATA={official}")


def split_task_ids(root: Path, split: str) -> list[str]:
    """Sorted ids (folder paths relative to the split folder) of every game of a split."""
    split_dir = root / DATA_FOLDER / SPLIT_DIRS[split]
    return sorted(
        path.parent.relative_to(split_dir).as_posix() for path in split_dir.rglob(TRAJ_FILE)
    )


def game_set_fingerprint(
    named_root: Path | None, sizes: Mapping[str, int], seed: int
) -> DataFingerprint:
    """Which games are played from `named_root` (`named_data_root`'s answer; None: the
    generated set of these sizes and seed), without generating or reading any game.

    A generated set is described by what generates it; a named folder (the official data,
    a generated copy, a hand-made tree) by the count and a hash of the sorted task ids of
    each split, which tells two folders apart without reading their games.
    """
    if named_root is None:
        description: dict[str, Any] = {
            "kind": "generated",
            "generator_version": GENERATOR_VERSION,
            "seed": seed,
            "sizes": dict(sizes),
        }
        return DataFingerprint(description)
    games = {}
    for split in SPLIT_DIRS:
        ids = split_task_ids(named_root, split)
        digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:ID_HASH_DIGITS]
        games[split] = {"count": len(ids), "task_ids_sha256": digest}
    return DataFingerprint({"kind": "folder", "games": games})


def data_fingerprint(env_kwargs: Mapping[str, Any]) -> DataFingerprint:
    """`EnvInfo.data_fingerprint` of ALFWorld-v0: the game set of `ALFWorldEnv(**env_kwargs)`."""
    sizes = env_kwargs.get("generated_sizes")
    return game_set_fingerprint(
        named_data_root(env_kwargs.get("data_dir")),
        DEFAULT_SIZES if sizes is None else sizes,
        env_kwargs.get("generated_seed", DEFAULT_SEED),
    )


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
            "generate games with `python -m creditgym.envs.alfworld.generate --out DIR`."
        )
    return games
