"""Play one episode of one agent in one Gymnasium env, sequentially, into a `Trajectory`.

The batched, multi-process engine lives in `agents.rollout`; this is the reference
loop it must agree with, and what env tests use.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agents.base import Agent, AgentInput
from agents.trajectory import Step, Trajectory


def play_episode(
    env: gym.Env,
    agent: Agent,
    seed: int,
    group_id: str | None = None,
    options: dict[str, Any] | None = None,
) -> Trajectory:
    """Reset `env` with `seed` (and `options`), let `agent` act until the episode ends."""
    observation, info = env.reset(seed=seed, options=options)
    env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    task = str(info.get("task", ""))
    initial_observation = observation
    steps: list[Step] = []
    history: list[tuple[str, str]] = []
    while True:
        admissible = tuple(info.get("admissible_commands", ()))
        agent_input = AgentInput(env_id, task, tuple(history), observation, admissible, info)
        decision = agent.act([agent_input])[0]
        next_observation, reward, terminated, truncated, info = env.step(decision.action)
        steps.append(
            Step(
                observation=observation,
                action=decision.action,
                admissible_commands=admissible,
                prompt_text=decision.prompt_text,
                prompt_token_ids=decision.prompt_token_ids,
                response_text=decision.response_text,
                action_token_ids=decision.action_token_ids,
                action_logprobs=decision.action_logprobs,
                reward=float(reward),
                terminated=bool(terminated),
                truncated=bool(truncated),
                info=_jsonable(info),
            )
        )
        history.append((observation, decision.action))
        observation = next_observation
        if terminated or truncated:
            break
    return Trajectory(
        env_id=env_id,
        task_id=str(info.get("task_id", "")),
        seed=seed,
        group_id=group_id if group_id is not None else f"{env_id}/{info.get('task_id', seed)}",
        task=task,
        initial_observation=initial_observation,
        steps=tuple(steps),
        success=bool(info.get("success", False)),
        feedback=str(info.get("feedback", "")),
        metadata={"agent": agent.name},
    )


def _jsonable(info: dict[str, Any]) -> dict[str, Any]:
    """Keep only JSON-serialisable info entries (envs may carry internal objects)."""
    kept = {}
    for key, value in info.items():
        if isinstance(value, (str, int, float, bool, type(None), list, tuple, dict)):
            kept[key] = list(value) if isinstance(value, tuple) else value
    return kept
