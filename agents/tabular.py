"""A tabular policy: samples each action from a table pi(a|s) over an env's true MDP states.

Envs that describe themselves as finite MDPs (`envs.mdp`) report the true state in
`info`: `reset` gives `mdp_state` = s_0, every step gives `mdp_next_state` = s_{t+1}. A
table agent reads that state and draws from its row, so a policy whose ground truth is
known exactly (uniform, or an LLM's exact table from `measure.ground_truth`) can be
rolled out through the ordinary rollout path at env speed, with no model.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from creditgym.agents.base import AgentAction, AgentInput


def current_mdp_state(info: Mapping[str, Any]) -> str:
    """The true state an agent is about to act in, from the env's latest `info`.

    Raises:
        KeyError: the env reports no MDP state (it does not implement `envs.mdp`).
    """
    if "mdp_next_state" in info:
        return info["mdp_next_state"]
    return info["mdp_state"]


class TableAgent:
    """Samples a_t ~ pi(. | s_t) from a table per task (state id -> action -> probability).

    Args:
        tables: task id (`info["task_id"]`) -> pi(a|s) for every state its episodes
            can reach (state ids are only unique within a task).
        seed: seed of the agent's RNG.
    """

    name = "table"

    def __init__(
        self, tables: Mapping[str, Mapping[str, Mapping[str, float]]], seed: int = 0
    ) -> None:
        self.tables = tables
        self.rng = random.Random(seed)

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        actions = []
        for agent_input in inputs:
            table = self.tables[agent_input.info["task_id"]]
            row = table[current_mdp_state(agent_input.info)]
            action = self.rng.choices(list(row), weights=list(row.values()))[0]
            actions.append(AgentAction(action=action, response_text=action))
        return actions
