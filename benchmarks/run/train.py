"""Training for `creditgym run`: the trainers by name with their configs built from the
run's plan, the credit module a run trains with, how training samples the policy, and the
learning curve's held-out tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from creditgym.agents.trajectory import REWARD_CHANNELS
from creditgym.benchmarks.run.build import TRAINERS, build_credit
from creditgym.benchmarks.run.plan import EVAL_SEED_BASE, RunPlan, episode_agent_seed
from creditgym.credit.base import CreditModule
from creditgym.models.registry import LoadedModel
from creditgym.report import records
from creditgym.trainers.curve import CurveSettings
from creditgym.trainers.policy_gradient import AgentConfig, PolicyGradientConfig
from creditgym.trainers.sft import SFTConfig

# Training rollouts are sampled at temperature 1.0, as in GRPO (arXiv 2402.03300), GiGPO
# (arXiv 2505.10978), HCAPO (arXiv 2603.08754) and HP-RLVR.
TRAIN_TEMPERATURE = 1.0


def trainer_configs(plan: RunPlan) -> dict[str, tuple[type, Any]]:
    """Trainer name -> (trainer class, its config built from `plan`)."""
    cfg, size = plan.config, plan.group_size
    # Unset: each trainer keeps its own default learning rate.
    learning_rate = {} if cfg.learning_rate is None else {"learning_rate": cfg.learning_rate}
    return {
        "policy_gradient": (
            TRAINERS["policy_gradient"],
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
            TRAINERS["sft"],
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


def training_sampling(plan: RunPlan) -> AgentConfig:
    """How training rollouts (and the sample trajectories) sample the policy."""
    return AgentConfig(
        temperature=TRAIN_TEMPERATURE,
        max_new_tokens=plan.config.max_new_tokens,
        history_len=plan.history_len,
        constrained=plan.config.constrained,
    )


def training_credit(plan: RunPlan, policy: LoadedModel) -> CreditModule:
    """The credit module a run trains with: its --credit with its --credit-convention and
    --credit-options (as the plan parsed them), on its env, sampling and channel."""
    cfg = plan.config
    return build_credit(
        cfg.credit,
        policy,
        plan.history_len,
        cfg.generation_cache_gib,
        cfg.credit_convention,
        plan.credit_options,
        plan.env_id,
        plan.env_kwargs(),
        training_sampling(plan),
        cfg.reward_channel,
    )


def build_trainer(plan: RunPlan, run_dir: Path, policy: LoadedModel) -> Any:
    """The trainer a run trains with (its `--trainer`, credit, env, sampling, curve and
    reward channel), writing into `run_dir`; `train` runs it, the speed scripts
    (benchmarks/perf/bench_alfworld_hindsight.py) call its phases."""
    trainer_cls, trainer_config = trainer_configs(plan)[plan.config.trainer]
    return trainer_cls(
        policy,
        training_credit(plan, policy),
        plan.env_id,
        plan.env_kwargs(),
        training_sampling(plan),
        trainer_config,
        run_dir,
        curve=curve_settings(plan),
        reward_channel=REWARD_CHANNELS[plan.config.reward_channel],
    )


def train(plan: RunPlan, run_dir: Path, policy: LoadedModel) -> LoadedModel:
    """Train (or resume training of) the policy; writes metrics.jsonl and training.json.

    The trainer checkpoints every iteration into `run_dir/checkpoints/`, so a killed run
    continues from its last iteration; the trained policy is exported to `run_dir/final/`.
    """
    trainer = build_trainer(plan, run_dir, policy)
    metrics = trainer.train()
    records.atomic_write_json(
        run_dir / records.TRAINING_FILE,
        {
            "optimizer_steps": len(metrics),
            "iterations": plan.config.steps,
            "wall_seconds": records.training_clock(metrics)[-1] if metrics else 0.0,
            "rollouts": records.rollouts_used(metrics),
        },
    )
    return trainer.policy


def curve_settings(plan: RunPlan) -> CurveSettings | None:
    """The learning curve's held-out tasks: the first `curve_episodes` evaluation tasks of
    the first split, one sampling seed for every point (trainers/curve.py)."""
    cfg = plan.config
    if cfg.eval_every == 0:
        return None
    split = plan.splits[0]
    return CurveSettings(
        every=cfg.eval_every,
        seeds=tuple(EVAL_SEED_BASE + index for index in range(cfg.curve_episodes)),
        temperature=cfg.eval_temperature,
        agent_seed=episode_agent_seed(cfg.seed, "curve", 0),
        env_kwargs=plan.env_kwargs(split),
        num_envs=cfg.eval_batch_size,
    )
