"""A run's sample trajectories (samples.jsonl): one group of rollouts of one evaluation task,
with the per-step credit every registered module gives them.
"""

from __future__ import annotations

import json
from pathlib import Path

from creditgym import credit
from creditgym.agents.atomic import atomic_write_text
from creditgym.agents.episode import play_episode
from creditgym.benchmarks.cli import UsageError
from creditgym.benchmarks.run.build import SCRIPTED_AGENTS, build_credit, load_run_policy, make_env
from creditgym.benchmarks.run.evaluate import policy_rollouts
from creditgym.benchmarks.run.plan import EVAL_SEED_BASE, RunPlan, episode_agent_seed
from creditgym.benchmarks.run.train import TRAIN_TEMPERATURE, training_sampling
from creditgym.envs.options import changed_options
from creditgym.models.registry import LoadedModel
from creditgym.report import records

# Model that scores hindsight credit of scripted-agent samples (they have no policy).
SCRIPTED_SAMPLE_SCORER = "tiny"


def write_samples(plan: RunPlan, run_dir: Path, policy: LoadedModel | None) -> None:
    """Sample trajectories with the per-step credit of every registered module (the run's
    own module with its --credit-convention and --credit-options, `credit_settings`).

    One group of `sample_group_size` rollouts of one evaluation task, sampled at the
    training temperature (a group, so that group-relative modules have something to
    compare). Scripted runs have no policy to score hindsight with; `tiny` scores theirs.
    """
    cfg, env_id = plan.config, plan.env_id
    path = run_dir / records.SAMPLES_FILE
    if path.exists() or cfg.sample_group_size < 1:
        return
    split = plan.splits[0]
    group_id = f"{env_id}/sample"
    if policy is None:
        env = make_env(env_id, plan.env_kwargs(split))
        try:
            group = [
                play_episode(
                    env,
                    SCRIPTED_AGENTS[cfg.model](episode_agent_seed(cfg.seed, "sample", k)),
                    seed=EVAL_SEED_BASE,
                    group_id=group_id,
                )
                for k in range(cfg.sample_group_size)
            ]
        finally:
            env.close()
        scorer = load_run_policy(SCRIPTED_SAMPLE_SCORER, cfg.device)
    else:
        group = policy_rollouts(
            plan,
            policy,
            split,
            seeds=[EVAL_SEED_BASE],
            group_size=cfg.sample_group_size,
            temperature=TRAIN_TEMPERATURE,
            agent_seed=episode_agent_seed(cfg.seed, "sample", 0),
        )
        scorer = policy
    # The run's own module scores with the settings it trained with (convention, options);
    # the others at their defaults; all on the env's own rewards, as the samples record
    # them (the exact-MDP modules compute on the env's MDP, whose rewards are those).
    own = {"convention": cfg.credit_convention, "options": plan.credit_options}
    exact = {
        "env_id": env_id,
        "env_kwargs": plan.env_kwargs(split),
        "sampling": None if policy is None else training_sampling(plan),
    }
    credit_by_module = {}
    for name in sorted(credit.REGISTRY):
        try:
            module = build_credit(
                name, scorer, plan.history_len, **exact, **(own if name == cfg.credit else {})
            )
        except UsageError:
            if name == cfg.credit:
                raise
            continue  # an exact-MDP oracle off a finite-MDP env or a model's exact table
        credit_by_module[name] = module(group).step_advantages
    # The run's options off their defaults, by key: what its run identity names.
    named = () if plan.credit_options is None else changed_options(plan.credit_options)
    settings = (
        {cfg.credit: {"convention": cfg.credit_convention, "options": dict(sorted(named))}}
        if cfg.credit in credit.REGISTRY
        else {}
    )
    lines = [
        json.dumps(
            {
                "trajectory": trajectory.to_dict(),
                "credit_model": scorer.name,
                "credit": {name: values[i].tolist() for name, values in credit_by_module.items()},
                "credit_settings": settings,
            },
            ensure_ascii=False,
        )
        for i, trajectory in enumerate(group)
    ]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
