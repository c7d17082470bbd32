"""The exact ground truth of an LLM policy on a finite MDP: its action table and each task's MDP.

Ground truth is the policy's V, Q, A and exact gradient by dynamic programming
(`credit.policy_evaluation.evaluate_policy`, on the MDP an env describes, `envs.mdp`),
against which `measure.truth_metrics` scores what the credit modules estimate (COCOA,
Meulemans et al. 2023, arXiv 2306.16803, measures estimators the same way). This module
supplies what that evaluation needs from a run: each task's MDP (`TaskMDPs`, on the run's
reward channel, `MDP_CHANNELS`) and the policy's exact table.

The LLM policy's table is computed exactly by `llm_policy_table`: the probability that a
rollout with constrained decoding samples a command is the product of its per-token
probabilities, each renormalised over the admissible continuations at that token (the
trie of `agents.constrained`) at the rollout's temperature and top-p -- the same
`models.logprobs.sampling_logprobs` the sampler calls, applied to the token log-probs the
teacher-forced scoring engine (`models.scoring`) computes for every edge of the trie.

The exact-MDP credit modules (`oracle`, `hca`, `credit.exact_source`) read these sources
through `CreditContext.exact_sources`, which an entry point sets to `exact_sources`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch

from creditgym.agents.base import AgentInput
from creditgym.agents.constrained import action_token_sequences
from creditgym.agents.llm import LLMAgent, encode_prompt
from creditgym.agents.parsing import parse_action
from creditgym.credit.base import CreditContext
from creditgym.credit.policy_evaluation import PolicyTable, TableSource, reachable_states
from creditgym.envs.mdp import FiniteMDP, StateView, Transition
from creditgym.models.logprobs import sampling_logprobs
from creditgym.models.scoring import DEFAULT_MEMORY_BUDGET_BYTES, ScoreMemo, score_alternatives


def uniform_policy(mdp: FiniteMDP, states: Sequence[str]) -> dict[str, dict[str, float]]:
    """pi(a|s) = 1 / |A(s)| at every state in `states`."""
    return {s: {a: 1.0 / len(mdp.actions(s)) for a in mdp.actions(s)} for s in states}


def trie_action_logprobs(
    sequences: Sequence[Sequence[int]],
    token_logprobs: Sequence[np.ndarray],
    temperature: float,
    top_p: float,
) -> np.ndarray:
    """Exact log-probability of each sequence under constrained sampling.

    At every trie node the sampler draws among the node's children from
    `sampling_logprobs(logits, temperature, top_p, allowed=children)`. The raw log-probs
    log_softmax(logits) of the children differ from the logits by one constant per node,
    which the renormalisation over the children removes, so they are all it needs.

    Args:
        sequences: the prefix-free token sequences of the trie (one per command).
        token_logprobs: per sequence, [len] raw log pi(y_j | prompt, y_<j) at temperature 1
            (teacher forced); an edge shared by several sequences is read from the first.
        temperature, top_p: the rollout's sampling settings.
    Returns:
        [len(sequences)] float64 log-probabilities; they sum (in probability) to 1.
    """
    children: dict[tuple[int, ...], dict[int, float]] = {}
    for sequence, logprobs in zip(sequences, token_logprobs, strict=True):
        for j, token in enumerate(sequence):
            children.setdefault(tuple(sequence[:j]), {}).setdefault(int(token), float(logprobs[j]))
    renormalised: dict[tuple[int, ...], dict[int, float]] = {}
    for prefix, edges in children.items():
        tokens = list(edges)
        raw = torch.tensor([edges[token] for token in tokens], dtype=torch.float64)
        sampled = sampling_logprobs(raw, temperature, top_p).double()
        renormalised[prefix] = dict(zip(tokens, sampled.tolist(), strict=True))
    return np.array(
        [
            sum(renormalised[tuple(sequence[:j])][int(token)] for j, token in enumerate(sequence))
            for sequence in sequences
        ],
        dtype=np.float64,
    )


def state_prompt_ids(agent: LLMAgent, env_id: str, mdp: FiniteMDP, state: str) -> tuple[int, ...]:
    """The prompt token ids the rollout shows the agent in `state` (no history)."""
    view = mdp.view(state)
    agent_input = AgentInput(
        env_id=env_id,
        task=view.task,
        history=(),
        observation=view.observation,
        admissible_commands=view.admissible_commands,
    )
    return encode_prompt(agent.loaded.tokenizer, agent.messages(agent_input))[1]


def check_exact_agent(agent: LLMAgent) -> None:
    """ValueError unless the agent's action distribution is a function of the state alone.

    That needs constrained decoding (every response is one admissible command) and a
    prompt without history (`history_len=0`: with history, the distribution depends on
    the path to the state, which the state does not record).
    """
    if not agent.config.constrained:
        raise ValueError("exact action distributions need constrained decoding (constrained=True)")
    if agent.config.history_len != 0:
        raise ValueError(
            f"exact action distributions need a history-free prompt (history_len=0, got "
            f"{agent.config.history_len}): the env's observations are Markov"
        )


def llm_policy_table(
    agent: LLMAgent,
    env_id: str,
    mdp: FiniteMDP,
    states: Sequence[str] | None = None,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    memo: ScoreMemo | None = None,
) -> dict[str, dict[str, float]]:
    """The exact probability that `agent`'s rollout takes each admissible command.

    One teacher-forced view per (state, command) -- the state's prompt followed by the
    command's constrained token sequence `<action>command</action>` + EOS -- scored in
    one batched, chunked call of `models.scoring.score_logprobs`; states whose prompts
    are identical are scored once. Each sequence's probability is then renormalised along
    the trie (`trie_action_logprobs`) and mapped to the action the rollout would pass to
    the env (`agents.parsing.parse_action` of the decoded response, as `LLMStream` does).

    Args:
        agent: the rollout's policy (constrained, history_len=0; `check_exact_agent`).
        env_id: the registered env id the rollout reports (selects the prompt intro).
        mdp: the task's finite MDP.
        states: states to cover (default: every reachable state).
        memory_budget_bytes: scoring chunk budget (`models.scoring`).
        memo: scores kept for these weights (`models.scoring.ScoreMemo`): views scored
            before are read from it; None scores afresh (weights that change).
    Returns:
        state -> command -> pi(command | state).
    Raises:
        ValueError: the agent is not exact (`check_exact_agent`), a command's token
            sequence is longer than `max_new_tokens` (the rollout would cut it), or a
            response would parse to something other than an admissible command.
    """
    check_exact_agent(agent)
    tokenizer = agent.loaded.tokenizer
    states = reachable_states(mdp) if states is None else list(states)
    # (prompt ids, commands) -> the states showing exactly that prompt and commands.
    distinct: dict[tuple[tuple[int, ...], tuple[str, ...]], list[str]] = {}
    for state in states:
        key = (state_prompt_ids(agent, env_id, mdp, state), tuple(mdp.actions(state)))
        distinct.setdefault(key, []).append(state)
    alternatives: list[tuple[tuple[int, ...], list[list[int]]]] = []
    for prompt_ids, commands in distinct:
        sequences = action_token_sequences(tokenizer, commands)
        longest = max(len(sequence) for sequence in sequences)
        if longest > agent.config.max_new_tokens:
            raise ValueError(
                f"a command needs {longest} tokens but max_new_tokens is "
                f"{agent.config.max_new_tokens}: the rollout would cut it"
            )
        alternatives.append((prompt_ids, sequences))
    # The prompts' common opening (intro and task) runs once, each state's prompt once
    # for all its commands (`score_alternatives`: 3x faster than every (state, command)
    # view whole on KeyDoor).
    scores = score_alternatives(agent.loaded, alternatives, memory_budget_bytes, memo=memo)
    table: dict[str, dict[str, float]] = {}
    for (key, members), (_, sequences), sequence_scores in zip(
        distinct.items(), alternatives, scores, strict=True
    ):
        commands = key[1]
        logprobs = trie_action_logprobs(
            sequences,
            sequence_scores,
            agent.config.temperature,
            agent.config.top_p,
        )
        row = dict.fromkeys(commands, 0.0)
        for sequence, logprob in zip(sequences, logprobs, strict=True):
            response = tokenizer.decode(list(sequence), skip_special_tokens=True)
            action = parse_action(response, commands).action
            if action not in row:
                raise ValueError(f"response {response!r} parses to {action!r}, not a command")
            row[action] += math.exp(logprob)
        for state in members:
            table[state] = dict(row)
    return table


@runtime_checkable
class DescribesFiniteMDP(Protocol):
    """An (unwrapped) env that describes the task `reset` drew as a finite MDP (`envs.mdp`)."""

    def finite_mdp(self) -> FiniteMDP: ...


class TaskMDPs:
    """Task id -> the exact MDP of that task of one env, built once per task.

    A task's dynamics are a function of the env's constructor options and the task id
    alone (every env here plays a task with `reset(options={"task_id": ...})`), so each
    MDP is built once, from a fresh env reset to that task, and kept.

    Raises:
        ValueError: the env does not describe itself as a finite MDP (no `finite_mdp()`).
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        env = gym.make(env_id, **self.env_kwargs)
        try:
            describes = isinstance(env.unwrapped, DescribesFiniteMDP)
        finally:
            env.close()
        if not describes:
            raise ValueError(
                f"{env_id} does not describe itself as a finite MDP (no finite_mdp()); exact "
                "credit needs an env that does (KeyDoor, Umbrella)"
            )
        self._mdps: dict[str, FiniteMDP] = {}

    def __call__(self, task_id: str) -> FiniteMDP:
        if task_id not in self._mdps:
            env = gym.make(self.env_id, **self.env_kwargs)
            try:
                env.reset(options={"task_id": task_id})
                self._mdps[task_id] = env.unwrapped.finite_mdp()
            finally:
                env.close()
        return self._mdps[task_id]


def llm_table_source(
    agent: LLMAgent,
    env_id: str,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    memo: ScoreMemo | None = None,
) -> TableSource:
    """`llm_policy_table` of `agent` on whatever MDP it is handed, with the weights of then
    (with `memo`, weights that never change: each view is scored once across calls).

    Raises:
        ValueError: the agent's distribution is not a function of the state
            (`check_exact_agent`).
    """
    check_exact_agent(agent)

    def table(mdp: FiniteMDP) -> PolicyTable:
        return llm_policy_table(
            agent, env_id, mdp, memory_budget_bytes=memory_budget_bytes, memo=memo
        )

    return table


@dataclass(frozen=True)
class OutcomeMDP:
    """`mdp` paid on the `outcome` reward channel (`agents.trajectory.outcome_channel`):
    reward 0 on every transition but those that end the episode, which pay the env's
    verdict (1.0 on success, else 0.0). States, views and probabilities are `mdp`'s.

    Raises (from `transitions`):
        ValueError: an ending transition without the env's verdict (`Transition.success`
            None): the env does not describe what the channel pays.
    """

    mdp: FiniteMDP

    def initial_states(self) -> Sequence[tuple[float, str]]:
        return self.mdp.initial_states()

    def actions(self, state: str) -> tuple[str, ...]:
        return self.mdp.actions(state)

    def view(self, state: str) -> StateView:
        return self.mdp.view(state)

    def transitions(self, state: str, action: str) -> Sequence[Transition]:
        paid = []
        for transition in self.mdp.transitions(state, action):
            if transition.next_state is not None:
                paid.append(replace(transition, reward=0.0))
            elif transition.success is None:
                raise ValueError(
                    f"the MDP does not give the verdict of ending with {action!r} in {state!r}; "
                    "the outcome channel pays it"
                )
            else:
                paid.append(replace(transition, reward=float(transition.success)))
        return tuple(paid)


def return_mdp(mdp: FiniteMDP) -> FiniteMDP:
    """`mdp` as the env pays it: the `return` reward channel."""
    return mdp


# Reward channel (`agents.trajectory.REWARD_CHANNELS`) -> the task's MDP paid on it, so an
# exact-MDP module computes on the signal its trajectories carry.
MDP_CHANNELS: dict[str, Callable[[FiniteMDP], FiniteMDP]] = {
    "return": return_mdp,
    "outcome": OutcomeMDP,
}


def exact_sources(
    context: CreditContext, module: str
) -> tuple[Callable[[str], FiniteMDP], TableSource]:
    """Each task's MDP on the run's reward channel (`MDP_CHANNELS`) and the policy's
    exact table, from what a run offers a module.

    The table is of `context.policy` sampled as `context.sampling` says (an `LLMAgent`
    holding the policy, so every call sees the weights of that moment; through
    `context.score_memo` where the weights never change).

    Raises:
        ValueError: no env, an env that is not a finite MDP, no policy or sampling
            settings, or sampling whose distribution is not a function of the state
            (unconstrained, or a prompt with history); the message names `module`.
    """
    if context.env_id is None:
        raise ValueError(f"credit module {module} needs the run's env (a finite MDP)")
    if context.policy is None or context.sampling is None:
        raise ValueError(f"credit module {module} needs the policy and how the rollout samples it")
    try:
        mdps = TaskMDPs(context.env_id, context.env_kwargs)
        agent = LLMAgent(context.policy, **vars(context.sampling))
        table = llm_table_source(
            agent, context.env_id, context.memory_budget_bytes, context.score_memo
        )
    except ValueError as error:
        raise ValueError(f"credit module {module}: {error}") from None
    on_channel = MDP_CHANNELS[context.reward_channel]
    return (lambda task_id: on_channel(mdps(task_id))), table
