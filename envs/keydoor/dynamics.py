"""KeyDoor's task, true state, dynamics and text, shared by the env and its exact MDP.

One function, `advance`, moves the true state; the env feeds it a sampled apple value,
`KeyDoorMDP.transitions` feeds it every apple value with its probability. One copy of
the dynamics, so the sampled env and the enumerated MDP cannot drift apart; what they
share with the agent (observation, task text, admissible commands) comes from
`observation` / `commands` here too.

Timeline of one episode (t = steps taken so far, the step count in the state; K the
number of keys, 1 unless the env's `num_keys` says otherwise):

    t = 0 .. K - 1         rooms    "take the <thing>" for the room's key and distractors
    t = K .. K + delay - 1 orchard  "eat the apple" (random reward) or "wait" (0)
    t = K + delay ..       door     "open the door" (ends the episode) or "wait"
    t = max_steps          step limit: the episode is truncated

The door opens only for an agent carrying every room's key: with K > 1 several
decisions must each be right, so the outcome alone no longer tells a group which one was.

References: Hung et al. 2019 (Nature Communications, arXiv 1810.06721) for the three
phases; Mesnard et al. 2021 (ICML, arXiv 2011.09464) for the low- and high-variance
apple rewards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from creditgym.envs.mdp import DynamicsMDP, Outcome

KEY = "key"
NOTHING = "nothing"
# Joins the things carried from several rooms in a state's `holding` ("key+lamp").
CARRIED_SEP = "+"
# Everyday things with no bearing on a door (no tools, nothing that opens anything), all
# starting with a consonant so every one reads "a <thing>".
DISTRACTOR_POOL = (
    "lamp",
    "book",
    "vase",
    "candle",
    "scarf",
    "map",
    "cup",
    "pebble",
    "feather",
    "bell",
    "spoon",
    "comb",
)
# With `disguised_keys`, room r's key is DISGUISES[r]: an everyday thing like the
# distractors, the same in every task and never named a key, so which thing opens the
# door must be learnt room by room from the outcome (one per room up to `MAX_KEYS`).
DISGUISES = ("bell", "comb", "spoon", "feather")
# Apple reward values, each drawn uniformly and independently per apple eaten. "low"
# is Mesnard et al.'s low-variance variant (every apple pays 1, as the final reward
# does); "high" their high-variance one (apples pay 1 or 10), where the apples' spread
# dwarfs the key's contribution to the return.
APPLE_REWARDS: dict[str, tuple[float, ...]] = {"low": (1.0,), "high": (1.0, 10.0)}
DOOR_REWARD = 1.0
EAT = "eat the apple"
WAIT = "wait"
OPEN = "open the door"
TASK_TEXT = (
    "Walk through a room, an orchard and a door, one action per turn, and collect as "
    "much reward as you can."
)
INSTANCES = 100_000  # seeds draw task n in [0, this); task ids accept any n >= 0


@dataclass(frozen=True)
class KeyDoorTask:
    """One KeyDoor instance: everything about an episode that is not random.

    Attributes:
        task_id: "keydoor-<n>" (with the env's kwargs, decodes to this instance).
        tables: per room, the things on its table in the order shown and offered, a key
            among them; one room unless the env's `num_keys` is above 1.
        keys: per room, the thing on its table that the door needs (`KEY`, or with
            `disguised_keys` the room's entry of `DISGUISES`).
        delay: orchard turns between the last room and the door.
        apple_rewards: values an apple pays, each with probability 1 / len.
        max_steps: step limit (the state at t = max_steps is never acted in).
    """

    task_id: str
    tables: tuple[tuple[str, ...], ...]
    keys: tuple[str, ...]
    delay: int
    apple_rewards: tuple[float, ...]
    max_steps: int


@dataclass(frozen=True)
class KeyDoorState:
    """The true state: steps taken and what the agent carries (the phase follows from t):
    one thing, `NOTHING`, or with several rooms the things taken joined by `CARRIED_SEP`."""

    steps: int
    holding: str


def build_task(
    index: int,
    delay: int,
    apple_rewards: tuple[float, ...],
    num_objects: int,
    max_steps: int,
    num_keys: int = 1,
    disguised_keys: bool = False,
) -> KeyDoorTask:
    """Task `keydoor-<index>`: which distractors lie on each room's table, in what order."""
    # One room draws exactly as the single-key env always has (its tasks unchanged).
    seed = f"creditgym/KeyDoor-v0/{num_objects}/{index}"
    if num_keys > 1:
        seed += f"/keys={num_keys}"
    if disguised_keys:
        seed += "/disguised"
    rng = random.Random(seed)
    keys = DISGUISES[:num_keys] if disguised_keys else (KEY,) * num_keys
    tables = []
    for key in keys:
        table = [key, *rng.sample([t for t in DISTRACTOR_POOL if t != key], num_objects)]
        # Shuffled so that the key's position in the command list carries no signal.
        rng.shuffle(table)
        tables.append(tuple(table))
    return KeyDoorTask(
        f"keydoor-{index}", tuple(tables), tuple(keys), delay, apple_rewards, max_steps
    )


def rooms(task: KeyDoorTask) -> int:
    """K, the number of rooms (each with a key the door needs)."""
    return len(task.tables)


def phase(task: KeyDoorTask, state: KeyDoorState) -> str:
    """The phase `state` is in: "room", "orchard" or "door"."""
    if state.steps < rooms(task):
        return "room"
    return "orchard" if state.steps < rooms(task) + task.delay else "door"


def carried(holding: str) -> tuple[str, ...]:
    """The things `holding` names (none for `NOTHING`)."""
    return () if holding == NOTHING else tuple(holding.split(CARRIED_SEP))


def has_every_key(task: KeyDoorTask, holding: str) -> bool:
    """Whether `holding` holds each room's key: what opens the door."""
    # One thing per room left means none was skipped, so the i-th thing is room i's pick.
    return carried(holding) == task.keys


def state_id(task: KeyDoorTask, state: KeyDoorState) -> str:
    """`"orchard|t=3|holding=key"`: phase (for reading), step count, carried thing."""
    return f"{phase(task, state)}|t={state.steps}|holding={state.holding}"


def parse_state_id(task: KeyDoorTask, text: str) -> KeyDoorState:
    """Inverse of `state_id`; a ValueError names an id that is not a state of `task`."""
    try:
        _phase, steps_field, holding_field = text.split("|")
        steps = int(steps_field.removeprefix("t="))
        holding = holding_field.removeprefix("holding=")
    except ValueError as error:
        raise ValueError(f"not a KeyDoor state id: {text!r}") from error
    state = KeyDoorState(steps, holding)
    # The first room is only ever entered empty-handed; later, the agent carries at most
    # one thing of each room it left (nothing after a command that was not admissible
    # there). The round trip rejects spellings other than the canonical one ("t=03").
    things = carried(holding)
    left = min(steps, rooms(task))
    valid = (
        0 <= steps < task.max_steps
        and len(things) <= left
        and all(thing in {t for table in task.tables[:left] for t in table} for thing in things)
        and state_id(task, state) == text
    )
    if not valid:
        raise ValueError(f"{text!r} is not a state of {task.task_id}")
    return state


def commands(task: KeyDoorTask, state: KeyDoorState) -> tuple[str, ...]:
    """Admissible commands in `state`, in the order shown."""
    where = phase(task, state)
    if where == "room":
        return tuple(f"take the {thing}" for thing in task.tables[state.steps])
    return (EAT, WAIT) if where == "orchard" else (OPEN, WAIT)


def expert_command(task: KeyDoorTask, state: KeyDoorState) -> str:
    """The optimal command: take the key, eat every apple, open the door."""
    where = phase(task, state)
    if where == "room":
        return f"take the {task.keys[state.steps]}"
    return EAT if where == "orchard" else OPEN


def resolve(task: KeyDoorTask, state: KeyDoorState, action: object) -> str | None:
    """The admissible command `action` names (case and surrounding space ignored), or None."""
    text = (action if isinstance(action, str) else str(action)).strip().lower()
    return text if text in commands(task, state) else None


def apple_draws(task: KeyDoorTask, command: str | None) -> tuple[tuple[float, float | None], ...]:
    """(probability, apple value) of each random draw `command` needs: the apple's value
    when eating, a single None otherwise. Equal values are merged."""
    if command != EAT:
        return ((1.0, None),)
    values = task.apple_rewards
    return tuple((values.count(v) / len(values), v) for v in dict.fromkeys(values))


def advance(
    task: KeyDoorTask, state: KeyDoorState, command: str | None, apple_value: float | None
) -> Outcome[KeyDoorState]:
    """Take `command` (None: not admissible, treated as the phase's no-op) in `state`.

    The no-op of the room is to leave carrying nothing; of the orchard and the door, to
    wait. `apple_value` is the eaten apple's reward (ignored unless `command` is EAT).
    """
    where = phase(task, state)
    holding = state.holding
    reward, key_step = 0.0, False
    if where == "room":
        taken = command.removeprefix("take the ") if command is not None else NOTHING
        things = carried(holding) + carried(taken)
        holding = CARRIED_SEP.join(things) if things else NOTHING
        key_step = taken == task.keys[state.steps]
    elif where == "orchard":
        if command == EAT:
            if apple_value is None:
                raise ValueError("eating an apple needs its drawn value")
            reward = apple_value
    elif command == OPEN:
        success = has_every_key(task, holding)
        reward = DOOR_REWARD if success else 0.0
        return Outcome(None, reward, True, False, success, key_step=success)
    steps = state.steps + 1
    truncated = steps >= task.max_steps
    return Outcome(KeyDoorState(steps, holding), reward, False, truncated, False, key_step)


def _carrying(holding: str) -> str:
    things = [f"the {thing}" for thing in carried(holding)]
    if not things:
        return "nothing"
    return things[0] if len(things) == 1 else ", ".join(things[:-1]) + f" and {things[-1]}"


def _status(task: KeyDoorTask, steps: int, holding: str) -> str:
    # Turns left and what is carried make the observation Markov: the value of a state
    # depends on both, and nothing else about the past matters.
    return f"Turns left: {task.max_steps - steps}. You are carrying {_carrying(holding)}."


def observation(task: KeyDoorTask, state: KeyDoorState) -> str:
    """The text shown in `state` (what `reset` / `step` return and `view` repeats)."""
    where = phase(task, state)
    status = _status(task, state.steps, state.holding)
    if where == "room":
        things = [f"a {thing}" for thing in task.tables[state.steps]]
        listing = ", ".join(things[:-1]) + f" and {things[-1]}"
        if rooms(task) == 1:
            return (
                f"You are in a small room. On the table lie {listing}. You can carry one "
                "thing, and whatever you take you keep. A path leads through an orchard to "
                f"a door.\n{status}"
            )
        onward = "the next room" if state.steps + 1 < rooms(task) else "an orchard and a door"
        return (
            f"You are in room {state.steps + 1} of {rooms(task)}. On the table lie "
            f"{listing}. You can take one thing from each room, and whatever you take you "
            f"keep. A path leads on to {onward}.\n{status}"
        )
    if where == "orchard":
        turn = state.steps - rooms(task) + 1
        return (
            f"You are in the orchard (turn {turn} of {task.delay}). A ripe apple "
            f"hangs within reach.\n{status}"
        )
    return f"You stand before a closed door at the end of the orchard.\n{status}"


def final_observation(
    task: KeyDoorTask, state: KeyDoorState, outcome: Outcome[KeyDoorState]
) -> str:
    """The text shown after the door was opened from `state` (`outcome.reached` is None)."""
    if rooms(task) > 1:
        if outcome.success:
            return "You unlock the door with every key and step through."
        return (
            f"The door is locked, and you lack a key: you are carrying {_carrying(state.holding)}."
        )
    if outcome.success:
        return "You unlock the door with the key and step through."
    return f"The door is locked, and you have no key: you are carrying {_carrying(state.holding)}."


class KeyDoorMDP(DynamicsMDP[KeyDoorTask, KeyDoorState, float | None]):
    """The exact finite MDP of one KeyDoor task (`envs.mdp.DynamicsMDP`).

    States: the first room (t = 0), then (t, what is carried) for 1 <= t < max_steps (one
    room: at most 1 + (max_steps - 1) * (len(table) + 1) of them); the start is
    deterministic. Outcomes of eating an apple: one per distinct apple value; every other
    command has one.
    """

    task_text = TASK_TEXT

    def initial_states(self) -> tuple[tuple[float, str], ...]:
        return ((1.0, state_id(self.task, KeyDoorState(0, NOTHING))),)

    def parse_state(self, state: str) -> KeyDoorState:
        return parse_state_id(self.task, state)

    def state_id(self, state: KeyDoorState) -> str:
        return state_id(self.task, state)

    def commands(self, state: KeyDoorState) -> tuple[str, ...]:
        return commands(self.task, state)

    def observation(self, state: KeyDoorState) -> str:
        return observation(self.task, state)

    def draws(self, action: str) -> tuple[tuple[float, float | None], ...]:
        return apple_draws(self.task, action)

    def advance(
        self, state: KeyDoorState, action: str, draw: float | None
    ) -> Outcome[KeyDoorState]:
        return advance(self.task, state, action, draw)
