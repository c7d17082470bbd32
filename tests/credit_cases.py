"""Hand-built trajectories for the credit-module tests (tokens from the `tiny` tokenizer)."""

from __future__ import annotations

from collections.abc import Sequence

from creditgym.agents.prompts import messages_for_step
from creditgym.agents.trajectory import Step, Trajectory
from creditgym.credit import REGISTRY
from creditgym.credit.views import render_prompt_ids
from creditgym.models.registry import LoadedModel

ENV_ID = "creditgym/SysDiag-v0"
# Registered modules these SysDiag cases can exercise: those reading a finite-MDP env's
# exact state (`mdp_state`: `oracle`, `hca`) need that env in their context and its
# trajectories; tests/test_credit_oracle.py checks the same contract for them on KeyDoor.
CASE_MODULES = sorted(name for name, cls in REGISTRY.items() if "mdp_state" not in cls.reads)


def scripted_trajectory(
    group_id: str,
    rewards: Sequence[float],
    success: bool,
    observations: Sequence[str] | None = None,
    key_steps: Sequence[bool] = (),
    task_id: str = "task-0",
) -> Trajectory:
    """A trajectory without tokens (as the scripted agents produce)."""
    observations = observations or [f"{group_id} state {t}" for t in range(len(rewards))]
    steps = tuple(
        Step(
            observation=observations[t],
            action=f"check {t}",
            response_text=f"check {t}",
            reward=float(reward),
            terminated=t == len(rewards) - 1,
            info={"key_step": bool(key_steps[t]) if key_steps else False},
        )
        for t, reward in enumerate(rewards)
    )
    return Trajectory(
        env_id=ENV_ID,
        task_id=task_id,
        seed=0,
        group_id=group_id,
        task="Find why the web server is down and fix it.",
        initial_observation=observations[0] if observations else "",
        steps=steps,
        success=success,
        feedback="service restored" if success else "the fault is still there",
    )


def tokenised(
    trajectory: Trajectory, loaded: LoadedModel, logprob: float = -1.0, history_len: int = 2
) -> Trajectory:
    """The same trajectory as a policy would record it: exact prompt and action token ids."""
    tokenizer = loaded.tokenizer
    steps = []
    for t, step in enumerate(trajectory.steps):
        response = f"<think>look</think><action>{step.action}</action>"
        action_ids = tuple(tokenizer(response, add_special_tokens=False)["input_ids"])
        prompt_ids = render_prompt_ids(tokenizer, messages_for_step(trajectory, t, history_len))
        steps.append(
            Step(
                observation=step.observation,
                action=step.action,
                prompt_text=tokenizer.decode(prompt_ids),
                prompt_token_ids=prompt_ids,
                response_text=response,
                action_token_ids=action_ids,
                action_logprobs=tuple(logprob for _ in action_ids),
                reward=step.reward,
                terminated=step.terminated,
                info=step.info,
            )
        )
    return Trajectory(
        env_id=trajectory.env_id,
        task_id=trajectory.task_id,
        seed=trajectory.seed,
        group_id=trajectory.group_id,
        task=trajectory.task,
        initial_observation=trajectory.initial_observation,
        steps=tuple(steps),
        success=trajectory.success,
        feedback=trajectory.feedback,
    )
