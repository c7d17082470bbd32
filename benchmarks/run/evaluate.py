"""Evaluation for `creditgym run`: the fixed evaluation episodes of every
requested split, played by a scripted agent or an LLM policy and appended one record at a
time (a killed run resumes with exactly the missing ones), and their summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm import tqdm

from creditgym import envs
from creditgym.agents.atomic import atomic_write_bytes, cut_torn_tail
from creditgym.agents.episode import play_episode
from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import Trajectory
from creditgym.benchmarks.run.build import SCRIPTED_AGENTS, make_env
from creditgym.benchmarks.run.identity import method_label
from creditgym.benchmarks.run.plan import EVAL_SEED_BASE, RunPlan, episode_agent_seed
from creditgym.envs.registry import EvalSplit
from creditgym.models.registry import LoadedModel
from creditgym.report import records


def evaluate(plan: RunPlan, run_dir: Path, policy: LoadedModel | None, train_step: int) -> None:
    """Play the missing evaluation episodes of every requested split, appending each.

    Scripted agents go one episode at a time, LLM policies in batches of
    `eval_batch_size`; every finished episode is on disk before the next batch starts.
    The batches are fixed (episodes 0..B-1, B..2B-1, ...), and a batch with any episode
    missing is played whole, writing only the missing ones: an LLM's episodes depend on
    the batch they are sampled in (its agent seed, the rows decoded beside them), so a
    batch cut short by a kill while its episodes were being written, or extended by a
    larger --eval-episodes, still writes what an uninterrupted run writes.
    """
    cfg = plan.config
    todo = missing_episodes(plan, run_dir)
    drop_unrecorded_trajectories(run_dir)
    method = method_label(plan)
    batch = 1 if policy is None else cfg.eval_batch_size
    with (
        records.JsonlAppender(run_dir / records.EVAL_TRAJECTORIES_FILE) as trajectory_sink,
        records.JsonlAppender(run_dir / records.EPISODES_FILE) as sink,
        tqdm(total=len(todo), desc="evaluate", unit="ep", disable=not todo) as progress,
    ):
        for split in plan.splits:
            missing = {index for s, index in todo if s.name == split.name}
            if not missing:
                continue
            env = make_env(plan.env_id, plan.env_kwargs(split)) if policy is None else None
            try:
                for start in range(0, cfg.eval_episodes, batch):
                    chunk = list(range(start, min(start + batch, cfg.eval_episodes)))
                    if missing.isdisjoint(chunk):
                        continue
                    played = (
                        scripted_episodes(plan, env, split.name, chunk)
                        if env is not None
                        else policy_episodes(plan, policy, split, chunk)
                    )
                    for index, trajectory in played:
                        if index not in missing:  # written before, by the same batch
                            continue
                        record = episode_record(trajectory, index, split.name, method, train_step)
                        # Trajectory first: the episode record is what marks the episode done.
                        trajectory_sink.append(
                            records.eval_trajectory_record(trajectory, index, split.name)
                        )
                        sink.append(record.to_dict())
                        progress.update(1)
            finally:
                if env is not None:
                    env.close()


def drop_unrecorded_trajectories(run_dir: Path) -> None:
    """Remove the evaluation trajectories of episodes that have no episode record.

    A kill between an episode's trajectory line and its episode record (the record is
    written second and marks the episode done) leaves the trajectory alone; the episode is
    played again on resume and its trajectory written again, so keeping the first line
    would leave eval_trajectories.jsonl unlike an uninterrupted run's. The kept lines are
    rewritten byte for byte, atomically."""
    path = run_dir / records.EVAL_TRAJECTORIES_FILE
    if not path.exists():
        return
    cut_torn_tail(path)
    done = {(r.split, r.index) for r in records.read_episodes(run_dir)}
    lines = path.read_bytes().splitlines(keepends=True)
    kept = [line for line in lines if _episode_key(json.loads(line)) in done]
    if len(kept) < len(lines):
        atomic_write_bytes(path, b"".join(kept))


def _episode_key(trajectory_record: Mapping[str, Any]) -> tuple[str, int]:
    return trajectory_record["split"], trajectory_record["index"]


def missing_episodes(plan: RunPlan, run_dir: Path) -> list[tuple[EvalSplit, int]]:
    """(split, episode index) pairs requested by `plan` and not yet in episodes.jsonl."""
    done = {(r.split, r.index) for r in records.read_episodes(run_dir)}
    return [
        (split, index)
        for split in plan.splits
        for index in range(plan.config.eval_episodes)
        if (split.name, index) not in done
    ]


def is_finished(plan: RunPlan) -> bool:
    """The run folder of `plan` holds done.json and every requested episode."""
    run_dir = plan.run_dir
    return (run_dir / records.DONE_FILE).exists() and not missing_episodes(plan, run_dir)


def scripted_episodes(
    plan: RunPlan, env: gym.Env, split: str, indices: Sequence[int]
) -> list[tuple[int, Trajectory]]:
    """Scripted agents play one episode at a time in-process (no model, no workers)."""
    cfg = plan.config
    played = []
    for index in indices:
        agent = SCRIPTED_AGENTS[cfg.model](episode_agent_seed(cfg.seed, split, index))
        played.append((index, play_episode(env, agent, seed=EVAL_SEED_BASE + index)))
    return played


def policy_episodes(
    plan: RunPlan, policy: LoadedModel, split: EvalSplit, indices: Sequence[int]
) -> list[tuple[int, Trajectory]]:
    """Evaluation episodes `indices` of `split`, played as one batch."""
    index_of_seed = {EVAL_SEED_BASE + index: index for index in indices}
    trajectories = policy_rollouts(
        plan,
        policy,
        split,
        seeds=list(index_of_seed),
        group_size=1,
        temperature=plan.config.eval_temperature,
        agent_seed=episode_agent_seed(plan.config.seed, split.name, indices[0]),
    )
    # A crashed env drops its trajectory; that episode is played again on the next run.
    return sorted(((index_of_seed[t.seed], t) for t in trajectories), key=lambda pair: pair[0])


def policy_rollouts(
    plan: RunPlan,
    policy: LoadedModel,
    split: EvalSplit,
    seeds: Sequence[int],
    group_size: int,
    temperature: float,
    agent_seed: int,
) -> list[Trajectory]:
    """An LLM policy plays `group_size` episodes per seed together (batched rollouts)."""
    cfg = plan.config
    agent = LLMAgent(
        policy,
        temperature=temperature,
        max_new_tokens=cfg.max_new_tokens,
        history_len=plan.history_len,
        constrained=cfg.constrained,
        seed=agent_seed,
    )
    trajectories, _ = collect(
        plan.env_id,
        agent,
        seeds=list(seeds),
        group_size=group_size,
        num_envs=len(seeds) * group_size,
        env_workers=cfg.env_workers,
        env_kwargs=plan.env_kwargs(split),
    )
    return trajectories


def episode_record(
    trajectory: Trajectory, index: int, split: str, method: str, train_step: int
) -> records.EpisodeRecord:
    task_type_key = envs.ENVS[trajectory.env_id].task_type_key
    last_info = trajectory.steps[-1].info if trajectory.steps else {}
    return records.EpisodeRecord(
        index=index,
        env=trajectory.env_id,
        split=split,
        task_id=trajectory.task_id,
        task_type=str(last_info.get(task_type_key, "")) if task_type_key else "",
        seed=trajectory.seed,
        method=method,
        success=trajectory.success,
        episode_return=trajectory.total_return,
        steps=trajectory.length,
        truncated=trajectory.truncated,
        tokens=trajectory.num_action_tokens,
        train_step=train_step,
    )


def summarize(episodes: Sequence[records.EpisodeRecord]) -> list[dict[str, Any]]:
    """Per split: episodes, success % with standard error, return, length, tokens."""
    rows = []
    for split in sorted({e.split for e in episodes}):
        chosen = [e for e in episodes if e.split == split]
        n = len(chosen)
        rate = sum(e.success for e in chosen) / n
        rows.append(
            {
                "split": split,
                "episodes": n,
                "success_pct": 100 * rate,
                "success_se_pct": 100 * math.sqrt(rate * (1 - rate) / n),
                "mean_return": sum(e.episode_return for e in chosen) / n,
                "mean_steps": sum(e.steps for e in chosen) / n,
                "truncated_pct": 100 * sum(e.truncated for e in chosen) / n,
                "tokens_per_episode": sum(e.tokens for e in chosen) / n,
            }
        )
    return rows


def format_summary(run: str, method: str, rows: Sequence[Mapping[str, Any]]) -> str:
    header = (
        f"{'split':<22}{'episodes':>9}{'success %':>16}{'return':>9}"
        f"{'steps':>8}{'trunc %':>9}{'tokens':>9}"
    )
    lines = [f"run {run}  method {method}", header, "-" * len(header)]
    for row in rows:
        success = f"{row['success_pct']:.1f} ± {row['success_se_pct']:.1f}"
        lines.append(
            f"{row['split']:<22}{row['episodes']:>9}{success:>16}{row['mean_return']:>9.3f}"
            f"{row['mean_steps']:>8.1f}{row['truncated_pct']:>9.1f}{row['tokens_per_episode']:>9.1f}"
        )
    return "\n".join(lines)
