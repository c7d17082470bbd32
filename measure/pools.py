"""Trajectory pools of a policy on tasks whose exact truth is known, and credit over them.

For a finite-MDP env (`envs.mdp`: KeyDoor, Umbrella) and a policy -- an LLM sampled with
constrained decoding and no history (the envs are Markov, so its action distribution is
a function of the state and its exact table is computable, `measure.ground_truth`), or
the uniform table policy:

1. `draw_task_truths`: `tasks` tasks drawn by reset seed, each one's exact table and
   ground truth (V, Q, A and the exact logit gradient, `credit.policy_evaluation`);
2. `sample_pool`: `pool` trajectories of that same policy through the rollout engine
   (`agents.rollout.collect`; G = `group_size` rollouts per group, groups cycling
   through the tasks). `noise="shared"` plays a group's G rollouts from one reset seed,
   as a trainer's `collect` does: they share the env's random draws (KeyDoor's apples,
   Umbrella's noise and forecast), common random numbers a group baseline subtracts for
   free; `"independent"` gives every rollout its own seed on the same task, i.i.d.
   samples of the task's MDP, as the truth assumes;
3. `module_credits`: a credit module called on the pool's consecutive disjoint batches
   in turn, as a trainer would; `score_module` scores them against the truth
   (`measure.truth_metrics`: correlations with A(s_t, a_t), key-step sign agreement,
   and per batch size the cosine of the batch gradient with the exact one and its SNR).

`prepare_pool` does all of it for one env setting and returns the context modules are
built from (one score memo: the weights never change, so each view is scored once).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from creditgym import credit, envs
from creditgym.agents.episode import play_episode
from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.agents.tabular import TableAgent
from creditgym.agents.trajectory import Trajectory
from creditgym.credit.base import CreditContext, CreditModule, build
from creditgym.credit.policy_evaluation import GroundTruth, evaluate_policy, reachable_states
from creditgym.measure.ground_truth import exact_sources, llm_policy_table, uniform_policy
from creditgym.measure.truth_metrics import (
    TruthSet,
    gradient_estimate,
    gradient_stats,
    step_agreement,
)
from creditgym.models.registry import LoadedModel
from creditgym.models.scoring import ScoreMemo

# Task seeds (for drawing the tasks) and rollout seeds are far apart, so no rollout
# replays the draw that chose a task.
ROLLOUT_SEED_BASE = 1_000_000


class PoolError(ValueError):
    """A pool that cannot be drawn as asked (an entry point reports it as a usage error)."""


@dataclass(frozen=True)
class PoolSettings:
    """How the tasks are drawn and the pool sampled (an entry point's parsed options).

    Attributes:
        tasks: distinct tasks (each needs its own ground truth); groups cycle through them.
        pool: trajectories sampled (whole groups).
        group_size: G, rollouts per group.
        noise: `shared` (a group's rollouts share one reset seed) or `independent`.
        temperature: sampling temperature of the LLM policy.
        gamma: discount of the ground truth, in [0, 1].
        max_new_tokens: token limit of one response (a longer command is refused).
        num_envs: parallel environments of the rollout.
        seed: seed of the tasks (task k is drawn with reset seed `seed + k`) and sampling.
    """

    tasks: int
    pool: int
    group_size: int
    noise: Literal["shared", "independent"]
    temperature: float
    gamma: float
    max_new_tokens: int
    num_envs: int
    seed: int


def check_finite_mdp(env_id: str) -> None:
    """PoolError unless the registered env describes itself as a finite MDP."""
    if not envs.ENVS[env_id].finite_mdp:
        raise PoolError(f"{env_id} does not describe itself as a finite MDP (EnvInfo.finite_mdp)")


def make_env(env_id: str, kwargs: Mapping[str, Any]) -> gym.Env:
    """The env with `kwargs`; PoolError (one line) where it refuses them."""
    try:
        return gym.make(env_id, **kwargs)
    except (TypeError, ValueError) as error:
        raise PoolError(
            f"cannot create {env_id} with {dict(kwargs)} ({error}); --sweep-kwarg names the "
            "option swept (KeyDoor: delay, Umbrella: length)"
        ) from error


def rollout_agent(policy: LoadedModel, settings: PoolSettings, seed: int) -> LLMAgent:
    """The LLM as the rollout runs it: constrained, no history (the truth needs both)."""
    return LLMAgent(
        policy,
        temperature=settings.temperature,
        max_new_tokens=settings.max_new_tokens,
        history_len=0,
        constrained=True,
        seed=seed,
    )


@dataclass(frozen=True)
class TaskTruth:
    """One task's exact table and ground truth, and what computing them cost."""

    task_id: str
    table: Mapping[str, Mapping[str, float]]
    truth: GroundTruth
    seconds: float


def task_truth(
    env: gym.Env,
    env_id: str,
    seed: int,
    policy: LoadedModel | None,
    settings: PoolSettings,
    memo: ScoreMemo | None = None,
) -> TaskTruth:
    """Reset `env` with `seed`, describe its task as an MDP, and evaluate the policy on it
    (the table's views kept in `memo`, where the exact-MDP modules read them again)."""
    _, info = env.reset(seed=seed)
    mdp = env.unwrapped.finite_mdp()  # `check_finite_mdp` passed
    start = time.perf_counter()
    if policy is None:
        table = uniform_policy(mdp, reachable_states(mdp))
    else:
        agent = rollout_agent(policy, settings, settings.seed)
        table = llm_policy_table(agent, env_id, mdp, memo=memo)
    truth = evaluate_policy(mdp, table, settings.gamma)
    return TaskTruth(str(info["task_id"]), table, truth, time.perf_counter() - start)


def draw_task_truths(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy: LoadedModel | None,
    settings: PoolSettings,
    memo: ScoreMemo | None = None,
) -> tuple[list[TaskTruth], TruthSet]:
    """`settings.tasks` tasks (reset seeds seed, seed + 1, ...), each with its truth, and
    the truth of their uniform mixture; PoolError where two seeds drew one task."""
    env = make_env(env_id, env_kwargs)
    try:
        truths = [
            task_truth(env, env_id, settings.seed + k, policy, settings, memo)
            for k in range(settings.tasks)
        ]
    finally:
        env.close()
    mixture = TruthSet(
        {t.task_id: t.truth for t in truths},
        {t.task_id: 1.0 / len(truths) for t in truths},
    )
    if len(mixture.truths) < len(truths):
        raise PoolError(f"the {settings.tasks} task seeds drew the same task twice")
    return truths, mixture


def sample_pool(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    task_ids: Sequence[str],
    tables: Mapping[str, Mapping[str, Mapping[str, float]]],
    policy: LoadedModel | None,
    settings: PoolSettings,
    seed: int,
) -> list[Trajectory]:
    """`settings.pool` trajectories of the policy; group j plays task j mod len(task_ids).

    Each group's rollouts share a reset seed (`shared`, as `collect` gives a trainer) or
    each has its own (`independent`); either way `group_id` names the group. The LLM
    plays through the batched rollout engine (`agents.rollout.collect`); the table
    policy through its reference loop (`agents.episode.play_episode`, which `collect`
    equals for scripted agents), in this process: worker start-up would cost more than
    its episodes.
    """
    num_groups = settings.pool // settings.group_size
    shared = settings.noise == "shared"
    replicas = settings.group_size if shared else 1
    per_group = 1 if shared else settings.group_size
    seeds = [seed + k for k in range(num_groups * per_group)]
    options = [{"task_id": task_ids[(k // per_group) % len(task_ids)]} for k in range(len(seeds))]
    if policy is None:
        agent = TableAgent(tables, seed=seed)
        env = make_env(env_id, env_kwargs)
        try:
            trajectories = [
                play_episode(env, agent, seed=s, options=o)
                for s, o in zip(seeds, options, strict=True)
                for _ in range(replicas)
            ]
        finally:
            env.close()
    else:
        trajectories, stats = collect(
            env_id,
            rollout_agent(policy, settings, seed),
            seeds,
            group_size=replicas,
            num_envs=settings.num_envs,
            env_kwargs=env_kwargs,
            options=options,
            progress=False,
        )
        if stats.dropped:
            raise RuntimeError(f"rollout dropped episodes: {stats.dropped[0]}")
    # In (seed, replica) order, trajectory k belongs to group k // G.
    return [
        dataclasses.replace(
            trajectory, group_id=f"{env_id}/{trajectory.task_id}/group{k // settings.group_size}"
        )
        for k, trajectory in enumerate(trajectories)
    ]


def sample_task_pool(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    task_truths: Sequence[TaskTruth],
    policy: LoadedModel | None,
    settings: PoolSettings,
    seed: int,
) -> list[Trajectory]:
    """`sample_pool` on the tasks of `task_truths` (`draw_task_truths`), each played by its
    exact table where the policy is the table."""
    task_ids = [t.task_id for t in task_truths]
    tables = {t.task_id: t.table for t in task_truths}
    return sample_pool(env_id, env_kwargs, task_ids, tables, policy, settings, seed)


def batch_credits(module: CreditModule, pool: Sequence[Trajectory], size: int) -> list[np.ndarray]:
    """Per-step credit ([T_i] each) of the first len(pool) // size * size trajectories.

    `module` is called on the pool's consecutive disjoint batches of `size` trajectories
    (whole groups) in turn, as a trainer would, so a stateful module carries its state from
    batch to batch.
    """
    credits: list[np.ndarray] = []
    for start in range(0, len(pool) - size + 1, size):
        credits.extend(module(pool[start : start + size]).step_advantages)
    return credits


def module_credits(
    cls: type, context: CreditContext, pool: Sequence[Trajectory], size: int
) -> list[np.ndarray]:
    """`batch_credits` of a fresh module of class `cls`."""
    return batch_credits(build(cls, context), pool, size)


def score_module(
    module_name: str,
    context: CreditContext,
    pool: Sequence[Trajectory],
    truths: TruthSet,
    batch_sizes: Sequence[int],
) -> dict[str, float]:
    """One table row: correlations, key-step sign agreement and per-B gradient statistics."""
    cls = credit.resolve(module_name)
    exact = truths.exact_gradient()
    row: dict[str, float] = {}
    for size in sorted(batch_sizes):
        credits = module_credits(cls, context, pool, size)
        trajectories = pool[: len(credits)]
        estimates = [
            gradient_estimate(trajectories[s : s + size], credits[s : s + size], truths)
            for s in range(0, len(credits), size)
        ]
        stats = gradient_stats(np.stack(estimates), exact)
        if not row:  # correlations from the smallest batch size: the most batches
            agreement = step_agreement(trajectories, credits, truths)
            row.update(
                pearson=agreement.pearson,
                spearman=agreement.spearman,
                key_sign=agreement.key_sign_agreement,
                key_steps=float(agreement.key_steps),
            )
        row.update(
            {
                f"cos@{size}": stats.cosine,
                f"cos_mean@{size}": stats.cosine_of_mean,
                f"snr@{size}": stats.snr,
                f"batches@{size}": float(stats.batches),
            }
        )
    return row


@dataclass(frozen=True)
class PreparedPool:
    """One env setting's tasks, truth and pool, and the context modules are built from.

    Attributes:
        truths: every task's exact ground truth.
        pool: the sampled trajectories (whole groups, `sample_pool`).
        context: what a run offers a module; its `score_memo` holds every score (the
            weights never change here), so each distinct view is scored once.
        exact_return: the policy's expected return by dynamic programming (task mean).
        sampled_return: the pool's mean return.
    """

    truths: TruthSet
    pool: list[Trajectory]
    context: CreditContext
    exact_return: float
    sampled_return: float


def prepare_pool(
    settings: PoolSettings,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy: LoadedModel | None,
    label: str,
    pool_seed: int,
) -> PreparedPool:
    """Ground truth of `settings.tasks` tasks and a pool of the policy, sampled from
    `pool_seed`; one progress line on stdout, headed `label` (the setting)."""
    # One memo for the tables and every module and batch size: the weights never change
    # here, so each distinct view is scored once.
    memo = ScoreMemo()
    task_truths, truths = draw_task_truths(env_id, env_kwargs, policy, settings, memo)
    start = time.perf_counter()
    pool = sample_task_pool(env_id, env_kwargs, task_truths, policy, settings, pool_seed)
    rollout_seconds = time.perf_counter() - start
    sampled_return = float(np.mean([t.total_return for t in pool]))
    exact_return = float(np.mean([t.truth.expected_return for t in task_truths]))
    print(
        f"{label}: {len(pool)} trajectories in {rollout_seconds:.0f} s, "
        f"mean return {sampled_return:.3f} (exact {exact_return:.3f}); ground truth of "
        f"{len(task_truths)} tasks ({sum(len(t.truth.states) for t in task_truths)} states) "
        f"in {sum(t.seconds for t in task_truths):.1f} s",
        flush=True,
    )
    # In one batched pass, a view's prompt prefix shared by the modules' views; a batch
    # size after the first reads its scores from the memo.
    context = CreditContext(
        policy=policy,
        history_len=0,
        generation_cache_bytes=0,
        score_memo=memo,
        # The exact-MDP modules (oracle, hca) read the env and the rollout's sampling.
        env_id=env_id,
        env_kwargs=env_kwargs,
        sampling=None if policy is None else rollout_agent(policy, settings, settings.seed).config,
        exact_sources=exact_sources,
    )
    return PreparedPool(truths, pool, context, exact_return, sampled_return)
