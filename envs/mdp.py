"""An environment described as a finite MDP, for exact ground-truth credit.

An env that can describe itself exactly implements `finite_mdp() -> FiniteMDP` (on the
unwrapped env, for the task `reset` drew). The description is the env's *true* dynamics:
a state id may hold what the observation no longer shows (Umbrella's forecast after the
first step) and includes the step count, so every MDP here is finite-horizon and acyclic
and dynamic programming over it is exact (Meulemans et al. 2023, arXiv 2306.16803, use the
same construction to score policy-gradient estimators against the true gradient).

Contract:
- State ids are strings (JSON-serialisable, so they travel in `info`).
- `view(s)` returns exactly what the rollout would show the agent in `s` with no history:
  the observation `reset` / `step` returned, the task text and the admissible commands.
  The prompt a policy sees at `s` is therefore a function of `view(s)` alone.
- `transitions(s, a)` lists every outcome of action `a` in `s` with its probability
  (summing to 1). `next_state` is None when the episode ends (terminated or truncated).
  Rewards are listed per outcome, so a random distractor reward is several outcomes.
- Every `info` an env returns carries the true state, so sampled trajectories can be
  matched to the MDP: `reset`'s info has `mdp_state` = s_0; the info of the step that
  takes a_t in s_t has `mdp_state` = s_t (it labels the step, as `key_step` does) and
  `mdp_next_state` = s_{t+1} (None when the episode ended).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar, runtime_checkable

TaskT = TypeVar("TaskT")
StateT = TypeVar("StateT")
DrawT = TypeVar("DrawT")


@dataclass(frozen=True)
class Transition:
    """One outcome of taking an action in a state.

    Attributes:
        probability: P(outcome | state, action), in (0, 1].
        next_state: id of the next state; None when the episode ends here.
        reward: reward paid on this outcome.
        terminated: the episode ended in a terminal state (success or failure).
        truncated: the episode was cut by the step limit.
        success: the env's success verdict on this outcome (read where it ends the
            episode: exact hindsight conditions on it, `credit.exact_hindsight`); None
            where the env does not describe it.
    """

    probability: float
    next_state: str | None
    reward: float
    terminated: bool = False
    truncated: bool = False
    success: bool | None = None


@dataclass(frozen=True)
class StateView:
    """What the agent sees in a state (the `AgentInput` fields a no-history prompt uses)."""

    observation: str
    task: str
    admissible_commands: tuple[str, ...]


@runtime_checkable
class FiniteMDP(Protocol):
    """Exact description of one task of an env (see module docstring)."""

    def initial_states(self) -> Sequence[tuple[float, str]]:
        """(probability, state id) pairs of the initial state distribution."""
        ...

    def actions(self, state: str) -> tuple[str, ...]:
        """Admissible commands in `state` (the same list `view(state)` shows)."""
        ...

    def view(self, state: str) -> StateView:
        """Observation, task and admissible commands the agent sees in `state`."""
        ...

    def transitions(self, state: str, action: str) -> Sequence[Transition]:
        """Every outcome of `action` in `state`; probabilities sum to 1."""
        ...


def parse_task_index(task_id: object, prefix: str) -> int:
    """`"<prefix>-17"` -> 17 (a task id of KeyDoor or Umbrella); a clear ValueError for
    anything else."""
    found, _, index = str(task_id).rpartition("-")
    if found != prefix or not index.isdigit():
        raise ValueError(f"task_id {task_id!r} is not '{prefix}-<n>' with n a non-negative integer")
    return int(index)


@dataclass(frozen=True)
class Outcome(Generic[StateT]):
    """What one step of an env's dynamics did (the `advance` of envs/keydoor/dynamics.py
    and envs/umbrella/dynamics.py, which say what each field means there).

    Attributes:
        reached: the state the step led to; None when the episode ended by itself. At the
            step limit it is the state the agent would act in next, were it not truncated.
        reward: reward paid by the step.
        terminated: the episode ended by itself.
        truncated: the step limit was reached first.
        success: the env's verdict on an episode the step ended.
        key_step: the step was one the solution needs (the env's `info["key_step"]`).
    """

    reached: StateT | None
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    key_step: bool

    @property
    def next_state(self) -> StateT | None:
        """The MDP's next state: None once the episode ended (terminated or truncated)."""
        return None if self.terminated or self.truncated else self.reached


class DynamicsMDP(ABC, Generic[TaskT, StateT, DrawT]):
    """The exact finite MDP (`FiniteMDP`) of one task of an env written as pure dynamics:
    a subclass says how a state is written and read, what the agent sees, which random
    draws a step needs and what a step does; actions, views and transitions follow.

    Commands that are not admissible are not actions of the MDP (the env maps them to a
    no-op its `advance` documents). Outcomes of one action that coincide (same next
    state, reward and ending) are one transition with their summed probability.
    """

    task_text: ClassVar[str]
    """The task instruction every view shows."""

    def __init__(self, task: TaskT) -> None:
        self.task = task

    @abstractmethod
    def initial_states(self) -> tuple[tuple[float, str], ...]:
        """(probability, state id) pairs of the initial state distribution."""

    @abstractmethod
    def parse_state(self, state: str) -> StateT:
        """The true state a state id names (ValueError for another task's)."""

    @abstractmethod
    def state_id(self, state: StateT) -> str:
        """The id of a true state."""

    @abstractmethod
    def commands(self, state: StateT) -> tuple[str, ...]:
        """The admissible commands in a true state."""

    @abstractmethod
    def observation(self, state: StateT) -> str:
        """What the agent sees in a true state."""

    @abstractmethod
    def draws(self, action: str) -> Sequence[tuple[float, DrawT]]:
        """(probability, draw) of every random draw taking `action` needs."""

    @abstractmethod
    def advance(self, state: StateT, action: str, draw: DrawT) -> Outcome[StateT]:
        """What taking `action` in `state` does when the randomness is `draw`."""

    def actions(self, state: str) -> tuple[str, ...]:
        return self.commands(self.parse_state(state))

    def view(self, state: str) -> StateView:
        true_state = self.parse_state(state)
        return StateView(self.observation(true_state), self.task_text, self.commands(true_state))

    def transitions(self, state: str, action: str) -> tuple[Transition, ...]:
        true_state = self.parse_state(state)
        if action not in self.commands(true_state):
            raise ValueError(f"{action!r} is not admissible in {state!r}")
        merged: dict[tuple[str | None, float, bool, bool, bool], float] = {}
        for probability, draw in self.draws(action):
            outcome = self.advance(true_state, action, draw)
            reached = outcome.next_state
            key = (
                None if reached is None else self.state_id(reached),
                outcome.reward,
                outcome.terminated,
                outcome.truncated,
                outcome.success,
            )
            merged[key] = merged.get(key, 0.0) + probability
        return tuple(Transition(probability, *fields) for fields, probability in merged.items())
