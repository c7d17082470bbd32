"""The hindsight block: what a hindsight view shows the policy about the episode, and where.

HCAPO (Tan et al. 2026, arXiv 2603.08754) injects "s_final" into step t's prompt; HP-RLVR
(Chen et al. 2026, docs/methods.md) shows "the realized future of the trajectory and the
verifier's feedback". Neither paper gives the text, so the block is an option of both
modules, one of `CONTENTS` (each a superset of the one before, except that `future` and
`final` are alternatives):

- `outcome`:      "Outcome: <verdict>."
- `feedback`:     "Outcome: <verdict>. <label>: <the env's final feedback>"
- `final_action`: `feedback` + "\\nFinal action: <the episode's last action>"
                  (HCAPO's block so far, its default)
- `final`:        `feedback` + "\\nFinal observation: <the observation the last action was
                  taken in>" + "\\nFinal action: <last action>" (a trajectory does not keep
                  the observation after the last action; the env's feedback stands for it)
- `future`:       `feedback` + "\\nWhat happened after this action:" and, for the next k
                  steps, "[Result i]: <observation>" / "[Next action i]: <action>"
                  (HP-RLVR's block, its default; the last step shows `feedback` alone)

Observations are cut to `max_observation_chars`. The verdict words and the feedback
label (`WORDINGS`) default to each module's own (`hcapo`: "task completed" / "task
failed", "Feedback"; `hp_rlvr`: "success" / "failure", "Verifier feedback"), so each
module's default text is the one it always showed; either module can take the other's
(the `wording` option), which makes their views of one content identical.

Where the block sits (`agents.prompts.HINDSIGHT_POSITIONS`): `before_instruction`
(default: after the current observation and admissible actions, so the step's prompt
up to there is a shared prefix the generation cache can serve), `after_task` (before the
history and the current observation) or `after_instruction` (the last thing before the
response).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents.trajectory import Trajectory

HindsightContent = Literal["outcome", "feedback", "final_action", "final", "future"]
CONTENTS: tuple[str, ...] = ("outcome", "feedback", "final_action", "final", "future")


@dataclass(frozen=True)
class Wording:
    """A module's words for the verdict line: "Outcome: <success|failure>. <label>: ..."."""

    success: str
    failure: str
    feedback_label: str


HCAPO_WORDING = Wording("task completed", "task failed", "Feedback")
HP_RLVR_WORDING = Wording("success", "failure", "Verifier feedback")
WORDINGS: dict[str, Wording] = {"hcapo": HCAPO_WORDING, "hp_rlvr": HP_RLVR_WORDING}


def hindsight_block(
    content: HindsightContent,
    trajectory: Trajectory,
    t: int,
    wording: Wording,
    future_steps: int = 8,
    max_observation_chars: int = 400,
) -> str:
    """The hindsight text of step t (0-based) of `trajectory` (see module docstring)."""
    if content not in CONTENTS:
        raise ValueError(f"hindsight content must be one of {', '.join(CONTENTS)}, got {content!r}")
    verdict = wording.success if trajectory.success else wording.failure
    if content == "outcome":
        return f"Outcome: {verdict}."
    lines = [f"Outcome: {verdict}. {wording.feedback_label}: {trajectory.feedback}"]
    last = trajectory.steps[-1] if trajectory.steps else None
    if content == "final" and last is not None:
        lines.append(f"Final observation: {last.observation[:max_observation_chars]}")
    if content in ("final", "final_action"):
        lines.append(f"Final action: {last.action if last is not None else ''}")
    if content == "future":
        future = trajectory.steps[t + 1 : t + 1 + future_steps]
        if future:
            lines.append("What happened after this action:")
        for offset, step in enumerate(future, start=1):
            lines.append(f"[Result {offset}]: {step.observation[:max_observation_chars]}")
            lines.append(f"[Next action {offset}]: {step.action}")
    return "\n".join(lines)
