"""The one episode loop: what an agent sees, how a step is recorded, which group it joins.

`EpisodeRecorder` holds one episode in flight: from the reset's observation and info it
builds each step's `AgentInput`, records every (decision, env reply) as a `Step`, and
ends as a `Trajectory`. Both engines drive it: `play_episode` here, sequentially with an
env in this process (what env tests use), and `agents.rollout.collect`, many episodes at
once in worker processes (`agents.workers`). So both record the same steps, give agents
the same inputs (only JSON-serialisable info, what a worker can send back) and put a
trajectory in the same group (`group_id`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from creditgym.agents.base import Agent, AgentAction, AgentInput
from creditgym.agents.trajectory import Step, Trajectory


def group_id(env_id: str, task_id: str, seed: int) -> str:
    """The group of a trajectory: rollouts of one task share it (GRPO / GiGPO / HCAPO).

    A task is a reset seed in an env; the env's `task_id` is part of it because reset
    options can pick a different task for the same seed (ALFWorld's `task_id` option).
    """
    return f"{env_id}/{task_id}/seed{seed}"


def env_name(env: gym.Env) -> str:
    """The registered id of `env`, or its class name for an env made without one."""
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__


def jsonable(info: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-serialisable entries of `info`, tuples as lists (envs may carry internal
    objects, which neither a trajectory file nor a worker's pipe should carry)."""
    kept = {}
    for key, value in info.items():
        if isinstance(value, (str, int, float, bool, type(None), list, tuple, dict)):
            kept[key] = list(value) if isinstance(value, tuple) else value
    return kept


@dataclass
class EpisodeRecorder:
    """One episode in flight, from the reset's reply to its `Trajectory`.

    Args:
        env_id: the env's id (`env_name`).
        seed: the reset seed.
        observation: the reset's observation.
        info: the reset's info (kept JSON-serialisable only).
        key: stable id of the episode within a rollout (`AgentInput.episode_key`; LLM
            policies seed their per-episode sampling with it); empty for `play_episode`.
    """

    env_id: str
    seed: int
    observation: str
    info: dict[str, Any]
    key: str = ""
    task: str = field(init=False)
    initial_observation: str = field(init=False)
    history: list[tuple[str, str]] = field(init=False, default_factory=list)
    steps: list[Step] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.info = jsonable(self.info)
        self.task = str(self.info.get("task", ""))
        self.initial_observation = self.observation

    @property
    def done(self) -> bool:
        """The last recorded step ended the episode (terminated or truncated)."""
        return bool(self.steps) and (self.steps[-1].terminated or self.steps[-1].truncated)

    def agent_input(self) -> AgentInput:
        """What the agent sees now: the current observation, the history, the env's info."""
        return AgentInput(
            env_id=self.env_id,
            task=self.task,
            history=tuple(self.history),
            observation=self.observation,
            admissible_commands=tuple(self.info.get("admissible_commands", ())),
            info=self.info,
            episode_key=self.key,
        )

    def record(
        self,
        decision: AgentAction,
        observation: str,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: Mapping[str, Any],
    ) -> None:
        """Record the step `decision` took (the env's reply to it) and move to its result."""
        info = jsonable(info)
        self.steps.append(
            Step(
                observation=self.observation,
                action=decision.action,
                admissible_commands=tuple(self.info.get("admissible_commands", ())),
                prompt_text=decision.prompt_text,
                prompt_token_ids=decision.prompt_token_ids,
                response_text=decision.response_text,
                action_token_ids=decision.action_token_ids,
                action_logprobs=decision.action_logprobs,
                reward=float(reward),
                terminated=bool(terminated),
                truncated=bool(truncated),
                info=info,
            )
        )
        self.history.append((self.observation, decision.action))
        self.observation, self.info = observation, info

    def trajectory(self, agent_name: str, group: str | None = None) -> Trajectory:
        """The finished episode; `group` overrides the `group_id` rule (a caller that
        groups episodes of several tasks or agents itself)."""
        task_id = str(self.info.get("task_id", ""))
        return Trajectory(
            env_id=self.env_id,
            task_id=task_id,
            seed=self.seed,
            group_id=group if group is not None else group_id(self.env_id, task_id, self.seed),
            task=self.task,
            initial_observation=self.initial_observation,
            steps=tuple(self.steps),
            success=bool(self.info.get("success", False)),
            feedback=str(self.info.get("feedback", "")),
            metadata={"agent": agent_name},
        )


def play_episode(
    env: gym.Env,
    agent: Agent,
    seed: int,
    group_id: str | None = None,
    options: dict[str, Any] | None = None,
) -> Trajectory:
    """Reset `env` with `seed` (and `options`), let `agent` act until the episode ends.

    `group_id` overrides the rule of `agents.episode.group_id` (callers that put several
    agents' episodes of one task into one group name it themselves).
    """
    observation, info = env.reset(seed=seed, options=options)
    episode = EpisodeRecorder(env_name(env), seed, observation, info)
    while not episode.done:
        decision = agent.act([episode.agent_input()])[0]
        episode.record(decision, *env.step(decision.action))
    return episode.trajectory(agent.name, group_id)
