"""Scripted agents for `creditgym/CodeExec-v1`, to test the env's multi-step flow.

They read ground truth from `info` (`expert_action`: the canonical solution, or
`submit` once the code passes), which LLM policies must not. They hold no state (the
plan position is the episode's history length), so one instance plays any number of
episodes, in batches too.

- `CanonicalSubmitter`: writes the canonical solution, then submits; wins every task.
- `PromptSubmitter`: submits the prompt unchanged (its stub returns None); fails.
- `WrongThenFix`: writes a wrong body (`return None`), tests it, submits it (rejected),
  then writes the canonical solution and submits: its key step is the fixing write.
"""

from __future__ import annotations

from collections.abc import Sequence

from creditgym.agents.base import AgentAction, AgentInput

WRONG_BODY_ACTION = "write\n```python\n    return None\n```"


def _expert_action(agent_input: AgentInput) -> str:
    action = agent_input.info.get("expert_action")
    if action is None:
        raise ValueError(
            f"{agent_input.env_id} task {agent_input.info.get('task_id')!r} has no canonical "
            "solution (no expert_action in info)"
        )
    return str(action)


def _actions(texts: Sequence[str]) -> list[AgentAction]:
    return [AgentAction(action=text, response_text=text) for text in texts]


class CanonicalSubmitter:
    """Plays the canonical-solution expert: write the canonical body, then submit."""

    name = "code-canonical"

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        return _actions([_expert_action(agent_input) for agent_input in inputs])


class PromptSubmitter:
    """Submits without writing anything: the prompt's stub is the code judged."""

    name = "code-prompt"

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        return _actions(["submit"] * len(inputs))


class WrongThenFix:
    """Wrong body, `test`, `submit` (rejected), then the canonical solution and `submit`.

    Needs `max_submissions >= 2` and `max_steps >= 5`; the plan restarts whenever an
    episode's history is empty.
    """

    name = "code-wrong-then-fix"
    PLAN = (WRONG_BODY_ACTION, "test", "submit")

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        texts = []
        for agent_input in inputs:
            turn = len(agent_input.history)
            texts.append(self.PLAN[turn] if turn < len(self.PLAN) else _expert_action(agent_input))
        return _actions(texts)
