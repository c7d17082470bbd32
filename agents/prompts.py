"""Prompt templates, in the style of verl-agent / GiGPO / HCAPO, per environment.

A step's prompt holds the task, the last K (observation, action) pairs (K = 2 by
default, as in GiGPO's ALFWorld setup), the current observation, the admissible
actions when the env has them, and the instruction to think inside <think></think> and
answer inside <action></action>. The prompt is a pure function of the trajectory
prefix, so credit modules can rebuild any step's prompt, with an optional hindsight
block (HCAPO's outcome, HP-RLVR's realized future and verifier feedback) placed before
the instruction by default -- i.e. before the action tokens that get scored -- or at one
of the other `HINDSIGHT_POSITIONS` (credit/hindsight.py). The intro line is the env's own
(`EnvInfo.intro`, declared with its registration in envs/__init__.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from creditgym import envs
from creditgym.agents.trajectory import Trajectory
from creditgym.envs.registry import GENERIC_INTRO

INSTRUCTION = (
    "Now it's your turn to take an action. First reason step by step inside "
    "<think> </think> tags, then give exactly one action inside <action> </action> tags."
)
# Long admissible lists (ALFWorld kitchens list ~40) stay; beyond this they are cut.
MAX_LISTED_COMMANDS = 60
# Where a hindsight block may sit: after the task line (before history and observation),
# just before the instruction (default: the step's prompt up to there is a prefix the
# hindsight view shares with the step), or after the instruction.
HINDSIGHT_POSITIONS = ("after_task", "before_instruction", "after_instruction")


def intro(env_id: str) -> str:
    """The first line of `env_id`'s prompts: its `EnvInfo.intro`, or the generic intro for
    an id that is not registered here (a `module:Id` plug-in env registered elsewhere)."""
    info = envs.ENVS.get(env_id)
    return info.intro if info is not None else GENERIC_INTRO


def build_messages(
    env_id: str,
    task: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    admissible_commands: Sequence[str] = (),
    hindsight: str | None = None,
    hindsight_position: str = "before_instruction",
) -> list[dict[str, str]]:
    """Chat messages for one step.

    Args:
        env_id: registered env id, selects the intro text.
        task: task instruction.
        history: the last K (observation, action) pairs, oldest first.
        observation: the current observation.
        admissible_commands: actions the env offers now (may be empty).
        hindsight: optional privileged block (outcome / future) for hindsight scoring.
        hindsight_position: where the block goes, one of `HINDSIGHT_POSITIONS`.
    """
    if hindsight_position not in HINDSIGHT_POSITIONS:
        raise ValueError(
            f"hindsight_position must be one of {', '.join(HINDSIGHT_POSITIONS)}, "
            f"got {hindsight_position!r}"
        )
    block = f"Hindsight (privileged information about this episode):\n{hindsight}"
    parts = [intro(env_id), f"Your task is: {task}"]
    if hindsight and hindsight_position == "after_task":
        parts.append(block)
    if history:
        lines = [f"Your last {len(history)} observations and actions:"]
        for offset, (past_observation, past_action) in enumerate(history, start=1):
            lines.append(f"[Observation {offset}]: {past_observation}")
            lines.append(f"[Action {offset}]: {past_action}")
        parts.append("\n".join(lines))
    parts.append(f"Current observation: {observation}")
    if admissible_commands:
        listed = list(admissible_commands[:MAX_LISTED_COMMANDS])
        parts.append("Admissible actions: [" + ", ".join(repr(c) for c in listed) + "]")
    if hindsight and hindsight_position == "before_instruction":
        parts.append(block)
    parts.append(INSTRUCTION)
    if hindsight and hindsight_position == "after_instruction":
        parts.append(block)
    return [{"role": "user", "content": "\n\n".join(parts)}]


def messages_for_step(
    trajectory: Trajectory,
    step_index: int,
    history_len: int = 2,
    hindsight: str | None = None,
    hindsight_position: str = "before_instruction",
) -> list[dict[str, str]]:
    """Rebuild the messages of step `step_index` from the trajectory itself."""
    steps = trajectory.steps
    start = max(0, step_index - history_len)
    history = [(steps[k].observation, steps[k].action) for k in range(start, step_index)]
    step = steps[step_index]
    return build_messages(
        trajectory.env_id,
        trajectory.task,
        history,
        step.observation,
        step.admissible_commands,
        hindsight,
        hindsight_position,
    )
