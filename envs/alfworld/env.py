"""`creditgym/ALFWorld-v0`: ALFWorld text games on ALFWorld's own engine, offline.

ALFWorld (Shridhar et al. 2021, "ALFWorld: Aligning Text and Embodied Environments for
Interactive Learning") played through textworld's PDDL engine with fast-downward, as
alfworld 0.4.2's `AlfredTWEnv` plays it, with the evaluation conventions of the RL papers
(GiGPO, HCAPO: 50 steps, reward 1 on success, splits train / valid_seen / valid_unseen).

Observations are ALFWorld's text without textworld's "-= Welcome to TextWorld, ALFRED! =-"
banner (ReAct and verl-agent strip it too): the first is "You are in the middle of a room.
Looking quickly around you, you see ...\n\nYour task is to: put a clean apple in fridge.",
then each command's feedback. Info, besides the keys every creditgym env shares
(`envs/__init__.py`): `task_type`, `gamefile`, `won`.

Ground truth: `key_step` is true when the step made a goal-relevant fact true that was not
(the agent holds a target object, a target object became clean / hot / cool, the lamp was
switched on, a target object was placed in a receptacle of the goal's type) or won the game,
read from the engine's state facts. `expert_action` (only with `expert_plan=True`, which
the runner sets for the scripted expert) is the next command of the stored walkthrough while
the agent follows it; after the agent deviates in a way that changes the state,
fast-downward replans from the current state. The replan is done only when the next info
is built with `expert_plan` on: it takes seconds to tens of seconds per step in large scenes,
and a learning policy that explores would otherwise pay it on every step it leaves the
walkthrough. alfworld 0.4.2's own experts are not
used: its hand-coded expert looks for "put" (the grammar says "move ... to") and fails
pick-two tasks, and `AlfredTWEnv.init_env` passes the expert type into the wrong argument.
"""

from __future__ import annotations

import warnings
from functools import cached_property
from typing import Any, ClassVar

import gymnasium as gym
from textworld.logic import Proposition

from creditgym.envs.alfworld.data import (
    DEFAULT_SIZES,
    GameEntry,
    collect_games,
    ensure_generated,
    game_set_fingerprint,
    named_data_root,
)
from creditgym.envs.alfworld.engine import WELCOME_BANNER, AlfredEngine, GameFileError
from creditgym.envs.alfworld.scenes import TASK_TYPES
from creditgym.envs.alfworld_options import ALFWorldOptions
from creditgym.envs.registry import DataFingerprint
from creditgym.envs.spaces import text_space

# Predicates whose change is bookkeeping, not progress (examining marks things checked).
BOOKKEEPING_PREDICATES = frozenset({"checked", "examined"})
# Per task type, the state-change predicate its goal needs on the target object.
TASK_STATE_PREDICATE: dict[str, str] = {
    "pick_clean_then_place_in_recep": "isclean",
    "pick_heat_then_place_in_recep": "ishot",
    "pick_cool_then_place_in_recep": "iscool",
}


class ALFWorldEnv(gym.Env):
    """ALFWorld as a Gymnasium env with text observations and text actions.

    Args (`data_dir`, `generated_seed` and `num_games` fields of `ALFWorldOptions`, which
    checks them):
        split: "train", "eval_in_distribution" (valid_seen) or "eval_out_of_distribution"
            (valid_unseen).
        data_dir: a folder holding json_2.1.1/; default `$ALFWORLD_DATA` when set (it must
            hold json_2.1.1/), else the generated default set (created on first use).
        max_steps: step limit; reaching it without success truncates (default 50, as in
            the GiGPO and HCAPO evaluations).
        task_types: which of the six task types to play (default all).
        generated_sizes: split -> games of the generated default set, when it is used.
        generated_seed: seed of the generated default set.
        generation_workers: processes used to generate it.
        num_games: keep only the first N selected games (0: all), like ALFWorld's
            `num_train_games` / `num_eval_games`.
        expert_plan: publish `info["expert_action"]` (the planner's next command); off by
            default because replanning after a deviation is the dominant cost of a step.

    Attributes:
        game_set: the `DataFingerprint` of the game set played (all three splits), as
            `EnvInfo.data_fingerprint` gives it to the runner.
    """

    metadata: ClassVar[dict[str, list[str]]] = {"render_modes": []}

    def __init__(
        self,
        split: str = "train",
        max_steps: int = 50,
        task_types: tuple[str, ...] | list[str] = TASK_TYPES,
        generated_sizes: dict[str, int] | None = None,
        generation_workers: int = 2,
        expert_plan: bool = False,
        **options: Any,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.options = ALFWorldOptions(**options)
        data_dir, generated_seed = self.options.data_dir, self.options.generated_seed
        num_games = self.options.num_games
        sizes = dict(generated_sizes) if generated_sizes is not None else dict(DEFAULT_SIZES)
        named_root = named_data_root(data_dir)
        root = named_root or ensure_generated(sizes, generated_seed, generation_workers)
        games = collect_games(root, split, tuple(task_types))
        self.games: list[GameEntry] = games[:num_games] if num_games > 0 else games
        self.data_root = root
        self._game_set_args = (named_root, sizes, generated_seed)
        self.split = split
        self.max_steps = max_steps
        self.observation_space = text_space(8192)
        self.action_space = text_space(256)
        self._engine = AlfredEngine()
        self._index_by_id = {game.task_id: i for i, game in enumerate(self.games)}
        self._broken: set[int] = set()
        self._game: GameEntry | None = None
        self._steps = 0
        self._done = True
        self.expert_plan = expert_plan
        # None: the agent deviated and the plan is stale; replanned when next asked for.
        self._plan: list[str] | None = []
        self._task = ""
        self._targets: dict[str, frozenset[str]] = {}

    @cached_property
    def game_set(self) -> DataFingerprint:
        """Which games this env plays (when first asked: a named folder's splits are listed)."""
        return game_set_fingerprint(*self._game_set_args)

    # ----- episode control -------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a game: `options["task_id"]` picks one; else the seed picks one uniformly."""
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is not None:
            if task_id not in self._index_by_id:
                raise ValueError(
                    f"unknown task_id {task_id!r} for split {self.split}; "
                    f"ids look like {self.games[0].task_id!r}"
                )
            state = self._start(self._index_by_id[task_id])
        else:
            state = self._start_any(int(self.np_random.integers(len(self.games))))
        observation = state.feedback.removeprefix(WELCOME_BANNER)
        self._task = observation.rsplit("Your task is to: ", 1)[-1].strip()
        info = self._info(state, key_step=False)
        return observation, info

    def _start_any(self, index: int) -> Any:
        """Start game `index`, or the next loadable one (broken games warn and are skipped)."""
        for offset in range(len(self.games)):
            candidate = (index + offset) % len(self.games)
            if candidate in self._broken:
                continue
            try:
                return self._start(candidate)
            except GameFileError as error:
                warnings.warn(f"skipping unplayable game: {error}", stacklevel=3)
                self._broken.add(candidate)
        raise GameFileError(f"no game of split {self.split} under {self.data_root} loads")

    def _start(self, index: int) -> Any:
        game = self.games[index]
        self._engine.load(game.game_file)
        state = self._engine.reset()
        self._game = game
        self._steps = 0
        self._done = False
        self._targets = self._goal_objects(game)
        walkthrough = self._engine.translation.walkthrough
        self._plan = list(walkthrough) if walkthrough else None
        return state

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one command; an inadmissible one gets "Nothing happens." and changes nothing."""
        if self._done:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        command = action.strip() if isinstance(action, str) else ""
        before = self._engine.facts()
        was_won = bool(self._engine.state["won"])
        # Non-text actions are played as "" and, like any unknown command, change nothing.
        state, _, _ = self._engine.step(command)
        after = self._engine.facts()
        self._steps += 1
        won = bool(state["won"])
        key_step = bool(self._relevant(after) - self._relevant(before)) or (won and not was_won)
        self._advance_plan(command, before, after)
        terminated = won
        truncated = not won and self._steps >= self.max_steps
        self._done = terminated or truncated
        info = self._info(state, key_step=key_step)
        if terminated:
            info["feedback"] = f"Task completed: {self._task}"
        elif truncated:
            info["feedback"] = (
                f"Step limit ({self.max_steps}) reached before the task was completed: {self._task}"
            )
        return state.feedback, float(won), terminated, truncated, info

    # ----- ground truth ----------------------------------------------------------------
    def _goal_objects(self, game: GameEntry) -> dict[str, frozenset[str]]:
        """PDDL ids of the goal's object type, receptacle type and lamp type in this game."""
        params = game.pddl_params
        wanted = {
            "object": str(params.get("object_target", "")).lower(),
            "parent": str(params.get("parent_target", "")).lower(),
            "toggle": str(params.get("toggle_target", "")).lower(),
        }
        ids: dict[str, set[str]] = {role: set() for role in wanted}
        for fact in self._engine.facts():
            if fact.name in ("objecttype", "receptacletype"):
                entity, type_name = fact.arguments[0].name, fact.arguments[1].name
                for role, target in wanted.items():
                    if target and type_name == f"{target}type":
                        ids[role].add(entity)
        return {role: frozenset(members) for role, members in ids.items()}

    def _relevant(self, facts: frozenset[Proposition]) -> frozenset[tuple[str, ...]]:
        """The goal-relevant facts among `facts` (see the module docstring)."""
        objects, parents, lamps = (
            self._targets["object"],
            self._targets["parent"],
            self._targets["toggle"],
        )
        state_predicate = TASK_STATE_PREDICATE.get(self._game.task_type if self._game else "")
        relevant = set()
        for fact in facts:
            args = tuple(variable.name for variable in fact.arguments)
            if (
                (fact.name == "holds" and args[1] in objects)
                or (fact.name == "inreceptacle" and args[0] in objects and args[1] in parents)
                or (fact.name == state_predicate and args[0] in objects)
                or (fact.name in ("istoggled", "ison") and args[0] in lamps)
            ):
                relevant.add((fact.name, *args))
        return frozenset(relevant)

    def _advance_plan(self, command: str, before: frozenset, after: frozenset) -> None:
        """Keep following the plan while the agent does; replan only after a real deviation."""
        if self._plan and command == self._plan[0]:
            self._plan.pop(0)
            return
        changed = {fact.name for fact in before ^ after} - BOOKKEEPING_PREDICATES
        if changed:
            self._plan = None

    def _info(self, state: Any, key_step: bool) -> dict[str, Any]:
        assert self._game is not None
        info = {
            "success": bool(state["won"]),
            "won": bool(state["won"]),
            "task_id": self._game.task_id,
            "task": self._task,
            "task_type": self._game.task_type,
            "gamefile": str(self._game.game_file),
            "admissible_commands": list(state["admissible_commands"]),
            "key_step": key_step,
        }
        if self.expert_plan:
            if self._plan is None:
                self._plan = self._engine.replan()
            info["expert_action"] = self._plan[0] if self._plan else "look"
        return info

    def render(self) -> None:
        return None
