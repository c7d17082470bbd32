"""SysDiag without the `reboot` command, registered on import for the learning test.

`reboot` clears a memory leak for now (+0.3, not a success) and is a trap: single-rollout
HP-RLVR can collapse onto it (its hindsight and causal views then agree, the JSD weight
vanishes and it cannot leave), so whether the test passed depended on float rounding.
Without the command, constrained decoding cannot
emit it and the test measures what it is for: that training raises the success rate.
The trap itself is measured in the reference results (`results/leaderboard.md`).

`gym.make("tests.learning_envs:creditgym-test/SysDiagNoReboot-v0")` imports this module
in the rollout workers too (gymnasium's `module:Id` convention).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from creditgym import envs  # noqa: F401  (registers creditgym/SysDiag-v0)

ENV_ID = "creditgym-test/SysDiagNoReboot-v0"
REMOVED = "reboot"


class WithoutCommand(gym.Wrapper):
    """Drops one command from `info["admissible_commands"]` (typing it still works)."""

    def _strip(self, info: dict[str, Any]) -> dict[str, Any]:
        commands = [c for c in info.get("admissible_commands", ()) if c != REMOVED]
        return {**info, "admissible_commands": commands}

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, self._strip(info)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, self._strip(info)


def make(**kwargs: Any) -> gym.Env:
    return WithoutCommand(gym.make("creditgym/SysDiag-v0", **kwargs))


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make)
