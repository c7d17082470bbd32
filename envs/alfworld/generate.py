"""Procedural ALFWorld games, written in ALFWorld's own format, checked solvable.

Each game is a folder `<task_type>-<Object>-<Toggle>-<Receptacle>-<scene>/trial_<seed>/`
holding `game.tw-pddl` (domain, grammar with the task sentence, problem, `solvable`, and
the planner's `walkthrough`) and `traj_data.json` (`task_type`, `pddl_params`, `scene`),
under `<root>/json_2.1.1/{train,valid_seen,valid_unseen}` exactly like the official data,
so the same loader reads both.

A room is one of ALFRED's AI2-THOR floor plans (`scenes.py`): its receptacle and object
types, a random number of each receptacle (1..the plan's count), objects placed only where
ALFWorld's placement table allows. Splits follow ALFWorld (Shridhar et al. 2021):
train and valid_seen (in-distribution) draw from ALFRED's training floor plans and from
object-receptacle-room combinations outside a held-out fifth; valid_unseen
(out-of-distribution) draws from the held-out floor plans *and* only held-out
combinations, so no OOD combination ever occurs in train. Every kept game was solved by
fast-downward on textworld's engine and its plan replayed to a win.

Usage: python -m creditgym.envs.alfworld.generate --out DIR --train 3500 --valid-seen 140 \
    --valid-unseen 134 --seed 0 --workers 2
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import alfworld.gen.goal_library as goal_library
from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH
from tqdm import tqdm

from creditgym.cli import run_script
from creditgym.envs.alfworld import scenes
from creditgym.envs.alfworld.engine import GAME_FILE, TRAJ_FILE, AlfredEngine, GameFileError

GENERATOR_VERSION = 1
# Split name in the env -> folder name in json_2.1.1 (as the papers map them).
SPLIT_DIRS: dict[str, str] = {
    "train": "train",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
# One object-receptacle-room combination in `OOD_FRACTION_DENOMINATOR` is held out of
# train / valid_seen and is the only kind valid_unseen uses.
OOD_FRACTION_DENOMINATOR = 5
MAX_INSTANCES = 3  # `constants.MAX_NUM_OF_OBJ_INSTANCES`
MAX_DISTRACTOR_TYPES = 6
MAX_ATTEMPTS = 200


class GenerationError(RuntimeError):
    """The generator could not build a game for a request (e.g. an impossible filter)."""


@dataclass(frozen=True)
class GameDraft:
    """One sampled game before solving: the PDDL problem and its description.

    Attributes:
        task_type: one of `scenes.TASK_TYPES`.
        object_target / parent_target / toggle_target: ALFRED's `pddl_params` (types).
        scene_num: the AI2-THOR floor plan the room comes from.
        problem: the PDDL problem text.
        task_sentence: the goal as ALFWorld words it (without the final period).
    """

    task_type: str
    object_target: str
    parent_target: str
    toggle_target: str
    scene_num: int
    problem: str
    task_sentence: str


def is_ood_combination(object_type: str, target_type: str, room_kind: str) -> bool:
    """Is this object-receptacle(or lamp)-room combination held out for valid_unseen?

    A stable hash (not Python's salted `hash`) so every process and run agrees.
    """
    digest = hashlib.sha256(f"{object_type}|{target_type}|{room_kind}".encode()).digest()
    return digest[0] % OOD_FRACTION_DENOMINATOR == 0


def mangle(thor_id: str) -> str:
    """AI2-THOR id -> PDDL name, as ALFWorld writes them (arXiv 2010.03768)."""
    for char, word in (
        ("|", "_bar_"),
        ("-", "_minus_"),
        ("+", "_plus_"),
        (".", "_dot_"),
        (",", "_comma_"),
    ):
        thor_id = thor_id.replace(char, word)
    return thor_id


def _coordinate(rng: random.Random) -> str:
    value = rng.uniform(-3.5, 3.5)
    return f"{'+' if value >= 0 else '-'}{abs(value):05.2f}"


def _thor_id(rng: random.Random, type_name: str, used: set[str]) -> str:
    """A unique AI2-THOR style id; basins are `Sink|x|y|z|SinkBasin` as in THOR."""
    while True:
        position = "|".join(_coordinate(rng) for _ in range(3))
        if type_name in ("SinkBasin", "BathtubBasin"):
            thor_id = f"{type_name.removesuffix('Basin')}|{position}|{type_name}"
        else:
            thor_id = f"{type_name}|{position}"
        if thor_id not in used:
            used.add(thor_id)
            return thor_id


def _location(rng: random.Random, used: set[str]) -> str:
    """A unique navigation point `loc|x|z|rotation|horizon` (grid units, as ALFRED)."""
    while True:
        x, z = rng.randint(-12, 12), rng.randint(-12, 12)
        loc = f"loc|{x}|{z}|{rng.randint(0, 3)}|{rng.choice((0, 30, 45, 60))}"
        if loc not in used:
            used.add(loc)
            return loc


def _task_candidates(
    task_type: str, inventory: scenes.SceneInventory, ood: bool
) -> list[tuple[str, str, str]]:
    """(object, parent receptacle, toggle) type triples valid in this room and split."""
    room = inventory.room_kind
    receptacle_types = [rtype for rtype, _ in inventory.receptacle_counts]
    candidates = []
    for otype in inventory.object_types:
        if task_type == "look_at_obj_in_light":
            candidates += [
                (otype, "", lamp)
                for lamp in inventory.lamp_types
                if is_ood_combination(otype, lamp, room) == ood
            ]
            continue
        if task_type in scenes.ACTION_OBJECTS and (
            otype not in scenes.ACTION_OBJECTS[task_type]
            or scenes.ACTION_APPLIANCE[task_type] not in receptacle_types
        ):
            continue
        for rtype in receptacle_types:
            if (
                scenes.can_contain(rtype, otype)
                and rtype != scenes.ACTION_APPLIANCE.get(task_type)
                and is_ood_combination(otype, rtype, room) == ood
                # another receptacle of the object's type must exist to start it in
                and any(
                    scenes.can_contain(other, otype) and other != rtype
                    for other in receptacle_types
                )
            ):
                candidates.append((otype, rtype, ""))
    return candidates


def _forbidden_start_types(task_type: str, parent: str) -> set[str]:
    """Receptacle types the target may not start in (the goal must not hold at start)."""
    forbidden = {parent} if parent else set()
    if task_type in scenes.ACTION_APPLIANCE:
        # ALFRED's filters: the target does not start in the sink / microwave / fridge.
        forbidden.add(scenes.ACTION_APPLIANCE[task_type])
    return forbidden


def sample_draft(rng: random.Random, task_type: str, split: str) -> GameDraft:
    """Sample one room and task of `task_type` for `split` (not yet checked solvable)."""
    ood = split == "eval_out_of_distribution"
    scene_pool = scenes.test_scenes() if ood else scenes.train_scenes()
    rooms = scenes.valid_room_kinds(task_type)
    scene_pool = tuple(n for n in scene_pool if scenes.room_kind_of(n) in rooms)
    for _ in range(MAX_ATTEMPTS):
        inventory = scenes.scene_inventory(rng.choice(scene_pool))
        candidates = _task_candidates(task_type, inventory, ood)
        if candidates:
            break
    else:
        raise GenerationError(f"no room offers a {task_type} task for split {split}")
    object_target, parent_target, toggle_target = rng.choice(candidates)
    problem = _build_problem(rng, inventory, task_type, object_target, parent_target, toggle_target)
    template = rng.choice(goal_library.gdict[task_type]["templates"])
    sentence = template.format(
        obj=object_target.lower(),
        recep=parent_target.lower(),
        toggle=toggle_target.lower(),
        mrecep="",
    )
    return GameDraft(
        task_type,
        object_target,
        parent_target,
        toggle_target,
        inventory.scene_num,
        problem,
        sentence,
    )


def _build_problem(
    rng: random.Random,
    inventory: scenes.SceneInventory,
    task_type: str,
    object_target: str,
    parent_target: str,
    toggle_target: str,
) -> str:
    """The PDDL problem: a room with receptacles, placed objects, the agent, the goal."""
    used_ids: set[str] = set()
    used_locs: set[str] = set()
    # Receptacles: 1..N of each of the plan's types; the ones the task needs are kept.
    receptacles: list[tuple[str, str, str]] = []  # (thor id, type, location)
    for rtype, count in inventory.receptacle_counts:
        keep = rng.randint(1, min(count, scenes.MAX_RECEPTACLES_PER_TYPE))
        for _ in range(keep):
            receptacles.append((_thor_id(rng, rtype, used_ids), rtype, _location(rng, used_locs)))
    rng.shuffle(receptacles)

    # Objects: the target (two or more for pick-two), then distractor types.
    target_count = (
        rng.randint(2, MAX_INSTANCES)
        if task_type == "pick_two_obj_and_place"
        else (rng.randint(1, MAX_INSTANCES))
    )
    others = [o for o in inventory.object_types if o != object_target]
    distractors = rng.sample(others, min(len(others), rng.randint(2, MAX_DISTRACTOR_TYPES)))
    wanted = [object_target] * target_count + [
        otype for otype in distractors for _ in range(rng.randint(1, 2))
    ]
    forbidden = _forbidden_start_types(task_type, parent_target)
    objects: list[tuple[str, str, tuple[str, str, str]]] = []  # (thor id, type, receptacle)
    for otype in wanted:
        hosts = [
            r
            for r in receptacles
            if scenes.can_contain(r[1], otype)
            and not (otype == object_target and r[1] in forbidden)
        ]
        if hosts:
            objects.append((_thor_id(rng, otype, used_ids), otype, rng.choice(hosts)))
    if sum(otype == object_target for _, otype, _ in objects) < (
        2 if task_type == "pick_two_obj_and_place" else 1
    ):
        raise GenerationError("target could not be placed")  # cannot happen: candidates check
    if toggle_target:
        hosts = [r for r in receptacles if r[1] in scenes.LAMP_HOSTS[toggle_target]]
        objects.append((_thor_id(rng, toggle_target, used_ids), toggle_target, rng.choice(hosts)))
    agent_location = _location(rng, used_locs)

    object_types = sorted({otype for _, otype, _ in objects})
    receptacle_types = sorted({rtype for _, rtype, _ in receptacles})
    # ALFRED declares every non-furniture type as an otype (the domain names KnifeType
    # and ButterKnifeType as constants) and every furniture type as an rtype.
    declared_otypes = sorted(scenes.OBJECT_TYPES | set(object_types))
    declared_rtypes = sorted(scenes.STATIC_RECEPTACLES)
    lines_objects = ["agent1 - agent"]
    lines_objects += [f"{otype}Type - otype" for otype in declared_otypes]
    lines_objects += [f"{rtype}Type - rtype" for rtype in declared_rtypes]
    lines_objects += [f"{mangle(oid)} - object" for oid, _, _ in objects]
    lines_objects += [f"{mangle(rid)} - receptacle" for rid, _, _ in receptacles]
    lines_objects += [f"{mangle(loc)} - location" for loc in sorted(used_locs)]

    init = [
        f"(canContain {rtype}Type {otype}Type)"
        for rtype in receptacle_types
        for otype in object_types
        if scenes.can_contain(rtype, otype)
    ]
    init += [f"(receptacleType {mangle(rid)} {rtype}Type)" for rid, rtype, _ in receptacles]
    init += [
        f"(openable {mangle(rid)})" for rid, rtype, _ in receptacles if rtype in scenes.OPENABLE
    ]
    init += [f"(receptacleAtLocation {mangle(rid)} {mangle(loc)})" for rid, _, loc in receptacles]
    for oid, otype, (rid, _, loc) in objects:
        name = mangle(oid)
        init += [
            f"(objectType {name} {otype}Type)",
            f"(inReceptacle {name} {mangle(rid)})",
            f"(objectAtLocation {name} {mangle(loc)})",
        ]
        if otype in scenes.LAMP_HOSTS:
            init.append(f"(toggleable {name})")
            continue
        init.append(f"(pickupable {name})")
        for table, predicate in (
            (scenes.CLEANABLE, "cleanable"),
            (scenes.HEATABLE, "heatable"),
            (scenes.COOLABLE, "coolable"),
            (scenes.SLICEABLE, "sliceable"),
        ):
            if otype in table:
                init.append(f"({predicate} {name})")
    init.append(f"(atLocation agent1 {mangle(agent_location)})")

    goal = goal_library.gdict[task_type]["pddl"].replace("#", "-")
    goal = goal.format(obj=object_target, recep=parent_target, toggle=toggle_target, mrecep="")
    newline = "\n        "
    return (
        f"(define (problem plan_{task_type})\n"
        "    (:domain alfred)\n"
        f"    (:objects\n        {newline.join(lines_objects)}\n    )\n"
        f"    (:init\n        {newline.join(init)}\n    )\n"
        f"{goal}"
    )


def game_folder_name(draft: GameDraft, seed: int) -> str:
    """ALFRED's folder naming: `<task>-<Obj>-<Toggle>-<Recep>-<scene>/trial_<id>`."""
    toggle = draft.toggle_target or "None"
    parent = draft.parent_target or "None"
    name = f"{draft.task_type}-{draft.object_target}-{toggle}-{parent}-{draft.scene_num}"
    return f"{name}/trial_{seed:08d}"


def solve(game_path: Path, engine: AlfredEngine) -> list[str]:
    """Plan with fast-downward, then replay the plan on the engine; the plan if it wins.

    Raises:
        GameFileError: the game does not translate, has no plan, or the plan does not win.
    """
    engine.load(game_path)
    engine.reset()
    plan = engine.replan()
    if not plan:
        raise GameFileError(f"{game_path}: fast-downward found no plan")
    for command in plan:
        state, _, _ = engine.step(command)
        if state.feedback == "Nothing happens.":
            raise GameFileError(f"{game_path}: planned command {command!r} was not admissible")
    if not engine.state["won"]:
        raise GameFileError(f"{game_path}: replaying the plan did not reach the goal")
    return plan


def _grammar(task_sentence: str) -> str:
    return Path(ALFRED_TWL2_PATH).read_text().replace("UNKNOWN GOAL", task_sentence)


def write_game(draft: GameDraft, folder: Path, walkthrough: list[str] | None) -> Path:
    """Write game.tw-pddl and traj_data.json into `folder`; returns the game file.

    `walkthrough` None writes an unsolved draft (no `solvable` key) for `solve` to check.
    """
    folder.mkdir(parents=True, exist_ok=True)
    game = {
        "pddl_domain": Path(ALFRED_PDDL_PATH).read_text(),
        "grammar": _grammar(draft.task_sentence),
        "pddl_problem": draft.problem,
    }
    # A draft not yet solved carries no "solvable" key, so ALFWorld's loader skips it.
    if walkthrough is not None:
        game["solvable"] = True
        game["walkthrough"] = walkthrough
    traj = {
        "task_type": draft.task_type,
        "pddl_params": {
            "object_target": draft.object_target,
            "parent_target": draft.parent_target,
            "toggle_target": draft.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"scene_num": draft.scene_num},
        "generator": {"name": "creditgym", "version": GENERATOR_VERSION},
    }
    (folder / TRAJ_FILE).write_text(json.dumps(traj, indent=2))
    (folder / GAME_FILE).write_text(json.dumps(game))
    return folder / GAME_FILE


_WORKER_ENGINE: AlfredEngine | None = None


def generate_one(args: tuple[str, int, int, str]) -> str:
    """Generate, solve and write game number `index` of `split` (a pool task).

    The seed of game i is derived from (base seed, split, i) alone, so a set is the same
    whatever the number of workers. Drafts that fail to solve are redrawn.
    Returns the game folder relative to the split folder.
    """
    split, base_seed, index, split_root = args
    global _WORKER_ENGINE
    if _WORKER_ENGINE is None:
        _WORKER_ENGINE = AlfredEngine()
    task_type = scenes.TASK_TYPES[index % len(scenes.TASK_TYPES)]
    for attempt in range(MAX_ATTEMPTS):
        seed = int.from_bytes(
            hashlib.sha256(f"{base_seed}|{split}|{index}|{attempt}".encode()).digest()[:4], "big"
        )
        draft = sample_draft(random.Random(seed), task_type, split)
        relative = game_folder_name(draft, seed)
        folder = Path(split_root) / relative
        game_path = write_game(draft, folder, walkthrough=None)
        try:
            walkthrough = solve(game_path, _WORKER_ENGINE)
        except GameFileError:
            shutil.rmtree(folder)
            continue
        write_game(draft, folder, walkthrough)
        return relative
    raise GenerationError(f"no solvable {task_type} game after {MAX_ATTEMPTS} draws")


def generate_dataset(
    out: Path,
    sizes: dict[str, int],
    seed: int = 0,
    workers: int = 1,
    progress: bool = True,
) -> Path:
    """Generate a json_2.1.1-style tree under `out` (atomically: built aside, then moved).

    Args:
        out: dataset root; `out/json_2.1.1/<split dir>/...` is created.
        sizes: env split name (`SPLIT_DIRS` keys) -> number of games.
        seed: base seed; the same seed and sizes give the same games.
        workers: processes solving games in parallel.
        progress: show a tqdm bar.
    Returns:
        `out`.
    """
    unknown = set(sizes) - set(SPLIT_DIRS)
    if unknown:
        raise ValueError(f"unknown splits {sorted(unknown)}; expected {sorted(SPLIT_DIRS)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    jobs = [
        (split, seed, index, str(staging / "json_2.1.1" / SPLIT_DIRS[split]))
        for split, count in sizes.items()
        for index in range(count)
    ]
    try:
        bar = tqdm(total=len(jobs), desc="generating ALFWorld games", disable=not progress)
        for _ in _run_jobs(jobs, workers):
            bar.update()
        bar.close()
        manifest = {"generator_version": GENERATOR_VERSION, "seed": seed, "sizes": sizes}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2))
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _run_jobs(jobs: list[tuple[str, int, int, str]], workers: int) -> Iterator[str]:
    # A daemonic process (an env worker, agents/workers.py, creating the first ALFWorld
    # env on a fresh machine) may not start children: it generates the games itself.
    if workers <= 1 or multiprocessing.current_process().daemon:
        yield from map(generate_one, jobs)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(generate_one, jobs, chunksize=4)


@dataclass
class GenerateArgs:
    """Generate procedural ALFWorld games (ALFWorld format, json_2.1.1 layout)."""

    out: Path = Path("alfworld_data")
    """Dataset root; games go to OUT/json_2.1.1/{train,valid_seen,valid_unseen}."""
    train: int = 3500
    """Number of train games (the official set has 3,553)."""
    valid_seen: int = 140
    """Number of in-distribution evaluation games (official valid_seen: 140)."""
    valid_unseen: int = 134
    """Number of out-of-distribution evaluation games (official valid_unseen: 134)."""
    seed: int = 0
    """Base seed: the same seed and sizes give the same games."""
    workers: int = field(default_factory=lambda: max(1, (os.cpu_count() or 1)))
    """Processes solving games in parallel."""


def main(args: GenerateArgs) -> None:
    sizes = {
        "train": args.train,
        "eval_in_distribution": args.valid_seen,
        "eval_out_of_distribution": args.valid_unseen,
    }
    if min(sizes.values()) < 0:
        sys.exit("error: split sizes must be >= 0")
    root = generate_dataset(args.out, sizes, seed=args.seed, workers=args.workers)
    print(f"wrote {sum(sizes.values())} games to {root / 'json_2.1.1'}")


if __name__ == "__main__":
    sys.exit(run_script(main, GenerateArgs, "python -m creditgym.envs.alfworld.generate"))
