"""ALFWorld-v0: generator, engine, env contract, ground truth, experts, bad input."""

from __future__ import annotations

import json
import multiprocessing
import re
import shutil
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from creditgym import envs  # noqa: F401  (registers the creditgym envs)
from creditgym.agents.base import ExpertAgent
from creditgym.agents.episode import play_episode
from creditgym.envs.alfworld import scenes
from creditgym.envs.alfworld.data import ALFWorldDataError
from creditgym.envs.alfworld.engine import GameFileError
from creditgym.envs.alfworld.env import ALFWorldEnv
from creditgym.envs.alfworld.generate import (
    generate_dataset,
    generate_one,
    is_ood_combination,
    mangle,
)

COMMITTED = Path(__file__).parent / "data" / "alfworld"


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated set: two games of each task type in train, a few eval games."""
    root = tmp_path_factory.mktemp("alfworld") / "data"
    sizes = {"train": 12, "eval_in_distribution": 3, "eval_out_of_distribution": 6}
    return generate_dataset(root, sizes, seed=7, workers=2, progress=False)


def _combos(root: Path, split_dir: str) -> set[tuple[str, str, str]]:
    combos = set()
    for traj_path in (root / "json_2.1.1" / split_dir).rglob("traj_data.json"):
        traj = json.loads(traj_path.read_text())
        params = traj["pddl_params"]
        room = scenes.room_kind_of(traj["scene"]["scene_num"])
        target = params["parent_target"] or params["toggle_target"]
        combos.add((params["object_target"], target, room))
    return combos


def test_generator_is_deterministic_per_seed(tmp_path: Path) -> None:
    first = generate_one(("train", 3, 5, str(tmp_path / "a")))
    second = generate_one(("train", 3, 5, str(tmp_path / "b")))
    other = generate_one(("train", 4, 5, str(tmp_path / "c")))
    assert first == second
    text_a = (tmp_path / "a" / first / "game.tw-pddl").read_text()
    assert text_a == (tmp_path / "b" / second / "game.tw-pddl").read_text()
    assert other != first


def _generate_in_a_daemon(out: str) -> None:
    generate_dataset(Path(out), {"train": 2}, seed=7, workers=2, progress=False)


def test_a_daemonic_process_generates_the_games_itself(tmp_path: Path) -> None:
    """An env worker (daemonic, agents/workers.py) that creates the first ALFWorld env on
    a fresh machine generates the set without a process pool (a daemon may not start
    children) and gets the games a serial generation gets."""
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_generate_in_a_daemon, args=(str(tmp_path / "d"),), daemon=True)
    child.start()
    child.join(timeout=300)
    assert child.exitcode == 0
    generate_dataset(tmp_path / "s", {"train": 2}, seed=7, workers=1, progress=False)

    def games(root: Path) -> dict[str, str]:
        return {
            str(path.relative_to(root)): path.read_text()
            for path in sorted(root.rglob("game.tw-pddl"))
        }

    assert len(games(tmp_path / "d")) == 2
    assert games(tmp_path / "d") == games(tmp_path / "s")


def test_generated_games_cover_all_types_and_keep_format(generated: Path) -> None:
    train = generated / "json_2.1.1" / "train"
    types = {json.loads(p.read_text())["task_type"] for p in train.rglob("traj_data.json")}
    assert types == set(scenes.TASK_TYPES)
    for game_path in train.rglob("game.tw-pddl"):
        game = json.loads(game_path.read_text())
        assert game["solvable"] is True and game["walkthrough"]
        assert "UNKNOWN GOAL" not in game["grammar"]
        for declared in ("SinkBasinType", "MicrowaveType", "FridgeType", "KnifeType"):
            assert declared in game["pddl_problem"]
        # Object ids are mangled AI2-THOR ids: Type_bar_<+/-coordinate>...
        assert re.search(
            r"\b[A-Z][A-Za-z]+_bar__(plus|minus)_\d\d_dot_\d\d_bar_", game["pddl_problem"]
        )


def test_placements_follow_alfworld_tables(generated: Path) -> None:
    for game_path in (generated / "json_2.1.1").rglob("game.tw-pddl"):
        problem = json.loads(game_path.read_text())["pddl_problem"].split("(:goal")[0]
        types = dict(re.findall(r"\((?:objectType|receptacleType) (\S+) (\w+)Type\)", problem))
        for obj, recep in re.findall(r"\(inReceptacle (\S+) (\S+)\)", problem):
            obj_type, recep_type = types[obj], types[recep]
            allowed = scenes.can_contain(
                recep_type, obj_type
            ) or recep_type in scenes.LAMP_HOSTS.get(obj_type, ())
            assert allowed, f"{obj_type} in {recep_type} in {game_path}"


def test_ood_combinations_never_appear_in_train(generated: Path) -> None:
    train, ood = _combos(generated, "train"), _combos(generated, "valid_unseen")
    assert ood and not train & ood
    assert all(is_ood_combination(*combo) for combo in ood)
    assert not any(is_ood_combination(*combo) for combo in train)


def test_expert_wins_every_game_of_all_six_types(generated: Path) -> None:
    env = gym.make("creditgym/ALFWorld-v0", data_dir=str(generated), expert_plan=True)
    seen_types = set()
    for game in env.unwrapped.games:
        trajectory = play_episode(env, ExpertAgent(), seed=0, options={"task_id": game.task_id})
        assert trajectory.success, game.task_id
        assert trajectory.steps[-1].terminated and not trajectory.steps[-1].truncated
        key_actions = [step.action for step in trajectory.steps if step.info["key_step"]]
        # Taking the target is always a key step, and so is the winning step.
        assert any(action.startswith("take ") for action in key_actions)
        assert trajectory.steps[-1].info["key_step"]
        seen_types.add(game.task_type)
    assert seen_types == set(scenes.TASK_TYPES)


def test_key_steps_come_from_state_not_wording(generated: Path) -> None:
    env = ALFWorldEnv(
        data_dir=str(generated), task_types=["pick_clean_then_place_in_recep"], expert_plan=True
    )
    _, info = env.reset(seed=0)
    # Walk the expert; cleaning is a key step, and cleaning again is not (no new fact).
    while True:
        action = info["expert_action"]
        _, _, terminated, _, info = env.step(action)
        if action.startswith("clean "):
            assert info["key_step"]
            _, _, _, _, again = env.step(action)
            assert not again["key_step"]
            info = again
        if terminated:
            break
    assert info["success"]


def test_expert_replans_after_deviation(generated: Path) -> None:
    env = ALFWorldEnv(
        data_dir=str(generated), task_types=["pick_two_obj_and_place"], expert_plan=True
    )
    _, info = env.reset(seed=1)
    planned = info["expert_action"]
    detour = next(c for c in info["admissible_commands"] if c.startswith("go to") and c != planned)
    _, _, _, _, info = env.step(detour)
    assert not info["key_step"]
    for _ in range(40):
        _, _, terminated, truncated, info = env.step(info["expert_action"])
        if terminated or truncated:
            break
    assert info["success"]


def test_observation_and_info_as_alfworld_shows_them() -> None:
    env = ALFWorldEnv(data_dir=str(COMMITTED), expert_plan=True)
    observation, info = env.reset(seed=0)
    assert observation.startswith(
        "You are in the middle of a room. Looking quickly around you, you see a "
    )
    assert "\n\nYour task is to: " in observation and observation.endswith(".")
    assert info["task"] == observation.rsplit("Your task is to: ", 1)[1]
    for key in ("success", "task_id", "task", "task_type", "admissible_commands", "key_step"):
        assert key in info
    assert (
        "look" in info["admissible_commands"]
        and info["expert_action"] in info["admissible_commands"]
    )
    assert info["task_type"] in scenes.TASK_TYPES and info["success"] is False


def test_invalid_commands_change_nothing_and_never_raise() -> None:
    env = ALFWorldEnv(data_dir=str(COMMITTED), expert_plan=True)
    _, info = env.reset(seed=2)
    for bad in ("fly to the moon", "", "take everything", 42):
        observation, reward, terminated, truncated, after = env.step(bad)
        assert observation == "Nothing happens."
        assert (reward, terminated, truncated, after["key_step"]) == (0.0, False, False, False)
        assert after["admissible_commands"] == info["admissible_commands"]
        assert after["expert_action"] == info["expert_action"]


def test_expert_plan_is_computed_only_when_asked_for() -> None:
    # A policy that explores must not pay for the planner: without `expert_plan` the env
    # publishes no expert action (and never replans); with it, the action is admissible.
    plain = ALFWorldEnv(data_dir=str(COMMITTED))
    _, info = plain.reset(seed=0)
    detour = next(c for c in info["admissible_commands"] if c.startswith("go to"))
    _, _, _, _, after = plain.step(detour)
    assert "expert_action" not in info and "expert_action" not in after
    planned = ALFWorldEnv(data_dir=str(COMMITTED), expert_plan=True)
    planned.reset(seed=0)
    _, _, _, _, after = planned.step(detour)
    assert after["expert_action"] in after["admissible_commands"]


def test_step_limit_truncates_not_terminates() -> None:
    env = ALFWorldEnv(data_dir=str(COMMITTED), max_steps=3)
    env.reset(seed=0)
    results = [env.step("look") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)
    assert "Step limit (3)" in results[-1][4]["feedback"]
    with pytest.raises(RuntimeError):
        env.step("look")


def test_seeds_and_task_id_pick_games_deterministically() -> None:
    env = ALFWorldEnv(data_dir=str(COMMITTED))
    ids = [env.reset(seed=seed)[1]["task_id"] for seed in range(6)]
    assert ids == [env.reset(seed=seed)[1]["task_id"] for seed in range(6)]
    assert len(set(ids)) > 1
    target = env.games[-1].task_id
    assert env.reset(options={"task_id": target})[1]["task_id"] == target
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "nope"})


def test_splits_map_to_official_folders() -> None:
    seen = ALFWorldEnv(split="eval_in_distribution", data_dir=str(COMMITTED))
    unseen = ALFWorldEnv(split="eval_out_of_distribution", data_dir=str(COMMITTED))
    assert all("valid_seen" in str(g.game_file) for g in seen.games)
    assert all("valid_unseen" in str(g.game_file) for g in unseen.games)
    only = ALFWorldEnv(data_dir=str(COMMITTED), task_types=["pick_and_place_simple"])
    assert {g.task_type for g in only.games} == {"pick_and_place_simple"}


def test_missing_alfworld_data_folder_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "absent"))
    with pytest.raises(ALFWorldDataError, match=r"ALFWORLD_DATA=.*absent does not exist"):
        ALFWorldEnv()


def test_empty_tree_and_unknown_split_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "json_2.1.1" / "train").mkdir(parents=True)
    with pytest.raises(ALFWorldDataError, match="no playable train games"):
        ALFWorldEnv(data_dir=str(tmp_path))
    with pytest.raises(ALFWorldDataError, match="not an ALFWorld data tree"):
        ALFWorldEnv(split="eval_out_of_distribution", data_dir=str(tmp_path))
    with pytest.raises(ALFWorldDataError, match="unknown split"):
        ALFWorldEnv(split="test", data_dir=str(COMMITTED))


def _copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(COMMITTED, root)
    return root


def test_corrupt_game_in_tree_is_skipped_with_warning(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    victim = sorted((root / "json_2.1.1" / "train").rglob("game.tw-pddl"))[0]
    victim.write_text("{ not json")
    with pytest.warns(UserWarning, match=re.escape(str(victim))):
        env = ALFWorldEnv(data_dir=str(root))
    assert len(env.games) == 5


def test_untranslatable_game_names_file_and_is_skipped_at_reset(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    victim = sorted((root / "json_2.1.1" / "train").rglob("game.tw-pddl"))[0]
    game = json.loads(victim.read_text())
    # A goal on a type that is never declared: fast-downward cannot translate it.
    game["pddl_problem"] = game["pddl_problem"].replace(
        "(:goal", "(:goal (and (holds agent1 nothing))", 1
    )
    victim.write_text(json.dumps(game))
    env = ALFWorldEnv(data_dir=str(root))
    victim_id = next(g.task_id for g in env.games if g.game_file == victim)
    with pytest.raises(GameFileError, match=re.escape(str(victim))):
        env.reset(options={"task_id": victim_id})
    index = next(i for i, g in enumerate(env.games) if g.game_file == victim)
    with pytest.warns(UserWarning, match="skipping unplayable game"):
        env._start_any(index)
    assert env._game is not None and env._game.game_file != victim


def test_room_kinds_and_mangling() -> None:
    assert mangle("Sink|-01.5|+00.9|-00.2|SinkBasin") == (
        "Sink_bar__minus_01_dot_5_bar__plus_00_dot_9_bar__minus_00_dot_2_bar_SinkBasin"
    )
    kinds = {scenes.room_kind_of(n) for n in scenes.train_scenes()}
    assert kinds == set(scenes.ROOM_KINDS)
    kitchen = scenes.scene_inventory(10)
    assert kitchen.room_kind == "Kitchen"
    assert {"Fridge", "Microwave", "SinkBasin"} <= {r for r, _ in kitchen.receptacle_counts}


def test_registry_check_env_passes() -> None:
    env = gym.make("creditgym/ALFWorld-v0", data_dir=str(COMMITTED))
    check_env(env.unwrapped, skip_render_check=True)
