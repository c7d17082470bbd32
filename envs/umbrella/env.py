"""`creditgym/Umbrella-v0`: bsuite's umbrella chain as text (Osband et al. 2020, arXiv 1908.03568).

At home (the first step) the observation shows the forecast, rain or sunshine, and the
agent takes or leaves the umbrella. Then `length - 1` walking steps follow whose two
commands have no effect; every step but the last pays +1 or -1 with probability 1/2,
and the last pays +1 if the umbrella choice matched the forecast, else -1. The
forecast is never shown again (unless `forecast_visible`): later observations show the
block walked, whether an umbrella is carried and `num_distractors` random facts that
never matter (fresh every step). They are Markov for the policy (no later action
matters), while the value of a state also depends on the hidden forecast, which the
true state of `finite_mdp()` keeps.

A command that is not admissible is answered, never raised on: at home it leaves the
umbrella; on the walk it walks on. Reaching `max_steps` before the end truncates.

`info` (see `envs/__init__.py`): `success` (the final reward was +1), `task_id`
("umbrella-<n>"), `task`, `admissible_commands` (empty once the episode ended),
`key_step` (the first step, when its choice matched the forecast), `feedback` (at the
end: the verdict and the weather, never which step mattered, unless `causal_feedback`;
with `verdict_feedback=False` the weather only),
`expert_action` (absent once the episode ended), `steps`, `forecast` ("rain" or
"sunshine": the episode's, to split success by; no prompt shows it), and the
true states `mdp_state` / `mdp_next_state` of `finite_mdp()` (see `envs.mdp`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from creditgym.envs.mdp import Outcome, parse_task_index
from creditgym.envs.seeding import replica_generator
from creditgym.envs.spaces import text_space
from creditgym.envs.umbrella.dynamics import (
    INSTANCES,
    TASK_TEXT,
    Draw,
    UmbrellaMDP,
    UmbrellaState,
    UmbrellaTask,
    advance,
    build_task,
    carries_umbrella,
    commands,
    decode_bits,
    expert_command,
    final_observation,
    forecast_name,
    observation,
    resolve,
    state_id,
)
from creditgym.envs.umbrella.options import UmbrellaOptions

OBSERVATION_MAX_CHARS = 1024
ACTION_MAX_CHARS = 1024


class UmbrellaEnv(gym.Env[str, str]):
    """Take the umbrella or not on a forecast seen once; the walk's noise hides the payoff.

    Args (each but `max_steps` and `render_mode` a field of `UmbrellaOptions`, which checks
    them):
        length: L >= 1, steps of the walk (bsuite's chain length; its sweep is 1-100).
        num_distractors: random facts shown every step (0 to 12; bsuite's n_distractor).
        max_steps: step limit; None gives `length` (every episode then ends by itself).
        forecast_visible: every observation shows the forecast (bsuite's
            `umbrella_distract` keeps `need_umbrella` in view), not only home's: the
            choice then has a visible reason at every step, a positive control.
        forecast_per_replica: draw the forecast from the group replica's own stream
            (`envs/seeding.py`), so the G rollouts of one task see both forecasts as
            bsuite draws one per episode; otherwise it comes from the reset seed and a
            whole group shares it (G rollouts, one forecast context).
        causal_feedback: the final feedback says that the first choice alone decided
            the reward, as in the earlier text; off, it states the verdict and the weather
            only. A hindsight credit module shown the causal text reads the env's label
            instead of assigning credit.
        verdict_feedback: the final feedback states the env's verdict and the final
            reward ("+1: solved" / "-1: not solved"), the text of every committed run;
            false: it says only what the agent saw happen (the weather at work, or that
            the turns ran out). The verdict is noise-free where the `return` channel's
            coins are not, so a module that shows the feedback (the hindsight block of
            HCAPO and HP-RLVR) reads more than the channel on that channel unless this is
            false (docs/credit.md, "Reward channels and verdicts"). It cannot be false
            with `causal_feedback`, which states the verdict and its cause.
        render_mode: None or "ansi" (the last observation).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self, max_steps: int | None = None, render_mode: str | None = None, **options: Any
    ) -> None:
        self.options = UmbrellaOptions(**options)
        self.length = self.options.length
        self.num_distractors = self.options.num_distractors
        if max_steps is None:
            max_steps = self.length
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.max_steps = max_steps
        self.forecast_visible = self.options.forecast_visible
        self.forecast_per_replica = self.options.forecast_per_replica
        self.causal_feedback = self.options.causal_feedback
        self.verdict_feedback = self.options.verdict_feedback
        self.render_mode = render_mode
        self.observation_space = text_space(OBSERVATION_MAX_CHARS)
        self.action_space = text_space(ACTION_MAX_CHARS)
        self.task: UmbrellaTask | None = None
        self.state: UmbrellaState | None = None
        self.last_observation = ""

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw a task with the seed (or take `options["task_id"]`), then the forecast and
        the first facts (random per reset, as bsuite draws `need_umbrella`; with
        `forecast_per_replica` the forecast is random per group replica too)."""
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        index = (
            int(self.np_random.integers(INSTANCES))
            if task_id is None
            else parse_task_index(task_id, "umbrella")
        )
        self.task = build_task(
            index, self.length, self.num_distractors, self.max_steps, self.forecast_visible
        )
        # One draw: bit 0 the forecast, the next n bits the facts.
        bits = int(self.np_random.integers(1 << (self.num_distractors + 1)))
        # Coins and facts from here on: one stream per group replica (envs/seeding.py).
        self.noise = replica_generator(self.np_random, options)
        rain = bool(bits & 1)
        if self.forecast_per_replica:
            # Drawn after the seed's bits, so the task and first facts stay the seed's.
            rain = bool(self.noise.integers(2))
        self.forecast_rain = rain
        self.state = UmbrellaState(0, rain, False, decode_bits(bits >> 1, self.num_distractors))
        self.steps_taken = 0
        self.last_observation = observation(self.task, self.state)
        info = self._info(self.state, key_step=False, success=False, feedback="")
        info["mdp_state"] = state_id(self.state)
        return self.last_observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        task, state = self.task, self.state
        if task is None:
            raise RuntimeError("UmbrellaEnv.step() called before reset()")
        if state is None:
            raise RuntimeError("UmbrellaEnv.step() called after the episode ended; call reset()")
        command = resolve(state, action)
        # One draw per step: bit 0 the noise reward's sign, the next n bits the facts.
        bits = int(self.noise.integers(1 << (self.num_distractors + 1)))
        draw = Draw(1.0 if bits & 1 else -1.0, decode_bits(bits >> 1, self.num_distractors))
        outcome = advance(task, state, command, draw)
        self.steps_taken = state.steps + 1
        self.state = outcome.next_state
        if outcome.reached is None:
            self.last_observation = final_observation(state, command)
        else:
            self.last_observation = observation(task, outcome.reached)
        feedback = self._feedback(state, command, outcome)
        info = self._info(self.state, outcome.key_step, outcome.success, feedback)
        info["mdp_state"] = state_id(state)
        info["mdp_next_state"] = None if self.state is None else state_id(self.state)
        return (
            self.last_observation,
            outcome.reward,
            outcome.terminated,
            outcome.truncated,
            info,
        )

    def render(self) -> str | None:
        return self.last_observation if self.render_mode == "ansi" else None

    def finite_mdp(self) -> UmbrellaMDP:
        """The exact MDP of the task `reset` drew (`envs.mdp.FiniteMDP`)."""
        if self.task is None:
            raise RuntimeError("UmbrellaEnv.finite_mdp() called before reset()")
        return UmbrellaMDP(self.task)

    # ---------------------------------------------------------------- internals
    def _feedback(
        self, state: UmbrellaState, command: str | None, outcome: Outcome[UmbrellaState]
    ) -> str:
        """Why the episode that `command` in `state` moved on ended ("" while it goes on)."""
        if not (outcome.terminated or outcome.truncated):
            return ""
        if self.causal_feedback:
            return self._causal_feedback(state, command, outcome)
        if outcome.truncated:
            if not self.verdict_feedback:
                return f"Step limit ({self.max_steps}) reached before work."
            return f"Step limit ({self.max_steps}) reached before work: not solved."
        # The weather at work is what the final observation shows, not a label of a step.
        weather = "in the rain" if state.rain else "in sunshine"
        if not self.verdict_feedback:
            return f"You reached work {weather}."
        verdict = "+1: solved" if outcome.success else "-1: not solved"
        return f"You reached work {weather}; the final reward was {verdict}."

    def _causal_feedback(
        self, state: UmbrellaState, command: str | None, outcome: Outcome[UmbrellaState]
    ) -> str:
        """The earlier feedback, which says the first choice alone decided."""
        forecast = forecast_name(state.rain)
        took = carries_umbrella(state, command)
        choice = "took the umbrella" if took else "left the umbrella at home"
        if outcome.terminated:
            verdict = "right: +1" if outcome.success else "wrong: -1"
            return (
                f"The forecast at home said {forecast} and you {choice}; that first "
                f"choice alone decides the final reward, and it was {verdict}."
            )
        return (
            f"Step limit ({self.max_steps}) reached before work; the forecast at home "
            f"said {forecast} and you {choice}."
        )

    def _info(
        self, state: UmbrellaState | None, key_step: bool, success: bool, feedback: str
    ) -> dict[str, Any]:
        info: dict[str, Any] = {
            "success": success,
            "task_id": self.task.task_id,
            "task": TASK_TEXT,
            "admissible_commands": [] if state is None else list(commands(state)),
            "key_step": key_step,
            "feedback": feedback,
            "steps": self.steps_taken,
            # The episode's forecast (hidden state, as in `mdp_state`), so that success
            # can be split by it: a policy stuck on one choice wins one forecast only.
            "forecast": forecast_name(self.forecast_rain),
        }
        if state is not None:
            info["expert_action"] = expert_command(state)
        return info
