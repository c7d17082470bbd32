"""Any registered creditgym environment as a TRL `GRPOTrainer` environment.

TRL's multi-turn mode (`GRPOTrainer(..., environment_factory=...)`, trl 1.16) builds one
instance per rollout, calls `reset(**row)` with the dataset row before generation
(the string it returns is appended to the row's last user message), exposes every
public method other than `reset` as a tool the model may call, and hands the instances
to the reward functions as `environments`. Here:

- `reset(seed=..., **row)` resets the Gymnasium env with the row's `seed` column (the
  task: same seed, same task, so TRL's `num_generations` rollouts of one row form one
  GRPO group) and returns the task, the first observation and the admissible commands;
- `act(command)` is the one tool: it steps the env and returns what the env replied;
- the reward, either way TRL takes one: the reward functions `episode_success` (1.0 for
  an episode the env judged a success, else 0.0) and `episode_return` (the env's summed
  reward), passed in `reward_funcs`; or TRL's own hook, a `get_reward()` method, which
  `environment_factory(env_id, reward="success")` (or `"return"`) adds: TRL then scores
  each rollout with it (weight 1, logged as `rewards/CreditgymRewardedEnv/...`) and
  needs no `reward_funcs`. The hook is on a subclass only, since TRL adds a class's
  `get_reward` to whatever reward functions it is also given;
- `trajectory` gives the episode as a creditgym `Trajectory` (observations, actions,
  rewards, the env's `key_step` labels, success, feedback), recorded by the same
  `agents.episode.EpisodeRecorder` creditgym's own rollouts use, so credit modules and
  the key-step metrics read it as they read any rollout.

TRL keeps the tokens: a step here carries text only (no prompt / action token ids, no
behaviour log-probs), and TRL broadcasts its own group-relative advantage to every
trained token of the rollout (GRPO, Shao et al. 2024, arXiv 2402.03300).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from transformers import PreTrainedTokenizerBase
from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

from creditgym import envs  # noqa: F401  (registers the creditgym ids with Gymnasium)
from creditgym.agents.base import AgentAction
from creditgym.agents.episode import EpisodeRecorder, env_name
from creditgym.agents.prompts import MAX_LISTED_COMMANDS, intro
from creditgym.agents.trajectory import Trajectory

# What the tool answers once the episode has ended: TRL may let the model keep calling it.
EPISODE_OVER = "The episode is over; no command was run."


def _commands_line(commands: Sequence[str]) -> str:
    listed = list(commands[:MAX_LISTED_COMMANDS])
    return "Admissible commands: [" + ", ".join(repr(c) for c in listed) + "]"


class CreditgymEnv:
    """One creditgym episode at a time, driven by TRL's tool calls.

    TRL makes a tool of every public method of the class, so everything else here is a
    property or private. Build instances with `environment_factory(env_id)`.

    Args:
        env_id: a registered id, e.g. ``creditgym/SysDiag-v0``.
        make_kwargs: passed to `gymnasium.make` (an env's own options, e.g. its split).
    """

    def __init__(self, env_id: str, **make_kwargs: Any) -> None:
        self._env = gym.make(env_id, **make_kwargs)
        self._episode: EpisodeRecorder | None = None

    def reset(self, seed: int, **row: Any) -> str:
        """Start the episode of task `seed`; the text TRL appends to the row's prompt.

        Args:
            seed: the dataset row's `seed` column, passed to `env.reset(seed=...)`.
            row: the row's other columns (TRL passes the whole row; they are not used).
        """
        del row
        observation, info = self._env.reset(seed=int(seed))
        self._episode = EpisodeRecorder(env_name(self._env), int(seed), observation, info)
        parts = [
            intro(self._episode.env_id),
            f"Your task is: {self._episode.task}",
            f"Current observation: {observation}",
        ]
        commands = self._episode.agent_input().admissible_commands
        if commands:
            parts.append(_commands_line(commands))
        parts.append("Call the `act` tool with one command per turn.")
        return "\n\n".join(parts)

    def act(self, command: str) -> str:
        """Run one command in the environment and return what it replied.

        Args:
            command: the command to run, for example one of the admissible commands.

        Returns:
            The observation that follows, and the outcome once the episode has ended.
        """
        episode = self._started
        if episode.done:
            return EPISODE_OVER
        episode.record(AgentAction(action=command), *self._env.step(command))
        reply = [episode.observation]
        if episode.done:
            verdict = "success" if episode.info.get("success", False) else "failure"
            reply.append(f"Episode over: {verdict}. {episode.info.get('feedback', '')}".strip())
        else:
            commands = episode.agent_input().admissible_commands
            if commands:
                reply.append(_commands_line(commands))
        return "\n\n".join(reply)

    @property
    def _started(self) -> EpisodeRecorder:
        if self._episode is None:
            raise RuntimeError("reset(seed=...) must be called before the episode is used")
        return self._episode

    @property
    def trajectory(self) -> Trajectory:
        """The episode so far as a creditgym `Trajectory`, in `agents.episode.group_id`'s
        group (rollouts of one seed share it); `metadata["agent"]` is ``"trl"``."""
        return self._started.trajectory("trl")

    @property
    def success(self) -> bool:
        """The env's verdict so far (False until an episode ends in success)."""
        return bool(self._started.info.get("success", False))


def tool_calling_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """`tokenizer` with a chat template TRL renders and parses tool calls with.

    Its own template if TRL supports it; else, for a ChatML tokenizer (creditgym's `tiny`
    and `small`, SmolLM2), Qwen2.5's template, which uses the same special tokens and is
    one TRL parses (a plain ChatML template renders no tool call). Sets it in place.

    Raises:
        ValueError: no tool-calling template and no ChatML tokens to borrow Qwen2.5's.
    """
    if supports_tool_calling(tokenizer):
        return tokenizer
    if tokenizer.convert_tokens_to_ids("<|im_start|>") in (None, tokenizer.unk_token_id):
        raise ValueError(
            "the tokenizer's chat template cannot render tool calls and it has no ChatML "
            "tokens; give it a tool-calling template TRL knows (trl.chat_template_utils)"
        )
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


# One episode's reward, by name: what both the reward functions and the `get_reward` hook
# return for an environment.
REWARDS: dict[str, Callable[[CreditgymEnv], float]] = {
    "success": lambda environment: float(environment.success),
    "return": lambda environment: environment.trajectory.total_return,
}


class CreditgymRewardedEnv(CreditgymEnv):
    """A `CreditgymEnv` that scores its own rollouts through TRL's `get_reward` hook.

    Args:
        env_id: a registered id, e.g. ``creditgym/SysDiag-v0``.
        reward: a name in `REWARDS`: ``"success"`` (1.0 or 0.0) or ``"return"``.
        make_kwargs: passed to `gymnasium.make`.
    """

    def __init__(self, env_id: str, reward: str, **make_kwargs: Any) -> None:
        super().__init__(env_id, **make_kwargs)
        self._reward = REWARDS[reward]

    def get_reward(self) -> float:
        """TRL's hook: the finished rollout's reward, read from the episode recorded here."""
        return self._reward(self)


def environment_factory(
    env_id: str, reward: str | None = None, **make_kwargs: Any
) -> Callable[[], CreditgymEnv]:
    """The `environment_factory` argument of `trl.GRPOTrainer` for one creditgym env id.

    Args:
        env_id: a registered id, e.g. ``creditgym/SysDiag-v0``.
        reward: None (the default): score with `reward_funcs` (`episode_success`, ...);
            a name in `REWARDS`: the environment owns its reward (TRL's `get_reward`).
        make_kwargs: passed to `gymnasium.make` (an env's own options, e.g. its split).

    Raises:
        ValueError: `reward` is not a name in `REWARDS`.
    """
    if reward is None:
        return functools.partial(CreditgymEnv, env_id, **make_kwargs)
    if reward not in REWARDS:
        raise ValueError(f"unknown reward {reward!r}; valid: {', '.join(REWARDS)}")
    return functools.partial(CreditgymRewardedEnv, env_id, reward, **make_kwargs)


def episode_success(environments: Sequence[CreditgymEnv], **kwargs: Any) -> list[float]:
    """TRL reward function: 1.0 per rollout whose episode the env judged a success, else 0.0.

    Args:
        environments: TRL's per-rollout instances, in the order of the completions.
        kwargs: the rest of what TRL passes (prompts, completions, dataset columns).
    """
    del kwargs
    return [REWARDS["success"](environment) for environment in environments]


def episode_return(environments: Sequence[CreditgymEnv], **kwargs: Any) -> list[float]:
    """TRL reward function: each rollout's summed env reward (success reward and step
    penalties), the R that creditgym's credit modules use."""
    del kwargs
    return [REWARDS["return"](environment) for environment in environments]
