"""creditgym environments inside TRL's real `GRPOTrainer` (integrations.trl_env).

The `tiny` policy is random, so it never writes a well-formed tool call on its own; the
trainer test makes its sampler write one fixed completion through transformers'
`sequence_bias` (each prefix of the completion biased, longer prefixes more), which is
the only thing not learned here. Everything after the completion is TRL's: parsing the
tool calls, calling `act`, appending the env's replies, the reward call, the loss step.
"""

from __future__ import annotations

import tempfile

import gymnasium as gym
import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen2_5_chat_template

from creditgym.benchmarks import trl_grpo
from creditgym.benchmarks.cli import USAGE_EXIT_CODE
from creditgym.credit.rule_based import RuleBased
from creditgym.integrations.trl_env import (
    EPISODE_OVER,
    CreditgymRewardedEnv,
    environment_factory,
    episode_return,
    episode_success,
    tool_calling_tokenizer,
)
from creditgym.models.registry import build_tiny

SYSDIAG = "creditgym/SysDiag-v0"
# Seed 4 is a disk out of inodes; these are the scripted expert's commands for it
# (info["expert_action"] at each step), and the env's key-step labels for them.
SOLVED_SEED, UNSOLVED_SEED = 4, 3
EXPERT_COMMANDS = (
    "df -i",
    "du --inodes -s /var/cache/*",
    "find /var/cache/orders-api-queue -type f -delete",
)
EXPERT_KEY_STEPS = [True, False, True]


def expert_commands(seed: int) -> list[str]:
    env = gym.make(SYSDIAG)
    _, info = env.reset(seed=seed)
    commands, done = [], False
    while not done:
        commands.append(info["expert_action"])
        _, _, terminated, truncated, info = env.step(commands[-1])
        done = terminated or truncated
    return commands


def test_expert_commands_are_the_ones_the_trainer_test_forces() -> None:
    assert expert_commands(SOLVED_SEED) == list(EXPERT_COMMANDS)


def test_env_steps_records_and_stops_at_the_end_of_the_episode() -> None:
    env = environment_factory(SYSDIAG)()
    with pytest.raises(RuntimeError, match="reset"):
        env.act("ls")
    first = env.reset(seed=SOLVED_SEED, prompt="ignored")
    assert "Admissible commands" in first and "act" in first
    replies = [env.act(command) for command in EXPERT_COMMANDS]
    assert "Episode over: success" in replies[-1]
    assert env.act("ls") == EPISODE_OVER  # no fifth step is taken
    trajectory = env.trajectory
    assert [step.action for step in trajectory.steps] == list(EXPERT_COMMANDS)
    assert [step.key_step for step in trajectory.steps] == EXPERT_KEY_STEPS
    assert trajectory.success and trajectory.seed == SOLVED_SEED
    assert episode_success([env]) == [1.0]
    env.reset(seed=SOLVED_SEED)  # a pooled instance starts over
    assert env.trajectory.length == 0 and episode_success([env]) == [0.0]


def test_rewarded_env_scores_its_rollout_through_trls_get_reward_hook() -> None:
    for reward, reward_function in (("success", episode_success), ("return", episode_return)):
        env = environment_factory(SYSDIAG, reward=reward)()
        env.reset(seed=SOLVED_SEED)
        assert [env.get_reward()] == reward_function([env]) == [0.0]  # nothing played yet
        for command in EXPERT_COMMANDS:
            env.act(command)
        # The hook and the reward function read the same episode.
        assert [env.get_reward()] == reward_function([env])
    # The episode's summed reward: the success reward less the step penalties.
    assert env.get_reward() == pytest.approx(sum(step.reward for step in env.trajectory.steps))
    assert 0.0 < env.get_reward() < 1.0 and env.trajectory.success
    plain = environment_factory(SYSDIAG)()
    assert not hasattr(plain, "get_reward")  # TRL would add it to every run's reward_funcs
    with pytest.raises(ValueError, match="valid: success, return"):
        environment_factory(SYSDIAG, reward="sucess")


def grpo_trainer(reward_funcs, factory) -> GRPOTrainer:
    """A GRPOTrainer on `tiny` that is only built, not trained."""
    loaded = build_tiny()
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=2,
        num_generations=2,
        max_steps=1,
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
    )
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": "Fix the host."}]], "seed": [SOLVED_SEED]}
    )
    return GRPOTrainer(
        model=loaded.model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tool_calling_tokenizer(loaded.tokenizer),
        environment_factory=factory,
    )


def test_grpo_trainer_takes_the_env_hook_as_its_only_reward_source(monkeypatch) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = grpo_trainer([], environment_factory(SYSDIAG, reward="success"))
    assert trainer.reward_func_names == [CreditgymRewardedEnv.__name__]
    assert "get_reward" not in {tool.__name__ for tool in trainer.tools}  # not a tool
    # Without the hook TRL has no reward source: the plain env leaves the reward to you.
    with pytest.raises(ValueError, match="No reward source"):
        grpo_trainer([], environment_factory(SYSDIAG))


def forced_completion_bias(tokenizer, text: str) -> list[list]:
    """`sequence_bias` that makes greedy or sampled decoding write `text` then stop."""
    ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    return [[ids[:k], 50.0 * k] for k in range(1, len(ids) + 1)]


@pytest.mark.slow
def test_grpo_trainer_steps_the_env_and_is_rewarded_by_it(monkeypatch) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    loaded = build_tiny()
    tokenizer = tool_calling_tokenizer(loaded.tokenizer)
    assert tokenizer.chat_template == qwen2_5_chat_template  # tiny's ChatML renders no tool call
    calls = "\n".join(
        f'<tool_call>\n{{"name": "act", "arguments": {{"command": "{command}"}}}}\n</tool_call>'
        for command in EXPERT_COMMANDS
    )
    rewarded = []

    def success_reward(environments, **kwargs):
        rewards = episode_success(environments, **kwargs)
        rewarded.append((list(environments), rewards))
        return rewards

    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "Fix the host."}]] * 2,
            "seed": [SOLVED_SEED, UNSOLVED_SEED],
        }
    )
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=1536,
        max_tool_calling_iterations=1,
        max_steps=1,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        generation_kwargs={"sequence_bias": forced_completion_bias(tokenizer, calls)},
        gradient_checkpointing=False,  # TRL turns it on; a 2-layer model gains nothing
        seed=0,
    )
    trainer = GRPOTrainer(
        model=loaded.model,
        reward_funcs=[success_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=environment_factory(SYSDIAG),
    )
    trainer.train()

    assert len(rewarded) == 1  # one batch: 2 rows x 2 generations
    environments, rewards = rewarded[0]
    trajectories = [environment.trajectory for environment in environments]
    assert sorted(t.seed for t in trajectories) == [3, 3, 4, 4]  # reset per rollout, row's seed
    for trajectory, reward in zip(trajectories, rewards, strict=True):
        # Every tool call of the completion stepped the env, in order.
        assert [s.action for s in trajectory.steps] == list(EXPERT_COMMANDS)
        # The reward is the env's verdict: the same text solves seed 3 only.
        assert reward == float(trajectory.success) == float(trajectory.seed == SOLVED_SEED)
    logged = trainer.state.log_history[0]
    assert logged["tools/call_frequency"] == len(EXPERT_COMMANDS)
    assert logged["rewards/success_reward/mean"] == pytest.approx(0.5)
    # The recovered trajectories are ready for credit scoring: key-step labels and all.
    solved = next(t for t in trajectories if t.seed == SOLVED_SEED)
    assert [s.key_step for s in solved.steps] == EXPERT_KEY_STEPS
    rule_based = RuleBased()([solved]).step_advantages[0]
    assert rule_based.tolist() == pytest.approx([1.99, -0.51, 3.0])


@pytest.mark.parametrize(
    "argv",
    [["--env", "sysdag"], ["--num-generations", "1"], ["--tasks", "0"], ["--model", "nope/none/x"]],
)
def test_trl_entry_point_refuses_bad_input_with_status_2(argv, capsys) -> None:
    assert trl_grpo.main(argv) == USAGE_EXIT_CODE
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and "\n" not in error
