"""Prompt views: the token sequences the scoring engine (`models.scoring`) teacher-forces.

HCAPO (arXiv 2603.08754) and HP-RLVR (Chen et al. 2026) re-score each step's action
tokens under two contexts. A view is one of them, as token ids:

- `causal_view`: the step as the policy saw it. A policy step's causal view is its
  recorded `prompt_token_ids + action_token_ids`, exactly, so the scores reproduce what
  generation computed.
- `hindsight_view`: the step's prompt rebuilt with a hindsight block (the method's own
  text: HCAPO's outcome, `credit.hcapo.outcome_hindsight`; HP-RLVR's realized future and
  verifier feedback, `credit.hp_rlvr.future_hindsight`) through
  `agents.prompts.messages_for_step(..., hindsight=text)`, rendered by the tokenizer's chat
  template with the generation prompt, followed by the same action ids.

`action_span_mask` marks which scored tokens spell the command itself (inside
`<action>...</action>`), as against the thinking and the formatting tags around it: the
"action tokens only" choice of HCAPO's length normalisation and of HP-RLVR's eligible
tokens.

Scripted steps (no tokens; e.g. the expert trajectories of `measure.key_steps`) tokenise
`step.prompt_text` (or, when empty, the rebuilt prompt) and `step.action`. Building views
needs only the tokenizer; no model runs here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from transformers import PreTrainedTokenizerBase

from creditgym.agents.parsing import ACTION_CLOSE, ACTION_OPEN
from creditgym.agents.prompts import messages_for_step
from creditgym.agents.trajectory import Trajectory
from creditgym.models.scoring import TeacherForced


def render_prompt_ids(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]
) -> tuple[int, ...]:
    """Chat-template `messages` with the generation prompt, as token ids [P]."""
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def action_ids_of(tokenizer: PreTrainedTokenizerBase, trajectory: Trajectory, t: int) -> tuple:
    """The exact generated ids of step t, or the tokenised action text for scripted steps."""
    step = trajectory.steps[t]
    if step.action_token_ids:
        return tuple(step.action_token_ids)
    return tuple(tokenizer(step.action, add_special_tokens=False)["input_ids"])


def causal_view(
    tokenizer: PreTrainedTokenizerBase, trajectory: Trajectory, t: int, history_len: int = 2
) -> TeacherForced:
    """Step t as the policy saw it (recorded tokens when present, see module docstring)."""
    step = trajectory.steps[t]
    if step.prompt_token_ids:
        context = tuple(step.prompt_token_ids)
    elif step.prompt_text:
        context = tuple(tokenizer(step.prompt_text, add_special_tokens=False)["input_ids"])
    else:
        context = render_prompt_ids(tokenizer, messages_for_step(trajectory, t, history_len))
    return TeacherForced(context, action_ids_of(tokenizer, trajectory, t))


def hindsight_view(
    tokenizer: PreTrainedTokenizerBase,
    trajectory: Trajectory,
    t: int,
    hindsight: str,
    history_len: int = 2,
    position: str = "before_instruction",
) -> TeacherForced:
    """Step t's prompt rebuilt with a hindsight block at `position`
    (`agents.prompts.HINDSIGHT_POSITIONS`), followed by the same action ids."""
    messages = messages_for_step(trajectory, t, history_len, hindsight, position)
    return TeacherForced(
        render_prompt_ids(tokenizer, messages), action_ids_of(tokenizer, trajectory, t)
    )


def action_span_mask(
    tokenizer: PreTrainedTokenizerBase, trajectory: Trajectory, t: int
) -> np.ndarray:
    """Which of step t's scored tokens (`action_ids_of`) spell the command, [A] bool.

    The command is the text inside the response's last `<action>...</action>` (after the
    last `<action>` when the closing tag never came). A token belongs to it when its
    characters (from decoding the ids one more token at a time) overlap that text.
    Responses without an `<action>` tag -- scripted steps, whose scored ids are the
    command alone -- are all command.
    """
    ids = action_ids_of(tokenizer, trajectory, t)
    text = tokenizer.decode(list(ids))
    open_at = text.lower().rfind(ACTION_OPEN)
    if open_at < 0:
        return np.ones(len(ids), dtype=bool)
    start = open_at + len(ACTION_OPEN)
    close_at = text.lower().find(ACTION_CLOSE, start)
    end = len(text) if close_at < 0 else close_at
    ends = [len(tokenizer.decode(list(ids[: j + 1]))) for j in range(len(ids))]
    starts = [0, *ends[:-1]]
    return np.array([s < end and e > start for s, e in zip(starts, ends, strict=True)])
