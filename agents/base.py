"""What acts: the agent interface, and the scripted expert and random baselines.

Agents act on a batch of environments at once (`act` takes one `AgentInput` per env),
so the rollout engine drives scripted agents and LLM policies through the same path.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class AgentInput:
    """What an agent sees at one step of one environment.

    Attributes:
        env_id: registered env id (selects the prompt template).
        task: task instruction.
        history: all earlier (observation, action) pairs of the episode, oldest first;
            prompt builders keep the last K.
        observation: the current observation.
        admissible_commands: actions the env offers now (may be empty).
        info: the env's latest `info` (scripted agents read ground truth such as
            `expert_action` from it; LLM policies must not).
        episode_key: stable id of the episode within a rollout (set by
            `agents.rollout.collect`); LLM policies seed per-episode sampling with it so
            results do not depend on which episodes share a batch. Empty: not given.
    """

    env_id: str
    task: str
    history: tuple[tuple[str, str], ...]
    observation: str
    admissible_commands: tuple[str, ...] = ()
    info: Mapping[str, Any] = field(default_factory=dict)
    episode_key: str = ""


@dataclass(frozen=True)
class AgentAction:
    """One decision. Token fields are empty for scripted agents (see `Step`)."""

    action: str
    prompt_text: str = ""
    prompt_token_ids: tuple[int, ...] = ()
    response_text: str = ""
    action_token_ids: tuple[int, ...] = ()
    action_logprobs: tuple[float, ...] = ()


@runtime_checkable
class Agent(Protocol):
    """Maps a batch of inputs to one action each."""

    name: str

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]: ...


class ActionStream(Protocol):
    """Steps in flight: `add` queues one, `advance` does one unit of work (an LLM: one
    decode step) and returns (key, action) of the steps it completed."""

    def __len__(self) -> int: ...

    def add(self, key: Hashable, agent_input: AgentInput) -> None: ...

    def advance(self) -> list[tuple[Hashable, AgentAction]]: ...


@runtime_checkable
class StreamingAgent(Agent, Protocol):
    """An agent that can also take steps one by one while others are in flight
    (continuous batching); `agents.rollout.collect` prefers this path."""

    def stream(self) -> ActionStream: ...


class ExpertAgent:
    """Scripted expert: plays `info["expert_action"]`, the env's own ground-truth plan.

    Every env publishes `expert_action` (the next action of its planner / walkthrough /
    canonical solution), so one expert class serves all envs.
    """

    name = "expert"

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        actions = []
        for agent_input in inputs:
            action = agent_input.info.get("expert_action")
            if action is None:
                raise ValueError(f"{agent_input.env_id} gave no expert_action in info")
            actions.append(AgentAction(action=action, response_text=action))
        return actions


class RandomAgent:
    """Uniform over the admissible commands (a seeded RNG; `look` if none are offered)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        actions = []
        for agent_input in inputs:
            commands = agent_input.admissible_commands or ("look",)
            action = self.rng.choice(commands)
            actions.append(AgentAction(action=action, response_text=action))
        return actions


class NoisyExpertAgent:
    """The expert with probability 1 - `noise`, else uniform over the admissible commands.

    An epsilon-greedy behaviour policy around the env's plan: it reaches the states an
    expert reaches and still tries every command there, so its transcripts pair each
    action with both outcomes (trainers/warm_start.py learns p(action | state, outcome)
    from them), and its mistakes still often end in success (measure/key_steps.py mixes it
    with the expert and the random agent). One uniform draw per step decides, then one
    choice among the commands; a step with no commands offered plays the expert and
    draws nothing.
    """

    def __init__(self, noise: float = 0.5, seed: int = 0) -> None:
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1] (got {noise})")
        self.name = f"noisy-expert-{noise:g}"
        self.noise = noise
        self.expert = ExpertAgent()
        self.rng = random.Random(seed)

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        actions = []
        for agent_input, planned in zip(inputs, self.expert.act(inputs), strict=True):
            commands = agent_input.admissible_commands
            if commands and self.rng.random() < self.noise:
                action = self.rng.choice(commands)
                planned = AgentAction(action=action, response_text=action)
            actions.append(planned)
        return actions
