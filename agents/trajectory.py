"""The trajectory contract: what a rollout produces and every later stage consumes.

A `Trajectory` is one episode of one agent in one environment: a tuple of `Step`s plus
the episode's identity (env, task, seed, group) and outcome (success, verifier feedback).
Policy steps keep the *exact* prompt token ids, generated token ids and behaviour
log-probs of the sampling distribution actually used, so that trainers and credit modules
never re-tokenise text (verl-agent and TRL keep the same bookkeeping).

Layout for trainers (`TokenBatch`): one row per step, as in multi-turn agent RL
(verl-agent / GiGPO / HCAPO treat each step's prompt + response as one sequence):

    row r = [prompt tokens of step t of trajectory i | action tokens | right padding]

Credit modules return ragged per-step / per-token values that `TokenBatch.scatter`
places into the same [N_rows, L] layout.

Reward channels (`REWARD_CHANNELS`): the signal a run trains on, applied to each
trajectory once, before credit and training (`trainers.core.TrainerCore`), so every
module compared in a table learns from the same rewards (docs/credit.md):

    return   every step keeps the env's reward (apples and door on KeyDoor)
    outcome  0 at every step, the env's verifiable verdict (1 or 0) at the last
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

# torch only where a TokenBatch is built: the envs and the scripted rollout run on the core
# dependencies alone (tests/test_packaging_light.py).
if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Step:
    """One agent step.

    Attributes:
        observation: text observation the agent saw before acting (the current state).
        admissible_commands: the commands the env offered in that state (empty if none).
        action: action text passed to the environment (after parsing the response).
        prompt_text: full prompt string given to the policy (empty for scripted agents).
        prompt_token_ids: token ids of that prompt, shape [P] (empty for scripted agents).
        response_text: full generated text (thinking + action tags); equals `action` for
            scripted agents.
        action_token_ids: exact generated token ids, shape [A] (empty for scripted agents).
        action_logprobs: behaviour log-probs of those tokens under the sampling
            distribution actually used (temperature / top-p / constraints), shape [A].
        reward: scalar reward returned by `env.step` for this action.
        terminated: the episode ended by reaching a terminal state (success or failure).
        truncated: the episode was cut by a step limit (not a failure of the policy).
        info: the env's `info` dict for this step (JSON-serialisable). Shared keys:
            `success`, `task_id`, `admissible_commands`, `key_step` (ground truth: did this
            step reveal the root cause / make progress the solution needs), `feedback`.
    """

    observation: str
    action: str
    admissible_commands: tuple[str, ...] = ()
    prompt_text: str = ""
    prompt_token_ids: tuple[int, ...] = ()
    response_text: str = ""
    action_token_ids: tuple[int, ...] = ()
    action_logprobs: tuple[float, ...] = ()
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.action_token_ids) != len(self.action_logprobs):
            raise ValueError(
                f"action_token_ids ({len(self.action_token_ids)}) and action_logprobs "
                f"({len(self.action_logprobs)}) must have the same length"
            )

    @property
    def key_step(self) -> bool:
        """Ground-truth label from the env: did this step matter for the solution."""
        return bool(self.info.get("key_step", False))

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["info"] = dict(self.info)
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Step:
        return cls(
            observation=record["observation"],
            action=record["action"],
            admissible_commands=tuple(record.get("admissible_commands", ())),
            prompt_text=record.get("prompt_text", ""),
            prompt_token_ids=tuple(record.get("prompt_token_ids", ())),
            response_text=record.get("response_text", ""),
            action_token_ids=tuple(record.get("action_token_ids", ())),
            action_logprobs=tuple(float(x) for x in record.get("action_logprobs", ())),
            reward=float(record.get("reward", 0.0)),
            terminated=bool(record.get("terminated", False)),
            truncated=bool(record.get("truncated", False)),
            info=dict(record.get("info", {})),
        )


@dataclass(frozen=True)
class Trajectory:
    """One episode.

    Attributes:
        env_id: registered Gymnasium id, e.g. ``creditgym/SysDiag-v0``.
        task_id: the env's stable id of the task (game file, fault instance, problem).
        seed: seed passed to ``env.reset``.
        group_id: rollouts of the same task in one batch share it (GRPO / GiGPO groups).
        task: the task instruction text (what the agent is asked to do).
        initial_observation: observation returned by ``env.reset``.
        steps: the agent's steps, in order.
        success: the env's verdict at the end of the episode.
        feedback: the env's final feedback text (why it succeeded or failed); hindsight
            credit modules (HCAPO, HP-RLVR) show it to the policy.
        metadata: free-form JSON-serialisable extras (agent name, model, temperature).
    """

    env_id: str
    task_id: str
    seed: int
    group_id: str
    task: str
    initial_observation: str
    steps: tuple[Step, ...]
    success: bool
    feedback: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def total_return(self) -> float:
        return float(sum(step.reward for step in self.steps))

    @property
    def truncated(self) -> bool:
        return bool(self.steps) and self.steps[-1].truncated

    @property
    def terminated(self) -> bool:
        return bool(self.steps) and self.steps[-1].terminated

    @property
    def num_action_tokens(self) -> int:
        return sum(len(step.action_token_ids) for step in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "task_id": self.task_id,
            "seed": self.seed,
            "group_id": self.group_id,
            "task": self.task,
            "initial_observation": self.initial_observation,
            "steps": [step.to_dict() for step in self.steps],
            "success": self.success,
            "feedback": self.feedback,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Trajectory:
        return cls(
            env_id=record["env_id"],
            task_id=str(record["task_id"]),
            seed=int(record["seed"]),
            group_id=str(record["group_id"]),
            task=record.get("task", ""),
            initial_observation=record.get("initial_observation", ""),
            steps=tuple(Step.from_dict(s) for s in record["steps"]),
            success=bool(record["success"]),
            feedback=record.get("feedback", ""),
            metadata=dict(record.get("metadata", {})),
        )


def return_channel(trajectory: Trajectory) -> Trajectory:
    """The trajectory as the env paid it: every step's own reward (the default channel)."""
    return trajectory


def outcome_channel(trajectory: Trajectory) -> Trajectory:
    """The trajectory paid only its verifiable outcome: reward 0 at every step and the
    env's verdict (`success`: 1.0, else 0.0) at the last; nothing else changes.

    Per-step rewards the env also pays (KeyDoor's apples, SysDiag's reboot, penalties)
    are dropped, so its return is the verdict: the signal of RLVR (a verifier's 1 / 0).
    """
    last = trajectory.length - 1
    steps = tuple(
        replace(step, reward=float(trajectory.success) if t == last else 0.0)
        for t, step in enumerate(trajectory.steps)
    )
    return replace(trajectory, steps=steps)


RewardChannel = Literal["return", "outcome"]
DEFAULT_REWARD_CHANNEL: RewardChannel = "return"
# Channel name -> the pure function from a trajectory to the trajectory on that channel.
REWARD_CHANNELS: dict[str, Callable[[Trajectory], Trajectory]] = {
    "return": return_channel,
    "outcome": outcome_channel,
}


class TokenBatch(NamedTuple):
    """Padded tensor view of a batch of trajectories, one row per step (right padding).

    N = total number of steps over all trajectories, L = longest prompt + action.

    Attributes:
        input_ids: [N, L] int64, prompt then action tokens, `pad_token_id` after.
        attention_mask: [N, L] int64, 1 on real tokens.
        action_mask: [N, L] float32, 1 only on policy-generated (action) tokens.
        step_index: [N, L] int64, the step's index t within its trajectory on real
            tokens, -1 on padding.
        old_logprobs: [N, L] float32, behaviour log-probs on action tokens, 0 elsewhere.
        rewards: [N] float32, the step's env reward.
        traj_index: [N] int64, index of the row's trajectory in the input sequence.
        group_ids: [N] int64, the trajectory's group as an integer code (first seen = 0).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    step_index: torch.Tensor
    old_logprobs: torch.Tensor
    rewards: torch.Tensor
    traj_index: torch.Tensor
    group_ids: torch.Tensor

    @classmethod
    def from_trajectories(
        cls, trajectories: Sequence[Trajectory], pad_token_id: int = 0
    ) -> TokenBatch:
        import torch

        rows = [
            (i, t, step) for i, traj in enumerate(trajectories) for t, step in enumerate(traj.steps)
        ]
        num_rows = len(rows)
        width = max([len(s.prompt_token_ids) + len(s.action_token_ids) for _, _, s in rows] + [1])
        input_ids = torch.full((num_rows, width), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((num_rows, width), dtype=torch.long)
        action_mask = torch.zeros((num_rows, width), dtype=torch.float32)
        step_index = torch.full((num_rows, width), -1, dtype=torch.long)
        old_logprobs = torch.zeros((num_rows, width), dtype=torch.float32)
        group_codes: dict[str, int] = {}
        for traj in trajectories:
            group_codes.setdefault(traj.group_id, len(group_codes))
        for row, (_, t, step) in enumerate(rows):
            prompt_len, action_len = len(step.prompt_token_ids), len(step.action_token_ids)
            total = prompt_len + action_len
            if prompt_len:
                input_ids[row, :prompt_len] = torch.tensor(step.prompt_token_ids)
            if action_len:
                input_ids[row, prompt_len:total] = torch.tensor(step.action_token_ids)
                old_logprobs[row, prompt_len:total] = torch.tensor(step.action_logprobs)
            attention_mask[row, :total] = 1
            action_mask[row, prompt_len:total] = 1.0
            step_index[row, :total] = t
        return cls(
            input_ids=input_ids,
            attention_mask=attention_mask,
            action_mask=action_mask,
            step_index=step_index,
            old_logprobs=old_logprobs,
            rewards=torch.tensor([s.reward for _, _, s in rows], dtype=torch.float32),
            traj_index=torch.tensor([i for i, _, _ in rows], dtype=torch.long),
            group_ids=torch.tensor(
                [group_codes[trajectories[i].group_id] for i, _, _ in rows], dtype=torch.long
            ),
        )

    def scatter(self, per_token: Sequence[Sequence[Sequence[float]]]) -> torch.Tensor:
        """Place ragged per-token values into the [N, L] layout, zero off the action mask.

        Args:
            per_token: per trajectory, per step, one value per action token (the shape
                of `CreditOutput.token_advantages`), in the same order as the
                trajectories given to `from_trajectories`.
        Returns:
            [N, L] float32 tensor.
        """
        import torch

        values = torch.zeros_like(self.old_logprobs)
        flat = [step_values for traj_values in per_token for step_values in traj_values]
        if len(flat) != values.shape[0]:
            raise ValueError(f"got values for {len(flat)} steps, batch has {values.shape[0]} rows")
        for row, step_values in enumerate(flat):
            positions = self.action_mask[row].nonzero().squeeze(-1)
            if len(step_values) != len(positions):
                raise ValueError(
                    f"row {row}: {len(step_values)} values for {len(positions)} action tokens"
                )
            if len(positions):
                values[row, positions] = torch.as_tensor(step_values, dtype=torch.float32)
        return values
