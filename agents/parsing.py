"""Turn a policy's response text into the action passed to the environment.

Responses follow the verl-agent / GiGPO prompt format, `<think>...</think>` then
`<action>...</action>`, but small or untrained models break it in every way: no closing
tag, several action blocks, prose around the command, no tags at all. Parsing is
tolerant (it never raises) and says whether the format was respected, so the rollout
can count invalid actions instead of crashing; what comes out is passed to the env as
is, and the env decides what an invalid command does (verl-agent does the same).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from creditgym.agents.trajectory import Step

ACTION_OPEN = "<action>"
ACTION_CLOSE = "</action>"
_ACTION_BLOCK = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_ACTION_OPEN = re.compile(r"<action>", re.IGNORECASE)
_THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
# Longest action passed on: a runaway response should not become a 2 kB shell command.
MAX_ACTION_CHARS = 512


@dataclass(frozen=True)
class ParsedAction:
    """Result of parsing one response.

    Attributes:
        action: the command for the env (possibly empty or nonsense; never None).
        well_formed: a complete `<action>...</action>` block held a non-empty command.
    """

    action: str
    well_formed: bool


def _clean(text: str) -> str:
    text = text.strip().strip("`").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].strip()  # models often echo the quoted admissible list
    return " ".join(text.split())[:MAX_ACTION_CHARS]


def parse_action(response: str, admissible_commands: Sequence[str] = ()) -> ParsedAction:
    """Extract the action from a response.

    Rules, in order: the last complete `<action>...</action>` block; else the text after
    the last `<action>` (generation cut by the token limit); else, with think blocks
    removed, the last non-empty line. The result is whitespace-normalised; when it
    matches an admissible command up to case and spacing, the admissible spelling is
    returned (the env compares strings exactly); otherwise, when admissible commands
    occur inside it (prose around the command), the one ending last is returned.
    """
    blocks = _ACTION_BLOCK.findall(response)
    if blocks:
        action, complete = _clean(blocks[-1]), True
    else:
        opens = list(_ACTION_OPEN.finditer(response))
        if opens:
            action = _clean(response[opens[-1].end() :])
        else:
            lines = [line for line in _THINK_BLOCK.sub("", response).splitlines() if line.strip()]
            action = _clean(lines[-1]) if lines else ""
        complete = False
    return ParsedAction(
        action=_match_admissible(action, admissible_commands),
        well_formed=complete and bool(action),
    )


def _match_admissible(action: str, admissible_commands: Sequence[str]) -> str:
    canonical = {" ".join(c.lower().split()): c for c in admissible_commands}
    lowered = action.lower()
    if lowered in canonical or not canonical:
        return canonical.get(lowered, action)
    # (end of the last occurrence, length): the latest-mentioned, longest command wins.
    found = [
        (lowered.rfind(key) + len(key), len(key), command)
        for key, command in canonical.items()
        if key and key in lowered
    ]
    return max(found)[2] if found else action


def is_valid_action(step: Step) -> bool:
    """Whether a recorded step's action counts as valid for the valid-action ratio.

    With admissible commands: the action is one of them. Without (free-form envs): an
    LLM step is valid when its response had a well-formed action block; a scripted step
    (no generated tokens) is valid by construction.
    """
    if step.admissible_commands:
        return step.action in step.admissible_commands
    if step.action_token_ids:
        return parse_action(step.response_text).well_formed
    return True
