"""The final feedback of KeyDoor, Umbrella and SysDiag states the verdict, never which step
mattered.

The hindsight credit modules show the env's final feedback to the policy (credit/
hindsight.py). Feedback that names the causal step ("it needed the key from the room",
"that first choice alone decides", SysDiag's root cause) hands them the env's label,
so their credit would measure the hint, not the method. Each env plays scripted
successes and failures (its expert, fixed command lists, a reboot, a timeout); the
feedback must state the verdict and contain none of the old sentences' key words. With
`causal_feedback=True` the old text comes back, word for word.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

from creditgym.envs.keydoor.dynamics import EAT, KEY, OPEN, WAIT
from creditgym.envs.keydoor.env import KeyDoorEnv
from creditgym.envs.sysdiag.env import SysDiagEnv
from creditgym.envs.sysdiag.faults import FAULT_FAMILIES
from creditgym.envs.umbrella.dynamics import LEAVE, TAKE, WALK_COMMANDS
from creditgym.envs.umbrella.env import UmbrellaEnv

# The old sentences' key words, and what else would name the step or the cause.
COMMON_LEAKS = ("first choice", "alone decides", "root cause", "instead", "because")
KEYDOOR_LEAKS = ("needed the key", "took the", "from the room", "the key", "holding", "carried")
UMBRELLA_LEAKS = ("forecast", "took the umbrella", "left the umbrella", "choice", "right:")
# The distinctive wording of each SysDiag fault's `root_cause` (envs/sysdiag/faults.py);
# the test also checks the episode's own root-cause sentence and culprit.
SYSDIAG_LEAKS = (
    "was pinning",
    "had leaked",
    "had filled",
    "stale pid file",
    "held port",
    "dead name server",
    "not readable",
    "exhausted the inodes",
    "had expired",
    "kept forking",
    "zombies",
    "diagnosed",
    "partial credit",
)
SOLVED, NOT_SOLVED = "solved", "not solved"


@dataclass(frozen=True)
class Episode:
    """The final feedback of one scripted episode, what it must state, what it must not."""

    name: str
    feedback: str
    success: bool
    leaks: tuple[str, ...]
    cause: str = ""  # SysDiag: the episode's root-cause sentence


def play(env, actions: Sequence[str] | Callable[[dict], str], seed: int, options=None) -> dict:
    """Reset, then act until the episode ends: `actions` in order, or a function of the
    last info (a scripted expert); the final step's info."""
    _observation, info = env.reset(seed=seed, options=options)
    for t in range(10_000):
        action = actions(info) if callable(actions) else actions[t]
        *_, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return info
    raise AssertionError("the episode did not end")


def expert(info: dict) -> str:
    return info["expert_action"]


def keydoor_episodes(causal: bool) -> list[Episode]:
    episodes = []
    for seed in range(3):
        env = KeyDoorEnv(delay=2, causal_feedback=causal)
        _observation, info = env.reset(seed=seed)
        thing = next(c for c in info["admissible_commands"] if c != f"take the {KEY}")
        scripts = {
            "expert": expert,
            "distractor": [thing, EAT, WAIT, OPEN],
            "key-timeout": [f"take the {KEY}", EAT, EAT, WAIT, WAIT, WAIT],
            "distractor-timeout": [thing, WAIT, WAIT, WAIT, WAIT, WAIT],
            "nothing": ["take the door", EAT, EAT, OPEN],
        }
        for name, script in scripts.items():
            info = play(env, script, seed)
            leaks = (*KEYDOOR_LEAKS, thing.removeprefix("take "))
            episodes.append(
                Episode(f"keydoor-{name}-{seed}", info["feedback"], info["success"], leaks)
            )
    return episodes


def umbrella_episodes(causal: bool) -> list[Episode]:
    episodes = []
    for seed in range(6):  # both forecasts among them
        for first in (TAKE, LEAVE):
            env = UmbrellaEnv(length=3, causal_feedback=causal)
            info = play(env, [first, *WALK_COMMANDS], seed)
            name = f"umbrella-{first.split()[0]}-{seed}"
            episodes.append(Episode(name, info["feedback"], info["success"], UMBRELLA_LEAKS))
        env = UmbrellaEnv(length=5, max_steps=2, causal_feedback=causal)
        info = play(env, [TAKE, WALK_COMMANDS[0]], seed)
        episodes.append(
            Episode(f"umbrella-timeout-{seed}", info["feedback"], False, UMBRELLA_LEAKS)
        )
    return episodes


def sysdiag_episodes(causal: bool) -> list[Episode]:
    episodes = []
    for family in sorted(FAULT_FAMILIES):
        options = {"task_id": f"{family}-2"}
        scripts = {"expert": expert, "reboot": ["uptime", "reboot"], "timeout": ["uptime"] * 4}
        for name, script in scripts.items():
            env = SysDiagEnv(max_steps=4 if name == "timeout" else 30, causal_feedback=causal)
            info = play(env, script, seed=0, options=options)
            cause = env.fault.root_cause
            # The culprit it names: pids, paths, addresses, sizes (tokens with a digit or
            # a slash; short ones could be any number, such as the step limit).
            culprits = [token.strip("(),") for token in cause.split()]
            culprits = [c for c in culprits if len(c) >= 3 and any(x in c for x in "/0123456789")]
            leaks = (*SYSDIAG_LEAKS, cause, *culprits)
            success = info["success"]
            episodes.append(Episode(f"{family}-{name}", info["feedback"], success, leaks, cause))
    return episodes


PLAYERS = {"keydoor": keydoor_episodes, "umbrella": umbrella_episodes, "sysdiag": sysdiag_episodes}


@pytest.mark.parametrize("env_name", sorted(PLAYERS))
def test_final_feedback_states_the_verdict_and_no_causal_label(env_name: str) -> None:
    episodes = PLAYERS[env_name](causal=False)
    assert {e.success for e in episodes} == {True, False}, "play both outcomes"
    for episode in episodes:
        text = episode.feedback.lower()
        assert text, episode.name
        found = [p for p in (*COMMON_LEAKS, *episode.leaks) if p.lower() in text]
        assert not found, f"{episode.name}: {episode.feedback!r} leaks {found}"
        # The verdict is stated, and the right one.
        assert (NOT_SOLVED in text) == (not episode.success), (
            f"{episode.name}: {episode.feedback!r}"
        )
        assert SOLVED in text, f"{episode.name}: {episode.feedback!r}"


# The old feedback of each env, one sentence per ending, with the
# words that named the cause.
OLD_TEXT = {
    "keydoor": ("needed the key from the room, and you took the", "holding the key from the room"),
    "umbrella": ("that first choice alone decides the final reward",),
    "sysdiag": ("The root cause:", "the root cause was never diagnosed", "the fault persisted:"),
}


@pytest.mark.parametrize("env_name", sorted(PLAYERS))
def test_causal_feedback_option_brings_the_old_text_back(env_name: str) -> None:
    episodes = PLAYERS[env_name](causal=True)
    for phrase in OLD_TEXT[env_name]:
        assert any(phrase in e.feedback for e in episodes), phrase
    # SysDiag: every ending named the episode's root cause.
    assert all(e.cause in e.feedback for e in episodes)


def test_causal_feedback_is_the_old_text_word_for_word() -> None:
    env = KeyDoorEnv(delay=1, causal_feedback=True)
    _observation, info = env.reset(seed=4)
    thing = next(c for c in info["admissible_commands"] if c != f"take the {KEY}")
    info = play(env, [thing, WAIT, OPEN], seed=4)
    assert info["feedback"] == (
        "The door was locked: it needed the key from the room, and you took "
        f"{thing.removeprefix('take ')} instead."
    )
    env = UmbrellaEnv(length=2, causal_feedback=True)
    _observation, info = env.reset(seed=0)
    forecast = info["forecast"]
    info = play(env, [TAKE, WALK_COMMANDS[0]], seed=0)
    verdict = "right: +1" if forecast == "rain" else "wrong: -1"
    assert info["feedback"] == (
        f"The forecast at home said {forecast} and you took the umbrella; that first "
        f"choice alone decides the final reward, and it was {verdict}."
    )
    env = SysDiagEnv(causal_feedback=True)
    info = play(env, expert, seed=0, options={"task_id": "cpu_hog-3"})
    assert info["feedback"] == f"Fixed and verified. The root cause: {env.fault.root_cause}."
