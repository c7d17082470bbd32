"""Exact policy evaluation on a finite MDP by dynamic programming: V, Q, A and the true gradient.

An env that describes itself as a finite, acyclic MDP (`envs.mdp.FiniteMDP`: the true
state, which may hold what the observation no longer shows) has values that one sweep
computes exactly, as COCOA does for its linear key-to-door (Meulemans et al. 2023, arXiv
2306.16803). For a policy given as a table pi(a|s):

- policy evaluation by dynamic programming, last states first (the MDPs here count the
  step in the state, so they are acyclic and one backward sweep is exact):
      Q(s, a) = sum_{s', r} P(s', r | s, a) (r + gamma V(s'))    (V(None) = 0: the end)
      V(s)    = sum_a pi(a|s) Q(s, a),    A(s, a) = Q(s, a) - V(s);
- the (discounted) expected visit count, first states first:
      d(s0) = P(s0),    d(s') += gamma d(s) pi(a|s) P(s' | s, a);
- the exact gradient of the expected return J = sum_s0 P(s0) V(s0) with respect to the
  logits theta_{s,a} of a softmax policy at each state (the policy-gradient theorem,
  Sutton et al. 2000, in the tabular parametrisation COCOA uses):
      dJ / dtheta_{s,a} = d(s) pi(a|s) A(s, a).

Pure arithmetic on `envs.mdp` (no model, no agent): the exact-MDP credit modules
(`credit.oracle`, `credit.hca`, `credit.exact_source`) compute with it, and measuring
credit (`measure.ground_truth`, `measure.truth_metrics`) scores the other modules
against it. Where the policy's table comes from (an LLM's constrained-decoding
distribution) is measure's; a module receives it through `CreditContext.exact_sources`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.envs.mdp import FiniteMDP

PolicyTable = Mapping[str, Mapping[str, float]]
"""state id -> admissible command -> pi(command | state)."""
TableSource = Callable[[FiniteMDP], PolicyTable]
"""A policy's exact table on a task's MDP, computed when called (the weights may have moved)."""

# A policy row must sum to 1 within this: float32 products of ~10 token probabilities
# (the LLM table) drift by ~1e-6; anything larger is a missing or extra action.
POLICY_SUM_TOL = 1e-4
# Transition probabilities of one (state, action) must sum to 1 within this.
TRANSITION_SUM_TOL = 1e-9


def reachable_states(mdp: FiniteMDP) -> list[str]:
    """Every state reachable from an initial state under some action, first states first.

    The order is topological (a state comes before every state it can lead to), which is
    what both sweeps of `evaluate_policy` need. Every transition's probabilities are
    checked to sum to 1.

    Raises:
        ValueError: the MDP has a cycle (policy evaluation by one sweep would be wrong),
            or a state's transition probabilities do not sum to 1.
    """
    order: list[str] = []
    status: dict[str, str] = {}  # "open" while on the DFS path, "done" after
    for _, start in mdp.initial_states():
        stack: list[tuple[str, list[str]]] = []
        if start in status:
            continue
        status[start] = "open"
        stack.append((start, _successors(mdp, start)))
        while stack:
            state, pending = stack[-1]
            if pending:
                successor = pending.pop()
                if status.get(successor) == "open":
                    raise ValueError(f"the MDP has a cycle through state {successor!r}")
                if successor not in status:
                    status[successor] = "open"
                    stack.append((successor, _successors(mdp, successor)))
                continue
            stack.pop()
            status[state] = "done"
            order.append(state)
    order.reverse()  # reverse DFS post-order is a topological order
    return order


def _successors(mdp: FiniteMDP, state: str) -> list[str]:
    """Distinct next states of `state` under any admissible action (checks probabilities)."""
    successors: dict[str, None] = {}
    actions = mdp.actions(state)
    if not actions:
        raise ValueError(f"state {state!r} has no admissible action")
    for action in actions:
        transitions = mdp.transitions(state, action)
        total = sum(t.probability for t in transitions)
        if abs(total - 1.0) > TRANSITION_SUM_TOL:
            raise ValueError(f"transitions of ({state!r}, {action!r}) sum to {total}, not 1")
        for transition in transitions:
            if transition.next_state is not None:
                successors[transition.next_state] = None
    return list(successors)


def check_policy(mdp: FiniteMDP, states: Sequence[str], policy: PolicyTable) -> None:
    """ValueError unless pi(.|s) is a distribution over exactly the admissible commands."""
    for state in states:
        if state not in policy:
            raise ValueError(f"the policy has no row for reachable state {state!r}")
        row = policy[state]
        if set(row) != set(mdp.actions(state)):
            raise ValueError(
                f"state {state!r}: policy actions {sorted(row)} are not the admissible "
                f"commands {sorted(mdp.actions(state))}"
            )
        total = sum(row.values())
        if abs(total - 1.0) > POLICY_SUM_TOL or min(row.values()) < 0:
            raise ValueError(f"state {state!r}: pi(.|s) sums to {total} or has a negative entry")


@dataclass(frozen=True)
class GroundTruth:
    """Exact values of one policy on one finite MDP (see module docstring).

    Attributes:
        states: reachable states, first states first (topological order).
        policy: pi(a|s) for every state in `states`.
        values: V(s).
        q_values: Q(s, a) for every admissible a.
        visits: d(s), the expected number of visits of s (gamma-discounted when gamma < 1).
        gamma: discount.
        expected_return: J = sum_s0 P(s0) V(s0).
        index: (state, action) -> position in the flat logit vector (`gradient_vector`).
    """

    states: tuple[str, ...]
    policy: Mapping[str, Mapping[str, float]]
    values: Mapping[str, float]
    q_values: Mapping[str, Mapping[str, float]]
    visits: Mapping[str, float]
    gamma: float
    expected_return: float
    index: Mapping[tuple[str, str], int]

    def advantage(self, state: str, action: str) -> float:
        """A(s, a) = Q(s, a) - V(s)."""
        return self.q_values[state][action] - self.values[state]

    def gradient(self, state: str, action: str) -> float:
        """dJ / dtheta_{s,a} = d(s) pi(a|s) A(s, a)."""
        return self.visits[state] * self.policy[state][action] * self.advantage(state, action)

    def gradient_vector(self) -> np.ndarray:
        """The exact gradient over every (state, action) logit, [K] float64 in `index` order."""
        vector = np.zeros(len(self.index), dtype=np.float64)
        for (state, action), position in self.index.items():
            vector[position] = self.gradient(state, action)
        return vector

    def policy_vector(self, state: str) -> tuple[np.ndarray, np.ndarray]:
        """(positions [A_s] int64, pi(.|s) [A_s] float64) of state's logits in `index`."""
        actions = list(self.policy[state])
        positions = np.array([self.index[(state, a)] for a in actions], dtype=np.int64)
        return positions, np.array([self.policy[state][a] for a in actions], dtype=np.float64)


def action_values(
    mdp: FiniteMDP, state: str, values: Mapping[str, float], gamma: float
) -> dict[str, float]:
    """Q(state, a) = sum over outcomes p (r + gamma V(next)) for every admissible a."""
    return {
        action: sum(
            t.probability * (t.reward + (gamma * values[t.next_state] if t.next_state else 0.0))
            for t in mdp.transitions(state, action)
        )
        for action in mdp.actions(state)
    }


def visit_counts(
    mdp: FiniteMDP, states: Sequence[str], policy: PolicyTable, gamma: float
) -> dict[str, float]:
    """d(s) = sum_t gamma^t P(s_t = s), forward in topological order."""
    visits = dict.fromkeys(states, 0.0)
    for probability, start in mdp.initial_states():
        visits[start] += probability
    for state in states:
        for action, pi in policy[state].items():
            for t in mdp.transitions(state, action):
                if t.next_state is not None:
                    visits[t.next_state] += gamma * visits[state] * pi * t.probability
    return visits


def evaluate_policy(mdp: FiniteMDP, policy: PolicyTable, gamma: float = 1.0) -> GroundTruth:
    """V, Q, d and the exact gradient of `policy` on `mdp` (one backward, one forward sweep).

    Args:
        mdp: a finite acyclic MDP (`envs.mdp.FiniteMDP`).
        policy: pi(a|s) for every reachable state (`check_policy`).
        gamma: discount in [0, 1] (default 1: the undiscounted return the envs report).
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    states = reachable_states(mdp)
    check_policy(mdp, states, policy)
    values: dict[str, float] = {}
    q_values: dict[str, dict[str, float]] = {}
    for state in reversed(states):
        q_values[state] = action_values(mdp, state, values, gamma)
        values[state] = sum(policy[state][a] * q for a, q in q_values[state].items())
    index = {
        (state, action): position
        for position, (state, action) in enumerate(
            (state, action) for state in states for action in mdp.actions(state)
        )
    }
    return GroundTruth(
        states=tuple(states),
        policy={s: dict(policy[s]) for s in states},
        values=values,
        q_values=q_values,
        visits=visit_counts(mdp, states, policy, gamma),
        gamma=gamma,
        expected_return=sum(p * values[s] for p, s in mdp.initial_states()),
        index=index,
    )


def task_truths(
    task_ids: Iterable[str], mdps: Callable[[str], FiniteMDP], tables: TableSource
) -> dict[str, tuple[FiniteMDP, PolicyTable]]:
    """Task id -> (its MDP, the policy's exact table on it), one table per distinct task."""
    out: dict[str, tuple[FiniteMDP, PolicyTable]] = {}
    for task_id in dict.fromkeys(task_ids):
        mdp = mdps(task_id)
        out[task_id] = (mdp, tables(mdp))
    return out


def true_advantages(trajectory: Trajectory, truth: GroundTruth) -> np.ndarray:
    """A(s_t, a_t) of every step, [T] float64, the state read from `info["mdp_state"]`."""
    return np.array(
        [truth.advantage(step.info["mdp_state"], step.action) for step in trajectory.steps],
        dtype=np.float64,
    )
