"""Training for `creditgym run`: the trainers by name with their configs built
from a `RunConfig`, the credit module a run trains with, how training samples the policy,
and the learning curve's held-out tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from creditgym.agents.models import LoadedModel
from creditgym.agents.trajectory import REWARD_CHANNELS
from creditgym.benchmarks.run_build import build_credit
from creditgym.benchmarks.run_config import RunConfig
from creditgym.benchmarks.run_eval import EVAL_SEED_BASE, episode_agent_seed
from creditgym.benchmarks.run_settings import (
    EVAL_ONLY,
    credit_options_of,
    env_kwargs_for,
    eval_splits,
    group_size,
    prompt_history,
)
from creditgym.credit.base import CreditModule
from creditgym.report import records
from creditgym.trainers.curve import CurveSettings
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)
from creditgym.trainers.sft import CreditFilteredSFTTrainer, SFTConfig

# Training rollouts are sampled at temperature 1.0, as in GRPO (arXiv 2402.03300), GiGPO
# (arXiv 2505.10978), HCAPO (arXiv 2603.08754) and HP-RLVR.
TRAIN_TEMPERATURE = 1.0


def trainer_configs(cfg: RunConfig) -> dict[str, tuple[type, Any]]:
    """Trainer name -> (trainer class, its config built from `cfg`)."""
    size = group_size(cfg)
    # Unset: each trainer keeps its own default learning rate.
    learning_rate = {} if cfg.learning_rate is None else {"learning_rate": cfg.learning_rate}
    return {
        "policy_gradient": (
            PolicyGradientTrainer,
            PolicyGradientConfig(
                steps=cfg.steps,
                group_size=size,
                tasks_per_step=cfg.tasks_per_step,
                seed=cfg.seed,
                checkpoint_every=1,
                resume=True,
                env_workers=cfg.env_workers,
                distinct_rows=cfg.update_distinct_rows,
                **learning_rate,
            ),
        ),
        "sft": (
            CreditFilteredSFTTrainer,
            SFTConfig(
                rounds=cfg.steps,
                num_tasks=cfg.tasks_per_step,
                group_size=size,
                # Fewer rollouts than environments would leave workers idle.
                num_envs=min(8, cfg.tasks_per_step * size),
                env_workers=cfg.env_workers,
                seed=cfg.seed,
                resume=True,
                **learning_rate,
            ),
        ),
    }


TRAINER_NAMES = ("policy_gradient", "sft", EVAL_ONLY)


def training_sampling(cfg: RunConfig) -> AgentConfig:
    """How training rollouts (and the sample trajectories) sample the policy."""
    return AgentConfig(
        temperature=TRAIN_TEMPERATURE,
        max_new_tokens=cfg.max_new_tokens,
        history_len=prompt_history(cfg),
        constrained=cfg.constrained,
    )


def training_credit(cfg: RunConfig, env_id: str, policy: LoadedModel) -> CreditModule:
    """The credit module a run trains with: its --credit with its --credit-convention and
    --credit-options (parsed once, `credit_options_of`), on its env, sampling and channel."""
    return build_credit(
        cfg.credit,
        policy,
        prompt_history(cfg),
        cfg.generation_cache_gib,
        cfg.credit_convention,
        credit_options_of(cfg),
        env_id,
        env_kwargs_for(cfg, env_id, None),
        training_sampling(cfg),
        cfg.reward_channel,
    )


def build_trainer(cfg: RunConfig, env_id: str, run_dir: Path, policy: LoadedModel) -> Any:
    """The trainer a run trains with (its `--trainer`, credit, env, sampling, curve and
    reward channel), writing into `run_dir`; `train` runs it, the speed scripts
    (benchmarks/perf/bench_alfworld_hindsight.py) call its phases."""
    trainer_cls, trainer_config = trainer_configs(cfg)[cfg.trainer]
    return trainer_cls(
        policy,
        training_credit(cfg, env_id, policy),
        env_id,
        env_kwargs_for(cfg, env_id, None),
        training_sampling(cfg),
        trainer_config,
        run_dir,
        curve=curve_settings(cfg, env_id),
        reward_channel=REWARD_CHANNELS[cfg.reward_channel],
    )


def train(cfg: RunConfig, env_id: str, run_dir: Path, policy: LoadedModel) -> LoadedModel:
    """Train (or resume training of) the policy; writes metrics.jsonl and training.json.

    The trainer checkpoints every iteration into `run_dir/checkpoints/`, so a killed run
    continues from its last iteration; the trained policy is exported to `run_dir/final/`.
    """
    trainer = build_trainer(cfg, env_id, run_dir, policy)
    metrics = trainer.train()
    records.atomic_write_json(
        run_dir / records.TRAINING_FILE,
        {
            "optimizer_steps": len(metrics),
            "iterations": cfg.steps,
            "wall_seconds": records.training_clock(metrics)[-1] if metrics else 0.0,
            "rollouts": records.rollouts_used(metrics),
        },
    )
    return trainer.policy


def curve_settings(cfg: RunConfig, env_id: str) -> CurveSettings | None:
    """The learning curve's held-out tasks: the first `curve_episodes` evaluation tasks of
    the first split, one sampling seed for every point (trainers/curve.py)."""
    if cfg.eval_every == 0:
        return None
    split = eval_splits(cfg, env_id)[0]
    return CurveSettings(
        every=cfg.eval_every,
        seeds=tuple(EVAL_SEED_BASE + index for index in range(cfg.curve_episodes)),
        temperature=cfg.eval_temperature,
        agent_seed=episode_agent_seed(cfg.seed, "curve", 0),
        env_kwargs=env_kwargs_for(cfg, env_id, split),
        num_envs=cfg.eval_batch_size,
    )
