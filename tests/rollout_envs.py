"""Small text environments for the rollout tests, registered on import.

`gym.make("tests.rollout_envs:Corridor-v0")` imports this module in the worker process
(gymnasium's `module:Id` convention), so the workers see the same registrations.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium import register

from creditgym.agents.base import AgentAction, AgentInput
from creditgym.envs.spaces import text_space

MOVES = ("go left", "go right", "wait")


class CorridorEnv(gym.Env):
    """Walk right from cell 0 to cell `length`; seeded start offset and noise text.

    `fault` ("raise", "hang", "exit") happens at step 2 of episodes reset with
    `fault_seed`, to test that the rollout engine survives broken environments.

    Admissible commands, an expert, a step limit (truncation), a per-step penalty and
    a success reward: every field of the trajectory contract gets exercised.
    """

    metadata: ClassVar[dict[str, list[str]]] = {"render_modes": []}

    def __init__(
        self, length: int = 3, max_steps: int = 6, fault: str = "", fault_seed: int = -1
    ) -> None:
        if fault not in ("", "raise", "hang", "exit"):
            raise ValueError(f"unknown fault {fault!r}")
        self.length, self.max_steps = length, max_steps
        self.fault, self.fault_seed = fault, fault_seed
        self.observation_space = text_space(256)
        self.action_space = text_space(64)

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {
            "task": f"reach cell {self.length}",
            "task_id": f"corridor-{self.start}",
            "admissible_commands": list(MOVES),
            "expert_action": "go right",
            **extra,
        }

    def _observation(self) -> str:
        return f"You are in cell {self.position} of {self.length}. Noise {self.noise}."

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.seed = seed
        self.start = int(self.np_random.integers(0, 2))
        self.position, self.steps = self.start, 0
        self.noise = int(self.np_random.integers(0, 1000))
        return self._observation(), self._info()

    def step(self, action: str):
        self.steps += 1
        if self.seed == self.fault_seed and self.steps == 2:
            if self.fault == "raise":
                raise RuntimeError("simulated env crash")
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "exit":
                os._exit(3)  # a hard crash: the worker process dies without a reply
        moved = {"go left": -1, "go right": 1}.get(action, 0)
        self.position = max(0, self.position + moved)
        success = self.position >= self.length
        truncated = not success and self.steps >= self.max_steps
        reward = 1.0 if success else -0.01
        extra: dict[str, Any] = {"success": success, "key_step": moved == 1}
        if success or truncated:
            extra["feedback"] = "reached the end" if success else "out of steps"
        return self._observation(), reward, success, truncated, self._info(**extra)


register(id="Corridor-v0", entry_point="tests.rollout_envs:CorridorEnv")


class KeyedRandomAgent:
    """Uniform over the admissible commands, drawn from (episode, step) alone, so that
    the actions do not depend on which episodes share a round or finish first."""

    name = "keyed-random"

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        actions = []
        for agent_input in inputs:
            rng = random.Random(f"{agent_input.episode_key}/{len(agent_input.history)}")
            action = rng.choice(agent_input.admissible_commands)
            actions.append(AgentAction(action=action, response_text=action))
        return actions
