"""`creditgym/KeyDoor-v0`: take the key, live through an orchard of random apples, open the door.

A text key-to-door (Hung et al. 2019, Nature Communications, arXiv 1810.06721; the low-
and high-variance apples of Mesnard et al. 2021, ICML, arXiv 2011.09464). Three phases:

1. Room (one step): the table holds the key and `num_objects` distractors; the agent
   takes one thing and keeps it. Taking the key is the only action that changes the
   final reward. With `num_keys` K > 1, K rooms in a row, each with its own key: the
   door needs all K, so K choices must each be right. With `disguised_keys`, each room's
   key looks like one more everyday thing (a different one per room).
2. Orchard (`delay` steps): "eat the apple" pays a random reward (see `APPLE_REWARDS`,
   drawn per apple, independent of phase 1) or "wait" pays 0 -- the distractor.
3. Door: "open the door" ends the episode, paying `DOOR_REWARD` only when holding the
   key; "wait" stays at the door. At `max_steps` the episode is truncated.

A command that is not admissible is answered, never raised on: it acts as the phase's
no-op (leave the room carrying nothing; wait). Observations are Markov: each shows the
phase, the turns left and what the agent carries, so a prompt without history suffices.

`info` (see `envs/__init__.py`): `success`, `task_id` ("keydoor-<n>"), `task`,
`admissible_commands` (empty once the episode ended), `key_step` (this step took the
key, or opened the door holding it), `feedback` (at the end: the verdict, never which
step mattered, unless `causal_feedback`; with `verdict_feedback=False` not the verdict
either, only what the agent saw happen), `expert_action` (the optimal command; absent
once the episode ended), `steps`, `phase`, and the true states `mdp_state` /
`mdp_next_state` of `finite_mdp()` (see `envs.mdp`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from creditgym.envs.keydoor.dynamics import (
    APPLE_REWARDS,
    EAT,
    INSTANCES,
    KEY,
    NOTHING,
    TASK_TEXT,
    KeyDoorMDP,
    KeyDoorState,
    KeyDoorTask,
    advance,
    build_task,
    commands,
    expert_command,
    final_observation,
    observation,
    phase,
    resolve,
    state_id,
)
from creditgym.envs.keydoor.options import KeyDoorOptions
from creditgym.envs.mdp import Outcome, parse_task_index
from creditgym.envs.seeding import replica_generator
from creditgym.envs.spaces import text_space

# Turns at the door beyond the one the expert needs: the default step limit leaves an
# agent that dawdles there two more chances to open it.
DOOR_SLACK = 2
OBSERVATION_MAX_CHARS = 1024
ACTION_MAX_CHARS = 1024


class KeyDoorEnv(gym.Env[str, str]):
    """Text key-to-door with a random-reward orchard between the key and the door.

    Args (each but `max_steps` and `render_mode` a field of `KeyDoorOptions`, which checks
    them):
        delay: orchard steps between taking a thing and reaching the door (>= 0).
        variance: apple rewards, "low" (every apple pays 1) or "high" (1 or 10, each
            with probability 1/2); see `APPLE_REWARDS`.
        num_objects: distractor things on the table beside the key (1 to 12).
        num_keys: rooms before the orchard, each with a key on its table among
            `num_objects` distractors; the door opens only for an agent carrying all of
            them (1 to `MAX_KEYS`, envs/keydoor/options.py). 1, the default, is the env of
            every committed run (the same tasks, text and dynamics); more keys take the
            outcome channel off its ceiling: a verdict then says that some choice was
            wrong, not which.
        disguised_keys: each room's key is an everyday thing (`dynamics.DISGUISES`: room
            r's is the same in every task), shown like the distractors and never named a
            key. With the key always named "key", taking it is one skill every room
            shares, and GRPO learnt it to 100 % on the outcome channel even with three
            rooms of six distractors (results/calibration_levels); disguised, each room's
            choice is its own decision, learnt from an outcome that says only whether all
            of them were right. Off, the default, the text and tasks of every committed run.
        max_steps: step limit; None gives delay + num_keys + 1 + `DOOR_SLACK` (the expert
            needs delay + num_keys + 1 steps).
        causal_feedback: the final feedback names the step that mattered ("it needed the
            key from the room, and you took the lamp instead"), as in the earlier text; off,
            it states the verdict only. A hindsight credit module shown the causal text
            reads the env's label instead of assigning credit.
        verdict_feedback: the final feedback states the env's verdict ("solved" / "not
            solved"), the text of every committed run; false: it says only what the agent
            saw happen (it opened the door, or the turns ran out), never whether the key
            was carried. The verdict is noise-free where the `return` channel's apples are
            not, so a module that shows the feedback (the hindsight block of HCAPO and
            HP-RLVR) reads more than the channel on that channel unless this is false
            (docs/credit.md, "Reward channels and verdicts"). It cannot be false with
            `causal_feedback`, which states the verdict and its cause.
        render_mode: None or "ansi" (the last observation).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self, max_steps: int | None = None, render_mode: str | None = None, **options: Any
    ) -> None:
        self.options = KeyDoorOptions(**options)
        self.delay = self.options.delay
        self.variance = self.options.variance
        self.num_objects = self.options.num_objects
        self.num_keys = self.options.num_keys
        if max_steps is None:
            max_steps = self.delay + self.num_keys + 1 + DOOR_SLACK
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.max_steps = max_steps
        self.causal_feedback = self.options.causal_feedback
        self.verdict_feedback = self.options.verdict_feedback
        self.render_mode = render_mode
        self.observation_space = text_space(OBSERVATION_MAX_CHARS)
        self.action_space = text_space(ACTION_MAX_CHARS)
        self.task: KeyDoorTask | None = None
        self.state: KeyDoorState | None = None
        self.last_observation = ""

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw a task with the seed (or take `options["task_id"]`) and enter the room."""
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        index = (
            int(self.np_random.integers(INSTANCES))
            if task_id is None
            else parse_task_index(task_id, "keydoor")
        )
        self.task = build_task(
            index,
            self.delay,
            APPLE_REWARDS[self.variance],
            self.num_objects,
            self.max_steps,
            self.num_keys,
            self.options.disguised_keys,
        )
        # Apples / coins from here on: one stream per group replica (envs/seeding.py).
        self.noise = replica_generator(self.np_random, options)
        self.state = KeyDoorState(0, NOTHING)
        self.steps_taken = 0
        self.last_observation = observation(self.task, self.state)
        info = self._info(self.state, key_step=False, success=False, feedback="")
        info["mdp_state"] = state_id(self.task, self.state)
        return self.last_observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        task, state = self.task, self.state
        if task is None:
            raise RuntimeError("KeyDoorEnv.step() called before reset()")
        if state is None:
            raise RuntimeError("KeyDoorEnv.step() called after the episode ended; call reset()")
        command = resolve(task, state, action)
        apple_value = None
        if command == EAT:
            values = task.apple_rewards
            apple_value = values[int(self.noise.integers(len(values)))]
        outcome = advance(task, state, command, apple_value)
        self.steps_taken = state.steps + 1
        self.state = outcome.next_state
        if outcome.reached is None:
            self.last_observation = final_observation(task, state, outcome)
        else:
            self.last_observation = observation(task, outcome.reached)
        feedback = self._feedback(state, outcome)
        info = self._info(self.state, outcome.key_step, outcome.success, feedback)
        info["mdp_state"] = state_id(task, state)
        info["mdp_next_state"] = None if self.state is None else state_id(task, self.state)
        return (
            self.last_observation,
            outcome.reward,
            outcome.terminated,
            outcome.truncated,
            info,
        )

    def render(self) -> str | None:
        return self.last_observation if self.render_mode == "ansi" else None

    def finite_mdp(self) -> KeyDoorMDP:
        """The exact MDP of the task `reset` drew (`envs.mdp.FiniteMDP`)."""
        if self.task is None:
            raise RuntimeError("KeyDoorEnv.finite_mdp() called before reset()")
        return KeyDoorMDP(self.task)

    # ---------------------------------------------------------------- internals
    def _feedback(self, state: KeyDoorState, outcome: Outcome[KeyDoorState]) -> str:
        """Why the episode that just left `state` ended ("" while it goes on)."""
        if not (outcome.terminated or outcome.truncated):
            return ""
        if self.causal_feedback:
            return self._causal_feedback(state, outcome)
        if not self.verdict_feedback:
            # What the agent's own last action and turn count show; the same text whether
            # or not the door opened for it.
            if outcome.terminated:
                return "You tried the door."
            return f"Step limit ({self.max_steps}) reached before the door was tried."
        if outcome.success:
            return "The door opened and you stepped through: solved."
        if outcome.terminated:
            return "The door stayed locked: not solved."
        return f"Step limit ({self.max_steps}) reached before the door was opened: not solved."

    def _causal_feedback(self, state: KeyDoorState, outcome: Outcome[KeyDoorState]) -> str:
        """The earlier feedback, which names the room's choice as the cause."""
        # What was carried never changes after the room, where `reached` shows the pick.
        carried = state.holding if outcome.reached is None else outcome.reached.holding
        taken = "nothing" if carried == NOTHING else f"the {carried}"
        if outcome.success:
            return "You opened the door holding the key from the room: solved."
        if outcome.terminated:
            return (
                "The door was locked: it needed the key from the room, and you took "
                f"{taken} instead."
            )
        holding = "the key" if carried == KEY else f"{taken} (not the key)"
        return (
            f"Step limit ({self.max_steps}) reached before the door was opened; you "
            f"carried {holding}."
        )

    def _info(
        self, state: KeyDoorState | None, key_step: bool, success: bool, feedback: str
    ) -> dict[str, Any]:
        task = self.task
        info: dict[str, Any] = {
            "success": success,
            "task_id": task.task_id,
            "task": TASK_TEXT,
            "admissible_commands": [] if state is None else list(commands(task, state)),
            "key_step": key_step,
            "feedback": feedback,
            "steps": self.steps_taken,
        }
        if state is not None:
            info["expert_action"] = expert_command(task, state)
            info["phase"] = phase(task, state)
        return info
