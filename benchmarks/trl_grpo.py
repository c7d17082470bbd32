"""Train a policy on a creditgym env with TRL's GRPOTrainer: `creditgym trl-grpo`.

    creditgym trl-grpo --env sysdiag --model smollm2-135m --tasks 32 --max-steps 20

The TRL side of docs/integrations.md: one dataset row per task seed, TRL's
`num_generations` rollouts per row, the env's verdict as the reward
(`integrations.trl_env`), TRL's own GRPO loss and metrics. Every rollout's episode is
appended to `<output-dir>/trajectories.jsonl` as a creditgym trajectory, ready for credit
scoring. Names and numbers are checked before any work; bad input is one line and exit
status 2.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from creditgym import envs
from creditgym.benchmarks import common
from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, parse_arguments, prog_of
from creditgym.integrations.trl_env import (
    CreditgymEnv,
    environment_factory,
    episode_success,
    tool_calling_tokenizer,
)
from creditgym.report.records import JsonlAppender

# The user turn every row starts from; `reset` appends the task and the first observation.
PROMPT = "Solve the task in the environment below."


@dataclass(frozen=True)
class TRLArgs:
    """GRPO with TRL on one creditgym environment."""

    env: str = "sysdiag"
    """environment: short name (sysdiag, keydoor, ...) or registered id"""
    model: str = "smollm2-135m"
    """policy: a creditgym model name, a local folder or a Hugging Face id"""
    tasks: int = 16
    """task seeds 0 .. tasks-1, one dataset row each"""
    num_generations: int = 4
    """rollouts per task in a step (TRL's G)"""
    rows_per_step: int = 2
    """tasks per optimiser step (the batch is rows_per_step x num_generations rollouts)"""
    max_steps: int = 10
    """optimiser steps"""
    max_completion_length: int = 1024
    """tokens of one rollout after its prompt: the model's turns and the env's replies"""
    learning_rate: float = 1e-6
    """AdamW learning rate"""
    seed: int = 0
    """seed of TRL's sampling and shuffling"""
    output_dir: Path = Path("results/local/trl")
    """TRL's checkpoints and logs, and trajectories.jsonl"""


def checked_env_id(args: TRLArgs) -> str:
    """The env's registered id, once every name and number is checked (else UsageError)."""
    env_id = common.env_id(args.env)
    common.check_at_least(
        (f"--{name.replace('_', '-')}", getattr(args, name), 1)
        for name in ("tasks", "num_generations", "rows_per_step", "max_steps")
    )
    if args.num_generations < 2:
        raise UsageError("--num-generations must be >= 2: GRPO compares rollouts of a task")
    if args.max_completion_length < 1 or args.learning_rate <= 0:
        raise UsageError("--max-completion-length and --learning-rate must be positive")
    return env_id


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    """Entry point of `creditgym trl-grpo`."""
    args = parse_arguments(TRLArgs, argv, prog_of("trl_grpo"))
    env_id = checked_env_id(args)
    loaded = common.load_policy(args.model)
    try:
        tokenizer = tool_calling_tokenizer(loaded.tokenizer)
    except ValueError as error:
        raise UsageError(f"model {args.model}: {error}") from error
    args.output_dir.mkdir(parents=True, exist_ok=True)
    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": PROMPT}]] * args.tasks,
            "seed": list(range(args.tasks)),
        }
    )
    with JsonlAppender(args.output_dir / "trajectories.jsonl") as trajectories:

        def success_and_record(environments: list[CreditgymEnv], **kwargs: Any) -> list[float]:
            for environment in environments:
                trajectories.append(environment.trajectory.to_dict())
            return episode_success(environments, **kwargs)

        config = GRPOConfig(
            output_dir=str(args.output_dir),
            per_device_train_batch_size=args.rows_per_step * args.num_generations,
            num_generations=args.num_generations,
            max_completion_length=args.max_completion_length,
            max_tool_calling_iterations=envs.ENVS[env_id].max_episode_steps,
            max_steps=args.max_steps,
            learning_rate=args.learning_rate,
            use_cpu=not torch.cuda.is_available(),
            bf16=False,  # creditgym's models are loaded in float32
            report_to=[],
            logging_steps=1,
            seed=args.seed,
        )
        GRPOTrainer(
            model=loaded.model,
            reward_funcs=[success_and_record],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            environment_factory=environment_factory(env_id),
        ).train()
    print(f"trajectories: {args.output_dir / 'trajectories.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
