"""ALFWorld's engine (textworld's PDDL engine + fast-downward), reset without re-translating.

textworld's `PddlEnv` translates the game's PDDL to SAS+ (fast-downward's `pddl2sas`, twice:
once for play, once for the planner) every time it loads *and* every time it resets, and
ALFWorld's `AlfredTWEnv` loads the game again at every reset. Translation is most of a
reset's cost (ALFWorld, Shridhar et al. 2021, arXiv 2010.03768). `AlfredEngine` translates
a game once per process (an in-memory cache keyed by file), and a reset reloads the cached
SAS+ task into fast-downward and restores the cached initial facts. Everything a step does
(applying an operator, the feedback text, the admissible commands) is textworld's own code
path.

Object names are ALFWorld's (`alfworld.agents.utils.misc.Demangler`, as `AlfredDemangler`
applies them, without shuffling): "apple 1", "sinkbasin 2".
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fast_downward
import textworld.logic
from alfworld.agents.utils.misc import Demangler
from textworld.core import EnvInfos, GameState
from textworld.envs.pddl import PddlEnv
from textworld.envs.pddl import logic as pddl_logic
from textworld.generator.game import EntityInfo
from textworld.logic import Proposition, Variable

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
# The banner textworld's ALFRED grammar puts before the first observation.
WELCOME_BANNER = "-= Welcome to TextWorld, ALFRED! =-\n\n"
# How many translated games one process keeps (each is a few hundred kB of SAS+ text).
TRANSLATION_CACHE_SIZE = 64


class GameFileError(ValueError):
    """A game.tw-pddl that cannot be played; the message names the file and the fix."""


@dataclass(frozen=True)
class Translation:
    """A game translated once: what `PddlState` would otherwise recompute at every reset.

    Attributes:
        logic: the parsed domain + grammar (task sentence included).
        task: fast-downward's normalised task (actions with parameter lists).
        sas: the SAS+ text played on.
        sas_replan: the SAS+ text the planner replans on (translated with `optimize=True`).
        name2type: PDDL object name -> type name.
        initial_facts: every fact true at the start, as textworld propositions.
        walkthrough: the stored walkthrough (generated games), else None.
    """

    logic: Any
    task: Any
    sas: str
    sas_replan: str
    name2type: dict[str, str]
    initial_facts: tuple[Proposition, ...]
    walkthrough: tuple[str, ...] | None


_TRANSLATIONS: OrderedDict[str, Translation] = OrderedDict()


def read_game_file(path: Path) -> dict[str, Any]:
    """Parse a game.tw-pddl, with a clear error for a corrupt or incomplete file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise GameFileError(
            f"{path}: not a readable game.tw-pddl JSON file ({error}). "
            "Delete or regenerate it (python -m creditgym.envs.alfworld.generate)."
        ) from error
    missing = [key for key in ("pddl_domain", "grammar", "pddl_problem") if key not in data]
    if not isinstance(data, dict) or missing:
        raise GameFileError(
            f"{path}: game.tw-pddl lacks {missing or 'a JSON object'}. "
            "Delete or regenerate it (python -m creditgym.envs.alfworld.generate)."
        )
    return data


def translate(path: Path, downward_lib: Any) -> Translation:
    """Translate one game (cached per process), checking that it is playable.

    Raises:
        GameFileError: the file is corrupt, its PDDL does not translate (an unreachable
            goal makes textworld fail with `KeyError: 'val1'`), or it is marked unsolvable.
    """
    key = str(path.resolve())
    if key in _TRANSLATIONS:
        _TRANSLATIONS.move_to_end(key)
        return _TRANSLATIONS[key]
    data = read_game_file(path)
    if data.get("solvable") is False:
        raise GameFileError(f'{path}: marked unsolvable ("solvable": false); remove it.')
    try:
        logic = pddl_logic.GameLogic(domain=data["pddl_domain"], grammar=data["grammar"])
        task, sas = fast_downward.pddl2sas(data["pddl_domain"], data["pddl_problem"])
        _, sas_replan = fast_downward.pddl2sas(
            data["pddl_domain"], data["pddl_problem"], optimize=True
        )
        name2type = {obj.name: obj.type_name for obj in task.objects}
        # As `PddlState.__init__` does: make the task's types known to the grammar's logic.
        for pddl_type in task.types:
            with contextlib.suppress(ValueError):  # already known
                logic.types.add(textworld.logic.Type(pddl_type.name, pddl_type.supertype_names))
        downward_lib.load_sas(sas.encode("utf-8"))
        initial_facts = _initial_facts(task, downward_lib, name2type)
    except Exception as error:  # fast-downward and tatsu raise many unrelated types
        raise GameFileError(
            f"{path}: the PDDL problem does not translate ({type(error).__name__}: {error}); "
            "the goal may be unreachable or an id malformed. Remove or regenerate this game."
        ) from error
    walkthrough = data.get("walkthrough")
    translation = Translation(
        logic=logic,
        task=task,
        sas=sas,
        sas_replan=sas_replan,
        name2type=name2type,
        initial_facts=tuple(initial_facts),
        walkthrough=tuple(walkthrough) if walkthrough else None,
    )
    _TRANSLATIONS[key] = translation
    if len(_TRANSLATIONS) > TRANSLATION_CACHE_SIZE:
        _TRANSLATIONS.popitem(last=False)
    return translation


def _initial_facts(task: Any, downward_lib: Any, name2type: dict[str, str]) -> list[Proposition]:
    """The facts `PddlState` starts from: the task's init atoms plus fast-downward's state."""
    facts = []
    for atom in task.init:
        if isinstance(atom, fast_downward.translate.pddl.conditions.Atom) and atom.predicate != "=":
            facts.append(
                Proposition(atom.predicate, [Variable(arg, name2type[arg]) for arg in atom.args])
            )
    atoms = (pddl_logic.Atom * downward_lib.get_state_size())()
    downward_lib.get_state(atoms)
    for atom in atoms:
        fact = atom.get_fact(name2type)
        if not fact.is_negation:
            facts.append(fact)
    return facts


class _RestoredPddlState(pddl_logic.PddlState):
    """A `PddlState` rebuilt from a cached `Translation` instead of re-running `pddl2sas`."""

    def __init__(self, downward_lib: Any, translation: Translation) -> None:
        # The same fields `PddlState.__init__` sets (it does not call `State.__init__`).
        self._facts = defaultdict(set)
        self._vars_by_name = {}
        self._vars_by_type = defaultdict(set)
        self._var_counts = Counter()
        self._logic = translation.logic
        self.downward_lib = downward_lib
        self.task = translation.task
        self.sas = translation.sas
        self.sas_replan = translation.sas_replan
        self._actions = {action.name: action for action in translation.task.actions}
        self.name2type = translation.name2type
        downward_lib.load_sas(translation.sas.encode("utf-8"))
        downward_lib.load_sas_replan(translation.sas_replan.encode("utf-8"))
        self.add_facts(translation.initial_facts)


class AlfredEngine(PddlEnv):
    """textworld's `PddlEnv` with per-process translation caching and ALFWorld naming.

    `load(path)` reads and translates a game.tw-pddl (once per process per file);
    `reset()` restarts it in milliseconds; `step(command)` is textworld's, unchanged.
    `facts()` gives the current state's propositions (PDDL ids) for ground-truth labels,
    and `replan()` asks fast-downward for a plan from the current state.
    """

    def __init__(self) -> None:
        super().__init__(EnvInfos(admissible_commands=True, won=True))
        self.translation: Translation | None = None
        self.game_path: Path | None = None

    def load(self, path: str | Path) -> None:
        self.game_path = Path(path)
        self.translation = translate(self.game_path, self.downward_lib)
        self._logic = self.translation.logic
        self._pddl_state = _RestoredPddlState(self.downward_lib, self.translation)
        self._entity_infos = self._named_entities()

    def _named_entities(self) -> dict[str, EntityInfo]:
        """Entity infos named as ALFWorld names them ("apple 1", "sinkbasin 1")."""
        infos = self._get_entity_infos()
        demangler = Demangler(game_infos=infos)
        for info in infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
        return infos

    def reset(self) -> GameState:
        if self.translation is None:
            raise RuntimeError("AlfredEngine.reset() called before load()")
        self._pddl_state = _RestoredPddlState(self.downward_lib, self.translation)
        self.prev_state = None
        self.state = GameState()
        self._last_action = None
        self._moves = 0
        context = {
            "state": self._pddl_state,
            "facts": list(self._pddl_state.facts),
            "variables": {},
            "mapping": {},
            "entity_infos": self._entity_infos,
        }
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        return self.state

    def facts(self) -> frozenset[Proposition]:
        """Propositions true now (PDDL ids, lower case as fast-downward writes them)."""
        return frozenset(self._pddl_state.facts)

    def replan(self) -> list[str]:
        """Fast-downward's plan from the current state, as game commands (empty if none)."""
        return self._pddl_state.replan(self._entity_infos)
