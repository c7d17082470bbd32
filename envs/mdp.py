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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


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
