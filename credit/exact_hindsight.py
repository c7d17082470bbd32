"""Exact hindsight distributions of a policy on a finite MDP (HCA, arXiv 1912.02503).

For an outcome Z of the episode from state s, Bayes' rule gives the hindsight
distribution of the action taken in s:

    h(a | s, Z = z) = pi(a|s) P(Z = z | s, a) / P(Z = z | s),
    P(Z = z | s)    = sum_a pi(a|s) P(Z = z | s, a).

On a finite acyclic MDP (`envs.mdp`) the outcome distributions are exact by one backward
sweep (the one `credit.policy_evaluation.evaluate_policy` runs for values), carrying a
distribution over outcome values instead of its mean:

    P(Z = z | s, a) = sum_outcomes p * ( 1[episode ends] 1[z = z_end(outcome)]
                                         + 1[it goes on]  P(Z = f^-1(z) | s') ),

with, per outcome kind (`OUTCOMES`):
- `success`: z_end = the env's success verdict on the ending outcome (1 or 0), passed
  through unchanged while the episode goes on; P(Z = 1 | s, a) is then the Q-value of the
  policy whose only reward is the success indicator;
- `return`: the return-to-go, z_end = r and z = r + gamma z' while it goes on; it takes
  finitely many values on these MDPs (finitely many paths), so its law is exact too.

Under constrained decoding an action is a path in the token trie of its command
(`agents.constrained`), and any distribution q over commands (the policy, or h(.|s, z))
has exact per-token conditionals along that path,

    q(y_j | y_<j) = sum_{c extends y_<=j} q(c) / sum_{c extends y_<j} q(c),

whose product over the path telescopes back to q(command) (`trie_conditionals`;
docs/exact_hindsight.md derives both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from creditgym.agents.trajectory import Trajectory
from creditgym.credit.policy_evaluation import PolicyTable, check_policy, reachable_states
from creditgym.envs.mdp import FiniteMDP, Transition

# Returns are sums of float rewards along paths, so two paths to one return can differ in
# the last bits; outcome values are rounded to this many decimals to be one value.
OUTCOME_DECIMALS = 9


def outcome_key(value: float) -> float:
    """The outcome value as the distributions key it (rounded; -0.0 becomes 0.0)."""
    return round(float(value), OUTCOME_DECIMALS) + 0.0


def _success_at_end(transition: Transition) -> float:
    if transition.success is None:
        raise ValueError(
            "the MDP does not describe its success verdict (Transition.success is None); "
            "condition on the return instead"
        )
    return float(transition.success)


def _sampled_success(trajectory: Trajectory, gamma: float) -> np.ndarray:
    del gamma  # the verdict is the episode's, whenever it comes
    return np.full(trajectory.length, float(trajectory.success), dtype=np.float64)


def _sampled_return_to_go(trajectory: Trajectory, gamma: float) -> np.ndarray:
    rewards = np.array([step.reward for step in trajectory.steps], dtype=np.float64)
    to_go = np.zeros(len(rewards) + 1, dtype=np.float64)
    for t in range(len(rewards) - 1, -1, -1):
        to_go[t] = rewards[t] + gamma * to_go[t + 1]
    return to_go[:-1]


@dataclass(frozen=True)
class Outcome:
    """How one kind of outcome Z is built along an episode.

    Attributes:
        at_end: z of a transition that ends the episode.
        through: z of a transition that goes on, from (transition, z of the next state,
            gamma).
        sampled: per step of a sampled trajectory, the outcome from that step on, [T].
    """

    at_end: Callable[[Transition], float]
    through: Callable[[Transition, float, float], float]
    sampled: Callable[[Trajectory, float], np.ndarray]


OUTCOMES: dict[str, Outcome] = {
    "success": Outcome(
        at_end=_success_at_end,
        through=lambda transition, z_next, gamma: z_next,
        sampled=_sampled_success,
    ),
    "return": Outcome(
        at_end=lambda transition: transition.reward,
        through=lambda transition, z_next, gamma: transition.reward + gamma * z_next,
        sampled=_sampled_return_to_go,
    ),
}


def _add(distribution: dict[float, float], value: float, probability: float) -> None:
    key = outcome_key(value)
    distribution[key] = distribution.get(key, 0.0) + probability


@dataclass(frozen=True)
class ExactHindsight:
    """Exact outcome laws and hindsight distributions of one policy on one finite MDP.

    Attributes:
        outcome: the kind of Z (a key of `OUTCOMES`).
        gamma: discount of the return (the `return` outcome).
        states: reachable states, first states first.
        policy: pi(a|s) for every state in `states`.
        state_outcomes: s -> z -> P(Z = z | s), over the z with positive probability.
        action_outcomes: s -> a -> z -> P(Z = z | s, a), likewise.
    """

    outcome: str
    gamma: float
    states: tuple[str, ...]
    policy: Mapping[str, Mapping[str, float]]
    state_outcomes: Mapping[str, Mapping[float, float]]
    action_outcomes: Mapping[str, Mapping[str, Mapping[float, float]]]

    def probability(self, state: str, z: float, action: str | None = None) -> float:
        """P(Z = z | s), or P(Z = z | s, a) with `action`."""
        law = self.state_outcomes[state] if action is None else self.action_outcomes[state][action]
        return law.get(outcome_key(z), 0.0)

    def _checked(self, state: str, z: float) -> float:
        p_z = self.probability(state, z)
        if p_z <= 0.0:
            raise ValueError(f"outcome {z!r} has probability 0 from state {state!r}")
        return p_z

    def hindsight(self, state: str, action: str, z: float) -> float:
        """h(a | s, Z = z) = pi(a|s) P(z | s, a) / P(z | s).

        Raises:
            ValueError: P(z | s) = 0 (no hindsight given an impossible outcome).
        """
        p_z = self._checked(state, z)
        return self.policy[state][action] * self.probability(state, z, action) / p_z

    def hindsight_row(self, state: str, z: float) -> dict[str, float]:
        """h(. | s, Z = z) over the admissible commands (sums to 1)."""
        return {action: self.hindsight(state, action, z) for action in self.policy[state]}

    def ratio(self, state: str, action: str, z: float) -> float:
        """pi(a|s) / h(a | s, z) = P(z | s) / P(z | s, a): HCA's importance ratio.

        Raises:
            ValueError: P(z | s, a) = 0 (the pair cannot lead to z: no sampled step has it).
        """
        p_z = self._checked(state, z)
        p_za = self.probability(state, z, action)
        if p_za <= 0.0:
            raise ValueError(f"outcome {z!r} cannot follow {action!r} in state {state!r}")
        return p_z / p_za

    def hca_bias(self, state: str, action: str) -> float:
        """E[(1 - pi(a|s) / h(a|s, Z)) Z | s, a] - A(s, a) = sum_{z: P(z|s,a) = 0} P(z|s) z.

        HCA's return-conditional identity averages over the outcomes that can follow a;
        an outcome reachable from s but not after a drops its share of V(s) (the paper's
        positivity assumption, h(a|s, z) > 0, excludes it). 0 where every nonzero outcome
        of s can follow a.
        """
        law = self.action_outcomes[state][action]
        return sum(p * z for z, p in self.state_outcomes[state].items() if law.get(z, 0.0) <= 0.0)

    def verdict_row(self, state: str, past_return: float, success: bool) -> dict[str, float]:
        """h(. | s, V = success) for the channel's verdict V = 1[return > 0]
        (`credit.base.verdict`), the return so far being `past_return`:
        P(V = 1 | s, a) = sum_{z > -past_return} P(Z = z | s, a) of the return-to-go law.

        Raises:
            ValueError: not the undiscounted `return` outcome, or a verdict of probability
                0 from `state`.
        """
        if self.outcome != "return" or self.gamma != 1.0:
            raise ValueError("the channel's verdict needs the undiscounted return-to-go law")
        weights = {
            action: self.policy[state][action]
            * sum(p for z, p in law.items() if (past_return + z > 0.0) == success)
            for action, law in self.action_outcomes[state].items()
        }
        total = sum(weights.values())
        if total <= 0.0:
            raise ValueError(f"verdict {success} has probability 0 from state {state!r}")
        return {action: weight / total for action, weight in weights.items()}


def exact_hindsight(
    mdp: FiniteMDP, policy: PolicyTable, outcome: str = "return", gamma: float = 1.0
) -> ExactHindsight:
    """P(Z | s, a), P(Z | s) and so h(a | s, Z) of `policy` for every reachable state.

    One backward sweep in topological order (see the module docstring).

    Args:
        mdp: a finite acyclic MDP.
        policy: pi(a|s) for every reachable state (`credit.policy_evaluation.check_policy`).
        outcome: `success` or `return` (`OUTCOMES`).
        gamma: discount in [0, 1] of the return-to-go.
    Raises:
        ValueError: an unknown outcome, a gamma outside [0, 1], a policy that is not a
            distribution over each state's commands, or (for `success`) an MDP whose
            ending transitions carry no success verdict.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; valid: {', '.join(OUTCOMES)}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    rule = OUTCOMES[outcome]
    states = reachable_states(mdp)
    check_policy(mdp, states, policy)
    state_outcomes: dict[str, dict[float, float]] = {}
    action_outcomes: dict[str, dict[str, dict[float, float]]] = {}
    for state in reversed(states):
        rows: dict[str, dict[float, float]] = {}
        for action in mdp.actions(state):
            law: dict[float, float] = {}
            for transition in mdp.transitions(state, action):
                if transition.next_state is None:
                    _add(law, rule.at_end(transition), transition.probability)
                    continue
                for z_next, p_next in state_outcomes[transition.next_state].items():
                    z = rule.through(transition, z_next, gamma)
                    _add(law, z, transition.probability * p_next)
            rows[action] = law
        mixed: dict[float, float] = {}
        for action, law in rows.items():
            for z, p in law.items():
                _add(mixed, z, policy[state][action] * p)
        action_outcomes[state] = rows
        # An outcome only a zero-probability action leads to has P(z | s) = 0: left out.
        state_outcomes[state] = {z: p for z, p in mixed.items() if p > 0.0}
    return ExactHindsight(
        outcome=outcome,
        gamma=gamma,
        states=tuple(states),
        policy={s: dict(policy[s]) for s in states},
        state_outcomes=state_outcomes,
        action_outcomes=action_outcomes,
    )


def _prefix_masses(
    sequences: Sequence[Sequence[int]], probabilities: Sequence[float]
) -> dict[tuple[int, ...], float]:
    """Prefix u -> m(u), the sum of q over the sequences that start with u."""
    mass: dict[tuple[int, ...], float] = {}
    for sequence, q in zip(sequences, probabilities, strict=True):
        for j in range(len(sequence) + 1):
            prefix = tuple(sequence[:j])
            mass[prefix] = mass.get(prefix, 0.0) + float(q)
    return mass


def trie_conditionals(
    sequences: Sequence[Sequence[int]], probabilities: Sequence[float]
) -> list[np.ndarray]:
    """Per-token conditionals q(y_j | y_<j) of a distribution q over a trie's sequences.

    Args:
        sequences: the commands' token sequences, prefix-free (each ends with its own
            stop token, as `agents.constrained.action_token_sequences` builds them).
        probabilities: q of each sequence (summing to 1: pi(.|s) or h(.|s, z)).
    Returns:
        per sequence, [len] float64 conditionals along its path; their product is q of
        the sequence. A prefix of mass 0 gives its continuations 0.
    Raises:
        ValueError: a sequence is a prefix of another (its mass would be ambiguous).
    """
    ends = {tuple(sequence) for sequence in sequences}
    for sequence in sequences:
        for j in range(len(sequence)):
            if tuple(sequence[:j]) in ends:
                raise ValueError(f"token sequence {list(sequence[:j])} is a prefix of another")
    mass = _prefix_masses(sequences, probabilities)
    return [
        np.array(
            [
                mass[tuple(sequence[: j + 1])] / mass[tuple(sequence[:j])]
                if mass[tuple(sequence[:j])] > 0.0
                else 0.0
                for j in range(len(sequence))
            ],
            dtype=np.float64,
        )
        for sequence in sequences
    ]


@dataclass(frozen=True)
class StepTrie:
    """Step t's commands as a token trie with the policy's and the exact hindsight's mass.

    Attributes:
        sequences: the commands' constrained token sequences.
        taken: index of the command the step took.
        hindsight: h(c | s_t, V) of each command, V the channel's verdict.
        policy: pi(c | s_t) of each command.
    """

    sequences: tuple[tuple[int, ...], ...]
    taken: int
    hindsight: tuple[float, ...]
    policy: tuple[float, ...]


def step_trie(
    trajectory: Trajectory,
    t: int,
    action_sequences: Mapping[str, Sequence[int]],
    hindsight: ExactHindsight,
    success: bool,
) -> StepTrie:
    """Step t of `trajectory` in its state's trie, with h(. | s_t, V) and pi(. | s_t).

    Args:
        action_sequences: command -> its token sequence, for every command of s_t
            (`agents.constrained.action_token_sequences`).
        hindsight: the return-to-go law of the policy on the step's task.
        success: the verdict shown (`credit.base.verdict` of the trajectory).
    Raises:
        ValueError: the step's recorded tokens are not its command's constrained sequence.
    """
    step = trajectory.steps[t]
    state = step.info["mdp_state"]
    commands = list(hindsight.policy[state])
    sequences = tuple(tuple(action_sequences[command]) for command in commands)
    taken = commands.index(step.action)
    if sequences[taken] != tuple(step.action_token_ids):
        raise ValueError(
            f"step {t} of task {trajectory.task_id!r}: its tokens are not the constrained "
            f"sequence of {step.action!r} (exact hindsight needs constrained decoding)"
        )
    past = float(sum(s.reward for s in trajectory.steps[:t]))
    row = hindsight.verdict_row(state, past, success)
    return StepTrie(
        sequences,
        taken,
        tuple(row[c] for c in commands),
        tuple(hindsight.policy[state][c] for c in commands),
    )


def exact_step_logprobs(trie: StepTrie) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-token log-probs of the step's action: log h(y_j | y_<j, s_t, V) and
    log pi(y_j | y_<j, s_t) along its trie path (`trie_conditionals`), [A_t] float64
    each; -inf where a conditional is 0."""
    with np.errstate(divide="ignore"):
        return tuple(
            np.log(trie_conditionals(trie.sequences, q)[trie.taken])
            for q in (trie.hindsight, trie.policy)
        )


# Below this JS divergence (bits) the policy and the exact hindsight at a trie node are
# the same distribution up to float64 rounding: where they are equal, the children's
# p log(p / m) terms cancel to about 1e-17 each, of either sign, while a divergence of
# 1e-12 bits needs the two conditionals to differ by about 1e-6 (JS ~ (p - q)^2 / (8 ln 2)
# for two children), far below anything a policy gradient resolves.
DIVERGENCE_TOL = 1e-12


def trie_divergences(
    sequences: Sequence[Sequence[int]],
    p: Sequence[float],
    q: Sequence[float],
    taken: int,
    tol: float = 0.0,
) -> np.ndarray:
    """JS(p(. | y_<j) || q(. | y_<j)) / ln 2 at each token of sequence `taken`, [len] float64.

    The two per-token distributions are over the children of the trie node y_<j (every
    other token has probability 0 under both, so the full-vocabulary divergence is this
    one): p and q are distributions over the sequences (the policy and the exact
    hindsight), their conditionals those of `trie_conditionals`. A node one of them gives
    no mass (0 / 0) has no conditional there; it contributes 0.

    tol: a divergence below it is exactly 0, never negative (`DIVERGENCE_TOL` is the
    stated one). 0.0 keeps the values as computed, float rounding included (about
    +-1e-17 where q equals p, some negative): the arithmetic of the committed
    `hp_rlvr_exact` runs (results/study_fair), kept as `HPRLVRExact`'s default.
    """
    mass_p, mass_q = _prefix_masses(sequences, p), _prefix_masses(sequences, q)
    path = tuple(sequences[taken])
    divergences = np.zeros(len(path), dtype=np.float64)
    for j in range(len(path)):
        node = path[:j]
        if mass_p[node] <= 0.0 or mass_q[node] <= 0.0:
            continue
        children = sorted({tuple(s[: j + 1]) for s in sequences if tuple(s[:j]) == node})
        a = np.array([mass_p[c] / mass_p[node] for c in children])
        b = np.array([mass_q[c] / mass_q[node] for c in children])
        m = 0.5 * (a + b)
        with np.errstate(divide="ignore", invalid="ignore"):
            kl_a = np.where(a > 0, a * np.log(a / m), 0.0).sum()
            kl_b = np.where(b > 0, b * np.log(b / m), 0.0).sum()
        divergences[j] = 0.5 * (kl_a + kl_b) / np.log(2.0)
    if tol > 0.0:
        divergences[divergences < tol] = 0.0
    return divergences
