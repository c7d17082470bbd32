"""Umbrella's task, true state, dynamics and text, shared by the env and its exact MDP.

bsuite's `umbrella_chain` (Osband et al. 2020, "Behaviour Suite for Reinforcement
Learning", arXiv 1908.03568) as text. One function, `advance`, moves the true state; the
env feeds it one sampled draw (the noise reward's sign and the next distractor facts),
`UmbrellaMDP.transitions` every draw with its probability, so the two cannot drift.

Timeline (t = steps taken so far; L = `length`):

    t = 0            at home: the forecast is shown (only here, unless `forecast_visible`);
                     take or leave the umbrella
    t = 1 .. L - 1   walking: two commands, neither has any effect
    each step t < L - 1 pays +1 or -1 with probability 1/2 (noise no action controls);
    the step from t = L - 1 pays +1 if the umbrella choice matched the forecast, else -1

As in bsuite the forecast is always right, so the first action alone decides the final
reward, and the trajectory-level signal-to-noise ratio of that action is about
2 / sqrt(L - 1). Distractor facts, `num_distractors` random bits drawn afresh every
step, are shown and never matter.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from creditgym.envs.mdp import DynamicsMDP, Outcome

TAKE = "take the umbrella"
LEAVE = "leave the umbrella"
WALK_COMMANDS = ("walk briskly", "walk slowly")
# (shown when the bit is 1, shown when it is 0): street life with no bearing on weather.
FACT_POOL = (
    ("A dog is barking.", "No dog is barking."),
    ("The traffic light is green.", "The traffic light is red."),
    ("A bus is passing.", "No bus is in sight."),
    ("The cafe is open.", "The cafe is closed."),
    ("A cyclist rings a bell.", "No cyclist is near."),
    ("Church bells are ringing.", "The church bells are silent."),
    ("A street musician is playing.", "No music is playing."),
    ("The bakery smells of bread.", "The bakery is dark."),
    ("Pigeons crowd the square.", "The square is empty."),
    ("A train rumbles past.", "The rails are quiet."),
    ("Your phone buzzes.", "Your phone is silent."),
    ("A kite is flying.", "No kite is in the sky."),
)
TASK_TEXT = "Walk to work, one action per turn, and collect as much reward as you can."
INSTANCES = 100_000  # seeds draw task n in [0, this); task ids accept any n >= 0


@dataclass(frozen=True)
class UmbrellaTask:
    """One Umbrella instance: everything about an episode that is not random.

    Attributes:
        task_id: "umbrella-<n>" (with the env's kwargs, decodes to this instance).
        length: L, steps of a full episode (the chain length).
        facts: the distractor facts shown each step, as (bit 1 text, bit 0 text).
        max_steps: step limit; below `length` it truncates before the final reward.
        forecast_visible: every observation shows the forecast, as bsuite's
            `umbrella_distract` keeps `need_umbrella` in view; otherwise only home does.
    """

    task_id: str
    length: int
    facts: tuple[tuple[str, str], ...]
    max_steps: int
    forecast_visible: bool = False


@dataclass(frozen=True)
class UmbrellaState:
    """The true state: steps taken, the forecast (hidden after t = 0), the umbrella,
    and the distractor bits now shown."""

    steps: int
    rain: bool
    umbrella: bool
    facts: tuple[bool, ...]


@dataclass(frozen=True)
class Draw:
    """The randomness of one step: the noise reward and the next distractor bits."""

    noise: float
    facts: tuple[bool, ...]


def build_task(
    index: int, length: int, num_distractors: int, max_steps: int, forecast_visible: bool = False
) -> UmbrellaTask:
    """Task `umbrella-<index>`: which distractor facts are shown, in what order."""
    rng = random.Random(f"creditgym/Umbrella-v0/{num_distractors}/{index}")
    facts = tuple(rng.sample(FACT_POOL, num_distractors))
    return UmbrellaTask(f"umbrella-{index}", length, facts, max_steps, forecast_visible)


def forecast_name(rain: bool) -> str:
    """The forecast as the observations and `info["forecast"]` say it."""
    return "rain" if rain else "sunshine"


def decode_bits(bits: int, count: int) -> tuple[bool, ...]:
    """The lowest `count` bits of `bits`, lowest first."""
    return tuple(bool(bits >> position & 1) for position in range(count))


def state_id(state: UmbrellaState) -> str:
    """`"t=3|forecast=rain|umbrella=1|facts=01"`: every field of the true state."""
    facts = "".join("1" if bit else "0" for bit in state.facts)
    forecast = "rain" if state.rain else "sun"
    return f"t={state.steps}|forecast={forecast}|umbrella={int(state.umbrella)}|facts={facts}"


def parse_state_id(task: UmbrellaTask, text: str) -> UmbrellaState:
    """Inverse of `state_id`; a ValueError names an id that is not a state of `task`."""
    fields = text.split("|")
    names = ("t=", "forecast=", "umbrella=", "facts=")
    if len(fields) != 4 or not all(f.startswith(n) for f, n in zip(fields, names, strict=True)):
        raise ValueError(f"not an Umbrella state id: {text!r}")
    steps, forecast, umbrella, facts = (f.split("=", 1)[1] for f in fields)
    valid = (
        steps.isdigit()
        and int(steps) < min(task.length, task.max_steps)
        and forecast in ("rain", "sun")
        # Everyone leaves home without the umbrella in hand; the first step decides.
        and umbrella in (("0",) if steps == "0" else ("0", "1"))
        and len(facts) == len(task.facts)
        and set(facts) <= {"0", "1"}
    )
    if not valid:
        raise ValueError(f"{text!r} is not a state of {task.task_id}")
    state = UmbrellaState(
        int(steps), forecast == "rain", umbrella == "1", tuple(bit == "1" for bit in facts)
    )
    # The round trip rejects spellings other than the canonical one ("t=03").
    if state_id(state) != text:
        raise ValueError(f"{text!r} is not the canonical id of {state_id(state)!r}")
    return state


def commands(state: UmbrellaState) -> tuple[str, ...]:
    """Admissible commands in `state`, in the order shown."""
    return (TAKE, LEAVE) if state.steps == 0 else WALK_COMMANDS


def expert_command(state: UmbrellaState) -> str:
    """The optimal command: follow the forecast at home, then any walk."""
    if state.steps == 0:
        return TAKE if state.rain else LEAVE
    return WALK_COMMANDS[0]


def resolve(state: UmbrellaState, action: object) -> str | None:
    """The admissible command `action` names (case and surrounding space ignored), or None."""
    text = (action if isinstance(action, str) else str(action)).strip().lower()
    return text if text in commands(state) else None


def draws(task: UmbrellaTask) -> tuple[tuple[float, Draw], ...]:
    """Every draw of one step with its probability (uniform over 2 ** (1 + n) draws)."""
    count = len(task.facts)
    probability = 0.5 ** (count + 1)
    return tuple(
        (probability, Draw(noise, facts))
        for noise in (1.0, -1.0)
        for facts in itertools.product((True, False), repeat=count)
    )


def carries_umbrella(state: UmbrellaState, command: str | None) -> bool:
    """Whether the agent carries the umbrella after `command`: only the first step's
    choice counts (None, not admissible, leaves it at home)."""
    return command == TAKE if state.steps == 0 else state.umbrella


def advance(
    task: UmbrellaTask, state: UmbrellaState, command: str | None, draw: Draw
) -> Outcome[UmbrellaState]:
    """Take `command` (None: not admissible, which at home means leaving the umbrella)."""
    umbrella = carries_umbrella(state, command)
    key_step = state.steps == 0 and umbrella == state.rain
    steps = state.steps + 1
    if steps == task.length:
        success = umbrella == state.rain
        return Outcome(None, 1.0 if success else -1.0, True, False, success, key_step)
    reached = UmbrellaState(steps, state.rain, umbrella, draw.facts)
    return Outcome(reached, draw.noise, False, steps >= task.max_steps, False, key_step)


def _facts_line(task: UmbrellaTask, bits: tuple[bool, ...]) -> str:
    return "".join(
        f"\n{shown if bit else hidden}"
        for (shown, hidden), bit in zip(task.facts, bits, strict=True)
    )


def observation(task: UmbrellaTask, state: UmbrellaState) -> str:
    """The text shown in `state` (what `reset` / `step` return and `view` repeats)."""
    facts = _facts_line(task, state.facts)
    forecast = f"The forecast for the end of your walk: {forecast_name(state.rain)}."
    if state.steps == 0:
        return (
            f"You are at home, about to walk {task.length} blocks to work. {forecast} "
            f"An umbrella stands by the door.{facts}\nYou are not carrying an umbrella."
        )
    carrying = "carrying an umbrella" if state.umbrella else "not carrying an umbrella"
    shown = f" {forecast}" if task.forecast_visible else ""
    return (
        f"You are walking to work: block {state.steps} of {task.length}.{shown}{facts}\n"
        f"You are {carrying}."
    )


def final_observation(state: UmbrellaState, command: str | None) -> str:
    """The text shown after `command` in `state` ended the walk."""
    umbrella = carries_umbrella(state, command)
    if state.rain:
        if umbrella:
            return "You reach work. It is raining, and your umbrella keeps you dry."
        return "You reach work. It is raining, and without an umbrella you are soaked."
    if umbrella:
        return "You reach work in sunshine, having carried an umbrella all the way for nothing."
    return "You reach work in sunshine, with nothing to carry."


class UmbrellaMDP(DynamicsMDP[UmbrellaTask, UmbrellaState, Draw]):
    """The exact finite MDP of one Umbrella task (`envs.mdp.DynamicsMDP`).

    States: (t, forecast, umbrella, distractor bits) for t < min(length, max_steps):
    2 ** (n + 1) at home and 2 ** (n + 2) per later step, n = `num_distractors`; the
    start is uniform over the forecast and the bits. Each action has up to 2 ** (n + 1)
    outcomes (the noise sign times the next bits), merged where they coincide (the final
    step has one). Sizes grow as 2 ** n: keep n small for exact work.
    """

    task_text = TASK_TEXT

    def initial_states(self) -> tuple[tuple[float, str], ...]:
        count = len(self.task.facts)
        probability = 0.5 ** (count + 1)
        return tuple(
            (probability, state_id(UmbrellaState(0, rain, False, facts)))
            for rain in (True, False)
            for facts in itertools.product((True, False), repeat=count)
        )

    def parse_state(self, state: str) -> UmbrellaState:
        return parse_state_id(self.task, state)

    def state_id(self, state: UmbrellaState) -> str:
        return state_id(state)

    def commands(self, state: UmbrellaState) -> tuple[str, ...]:
        return commands(state)

    def observation(self, state: UmbrellaState) -> str:
        return observation(self.task, state)

    def draws(self, action: str) -> tuple[tuple[float, Draw], ...]:
        return draws(self.task)

    def advance(self, state: UmbrellaState, action: str, draw: Draw) -> Outcome[UmbrellaState]:
        return advance(self.task, state, action, draw)
