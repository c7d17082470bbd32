"""Batched rollouts: N environments in workers, their steps generated in one batch.

`collect(env_id, agent, seeds, group_size, num_envs)` plays G = `group_size` episodes of
every task (a task is a reset seed, plus optional reset options), G rollouts of one task
sharing a `group_id` as GRPO / GiGPO / HCAPO need. Each environment lives in its own
worker process (forkserver), so a slow reset (ALFWorld's planner) runs while the other
environments keep stepping: after sending a batch of steps the engine waits for those
steps, takes whatever resets have finished meanwhile, and acts on all of them in one
call. An agent with `stream()` (`agents.base.StreamingAgent`: the LLM policy) is driven
as a continuous batch instead: an env's next step joins the running generation as soon
as its observation is back, and a finished response goes to its env at once, so no slot
waits for the longest response of a round (`models.batching`). A worker that raises,
dies or exceeds its timeout loses its episode (logged with the reason, listed in
`RolloutStats.dropped`) and is replaced; the rest completes.
Healthy workers stay alive after the call and are reused by the next call with the
same env id and kwargs (`agents.workers`; `close_workers` stops them). `env_workers`
picks what a worker is: a process (default) or a Ray actor (`agents.ray_workers`, for
envs spread over a Ray cluster); both serve the env with the same code, so the same
seeds give the same trajectories (tested).

Each episode is an `agents.episode.EpisodeRecorder`, the loop `play_episode` drives too,
so for scripted and random agents the result equals `play_episode` episode by episode,
group ids included (tested). Trajectories come back in task order, replicas in order,
whatever order they finished in.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym

from creditgym.agents.base import Agent, AgentAction, StreamingAgent
from creditgym.agents.episode import EpisodeRecorder
from creditgym.agents.parsing import is_valid_action
from creditgym.agents.trajectory import Trajectory
from creditgym.agents.workers import (
    EnvWorker,
    EnvWorkerPool,
    Failed,
    Reset,
    ResetDone,
    TakeStep,
    WorkerGone,
    close_workers,
    pool_for,
)
from creditgym.envs.registry import ENVS
from creditgym.envs.seeding import REPLICA_OPTION
from creditgym.models.progress import LiveBar

# `close_workers` belongs to the rollout's interface: callers stop the workers a `collect`
# call left running without knowing the pool module.
__all__ = [
    "ENV_WORKERS",
    "EnvWorkers",
    "RolloutStats",
    "close_workers",
    "collect",
    "resolve_env_workers",
]

logger = logging.getLogger(__name__)
# Seconds between refreshes of the progress bar's steps and tokens/s (a refresh costs a
# terminal write; an LLM step on a CPU takes about this long anyway).
PROGRESS_INTERVAL_S = 1.0

# What an environment worker is: the `env_workers` option of `collect`, the trainers'
# configs and `benchmarks.run`.
EnvWorkers = Literal["auto", "process", "inline", "ray"]
# Each kind's pool, as "module:Class" imported on use: only a rollout on Ray actors imports
# Ray (a GPU machine without it still runs every process-pool rollout).
ENV_WORKERS: dict[str, str] = {
    "process": "creditgym.agents.workers:WorkerPool",
    "inline": "creditgym.agents.workers:InlinePool",
    "ray": "creditgym.agents.ray_workers:RayActorPool",
}


def resolve_env_workers(env_id: str, env_workers: str) -> str:
    """ "auto" -> "inline" for an env registered as `in_process`, else "process"; any other
    kind is returned as it is (ValueError if it is not one of ENV_WORKERS)."""
    if env_workers == "auto":
        info = ENVS.get(env_id.rpartition(":")[2])
        return "inline" if info is not None and info.in_process else "process"
    if env_workers not in ENV_WORKERS:
        valid = ", ".join(["auto", *ENV_WORKERS])
        raise ValueError(f"unknown env_workers {env_workers!r}; valid: {valid}")
    return env_workers


@dataclass(frozen=True)
class RolloutStats:
    """What one `collect` call did.

    Attributes:
        num_episodes: episodes requested (tasks x group size).
        num_trajectories: episodes completed and returned.
        num_steps: steps over the returned trajectories.
        tokens_generated: policy-generated tokens over the returned trajectories.
        valid_action_ratio: share of returned steps whose action was valid
            (`agents.parsing.is_valid_action`); 1.0 when there are no steps.
        seconds: wall-clock time of the call.
        agent_seconds: time spent inside `agent.act`.
        dropped: one "task seed / replica: reason" line per dropped episode.
    """

    num_episodes: int
    num_trajectories: int
    num_steps: int
    tokens_generated: int
    valid_action_ratio: float
    seconds: float
    agent_seconds: float
    dropped: tuple[str, ...] = ()

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per wall-clock second of the whole rollout."""
        return self.tokens_generated / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class _Task:
    """One episode to play: which task, which replica, where it goes in the result."""

    order: int  # position in the returned list
    seed: int
    options: Mapping[str, Any]
    replica: int
    key: str  # `AgentInput.episode_key`


@dataclass
class _Slot:
    """One worker and the episode it is playing (internal to `collect`)."""

    worker: EnvWorker | None = None
    task: _Task | None = None
    episode: EpisodeRecorder | None = None  # set once the reset's reply is back
    pending: str = ""  # "reset" / "step" while a reply is awaited
    deadline: float = 0.0
    ready: bool = False  # the episode waits for an action
    decision: AgentAction | None = None  # the action sent with the pending step


def _check_env_id(env_id: str) -> None:
    """ValueError (listing the registered creditgym ids) when `env_id` is unknown."""
    importlib.import_module("creditgym.envs")
    module_name, _, name = env_id.rpartition(":")
    try:
        if module_name:
            importlib.import_module(module_name)
        gym.spec(name)
    except (ImportError, gym.error.Error) as error:
        known = sorted(k for k in gym.registry if k.startswith("creditgym/"))
        raise ValueError(f"unknown env {env_id!r} ({error}); registered: {known}") from error


def collect(
    env_id: str,
    agent: Agent,
    seeds: Sequence[int],
    group_size: int = 1,
    num_envs: int = 8,
    env_kwargs: Mapping[str, Any] | None = None,
    options: Sequence[Mapping[str, Any] | None] | None = None,
    reset_timeout_s: float = 300.0,
    step_timeout_s: float = 60.0,
    reset_grace_s: float = 0.5,
    progress: bool = True,
    env_workers: EnvWorkers = "auto",
) -> tuple[list[Trajectory], RolloutStats]:
    """Play `group_size` episodes of each task with up to `num_envs` envs at once.

    Args:
        env_id: registered id (`creditgym/SysDiag-v0`) or `module:Id` (the module
            registers the id on import, gymnasium's convention).
        agent: any `agents.base.Agent`; called once per round on every env awaiting
            an action.
        seeds: one reset seed per task.
        group_size: G, rollouts per task; they share the seed and the `group_id`.
        num_envs: workers (parallel environments, and the largest batch).
        env_kwargs: keyword arguments for `gym.make`.
        options: per task, `reset` options (None: none).
        reset_timeout_s: a reset slower than this drops its episode.
        step_timeout_s: a step slower than this drops its episode.
        reset_grace_s: once one reset is done and no step is outstanding, how long to
            wait for other resets to join the same batch.
        progress: show a tqdm bar: finished episodes, elapsed time, steps played and
            generated tokens per second.
        env_workers: "process" (one worker process per env), "inline" (envs stepped in
            this process; for pure in-memory envs), "ray" (one Ray actor per env, on the
            Ray cluster `ray.init()` joins), or "auto": inline for envs registered as
            `in_process` (`envs.registry.EnvInfo`), else process.
    Returns:
        Completed trajectories in task order (replicas in order) and `RolloutStats`.
    """
    if group_size < 1 or num_envs < 1:
        raise ValueError(f"group_size and num_envs must be >= 1 ({group_size}, {num_envs})")
    if options is not None and len(options) != len(seeds):
        raise ValueError(f"options has {len(options)} entries for {len(seeds)} seeds")
    _check_env_id(env_id)
    env_workers = resolve_env_workers(env_id, env_workers)
    start = time.perf_counter()
    queue = deque(
        _Task(
            order=task * group_size + replica,
            seed=int(seed),
            # Replicas share the task (seed, options) but not the env's exogenous noise.
            options={
                **(options[task] if options is not None and options[task] else {}),
                REPLICA_OPTION: replica,
            },
            replica=replica,
            key=f"{task}/{seed}/{replica}",
        )
        for task, seed in enumerate(seeds)
        for replica in range(group_size)
    )
    module, pool_class = ENV_WORKERS[env_workers].split(":")
    kind: type[EnvWorkerPool] = getattr(importlib.import_module(module), pool_class)
    pool = pool_for(env_id, env_kwargs or {}, kind)
    rollout = _Rollout(env_id, agent, queue, pool, num_envs, progress, start)
    try:
        rollout.play(reset_timeout_s, step_timeout_s, reset_grace_s)
    finally:
        rollout.close()
    return rollout.result()


class _Rollout:
    """The state of one `collect` call and the steps of its loop, in the order they run:
    fill free slots with resets, act on the ready episodes, send their steps, wait for
    replies (`receive` records them, `drop` gives an episode up), until the queue is empty
    and no reply is outstanding."""

    def __init__(
        self,
        env_id: str,
        agent: Agent,
        queue: deque[_Task],
        pool: EnvWorkerPool,
        num_envs: int,
        progress: bool,
        start: float,
    ) -> None:
        self.env_id, self.agent, self.queue, self.pool = env_id, agent, queue, pool
        self.num_episodes = len(queue)
        self.slots = [_Slot() for _ in range(min(num_envs, self.num_episodes))]
        self.finished: dict[int, Trajectory] = {}
        self.dropped: list[str] = []
        self.agent_seconds = 0.0
        # Agents that take steps one by one (LLMs: continuous batching) get each env's
        # next step as soon as its observation is back; others act once per round.
        self.stream = agent.stream() if isinstance(agent, StreamingAgent) else None
        self.bar = LiveBar(
            total=self.num_episodes, desc=f"rollout {env_id}", disable=not progress, leave=False
        )
        # Episodes of an LLM on a CPU end minutes apart: steps and tokens show life in between.
        self.steps_played, self.tokens_generated, self.shown_at = 0, 0, 0.0
        self.start = start  # `time.perf_counter()` when the call began

    def free(self, slot: _Slot) -> None:
        slot.task, slot.episode, slot.pending, slot.ready = None, None, "", False
        self.bar.update(1)

    def drop(self, slot: _Slot, reason: str) -> None:
        label = f"seed {slot.task.seed} / replica {slot.task.replica}"
        logger.warning("dropped episode (%s) of %s: %s", label, self.env_id, reason)
        self.dropped.append(f"{label}: {reason.splitlines()[0]}")
        _stop_worker(slot)
        self.free(slot)

    def send(self, slot: _Slot, command: Reset | TakeStep, timeout_s: float) -> None:
        try:
            slot.worker.send(command)
        except WorkerGone as gone:
            self.drop(slot, f"worker gone ({gone})")
            return
        slot.pending = "reset" if isinstance(command, Reset) else "step"
        slot.deadline, slot.ready = time.monotonic() + timeout_s, False

    def receive(self, slot: _Slot) -> None:
        try:
            reply = slot.worker.receive()
        except WorkerGone as gone:
            self.drop(slot, f"worker died during {slot.pending} ({gone})")
            return
        if isinstance(reply, Failed):
            self.drop(slot, f"env error during {slot.pending}: {reply.reason}")
            return
        if isinstance(reply, ResetDone):
            slot.episode = EpisodeRecorder(
                reply.env_id, slot.task.seed, reply.observation, reply.info, key=slot.task.key
            )
        else:
            slot.episode.record(
                slot.decision,
                reply.observation,
                reply.reward,
                reply.terminated,
                reply.truncated,
                reply.info,
            )
            if slot.episode.done:
                self.finished[slot.task.order] = slot.episode.trajectory(self.agent.name)
                self.free(slot)
                return
        slot.pending, slot.ready = "", True

    def decide(self) -> list[tuple[_Slot, AgentAction]]:
        """The actions of the episodes waiting for one (a streaming agent: those whose
        generation finished; its newly ready steps join the running batch)."""
        ready = [slot for slot in self.slots if slot.ready]
        act_start = time.perf_counter()
        if self.stream is not None:
            for index, slot in enumerate(self.slots):  # ready steps join at the next advance
                if slot.ready:
                    self.stream.add(index, slot.episode.agent_input())
                    slot.ready = False
            decided = [(self.slots[index], action) for index, action in self.stream.advance()]
        elif ready:
            decisions = self.agent.act([slot.episode.agent_input() for slot in ready])
            if len(decisions) != len(ready):
                raise RuntimeError(
                    f"agent {self.agent.name!r} returned {len(decisions)} actions for "
                    f"{len(ready)} inputs"
                )
            decided = list(zip(ready, decisions, strict=True))
        else:
            decided = []
        self.agent_seconds += time.perf_counter() - act_start
        return decided

    def play(self, reset_timeout_s: float, step_timeout_s: float, reset_grace_s: float) -> None:
        """Run the loop until every episode finished or was dropped."""
        while True:
            for slot in self.slots:
                if slot.task is None and self.queue:
                    if slot.worker is None:
                        slot.worker = self.pool.take()
                    slot.task = self.queue.popleft()
                    self.send(slot, Reset(slot.task.seed, slot.task.options), reset_timeout_s)
            decided = self.decide()
            for slot, decision in decided:
                slot.decision = decision
                self.send(slot, TakeStep(decision.action), step_timeout_s)
                self.steps_played += 1
                self.tokens_generated += len(decision.action_token_ids)
            if decided and time.perf_counter() - self.shown_at >= PROGRESS_INTERVAL_S:
                self.shown_at = time.perf_counter()
                rate = self.tokens_generated / (self.shown_at - self.start)
                self.bar.set_postfix_str(f"{self.steps_played} steps, {rate:.1f} tok/s")
            busy = [slot for slot in self.slots if slot.pending]
            generating = self.stream is not None and len(self.stream) > 0
            if not busy:
                if self.queue or generating:
                    continue
                return
            if generating:
                # Rows are decoding: wait for the (short) steps just sent, so an
                # episode's next step joins at a fixed point of the generation, but
                # never for a reset; those join whenever they are done.
                stepping = [slot for slot in busy if slot.pending == "step"]
                _await_replies(self.pool, stepping, self.receive, self.drop, 0.0)
                _poll_resets(busy, self.receive, self.drop)
            else:
                _await_replies(self.pool, busy, self.receive, self.drop, reset_grace_s)

    def close(self) -> None:
        """Close the bar; keep healthy idle workers for the next call, stop the rest."""
        self.bar.close()
        for slot in self.slots:
            # A worker with a reply outstanding would answer the next call's first command.
            if slot.worker is not None and slot.worker.is_alive() and not slot.pending:
                self.pool.release(slot.worker)
            else:
                _stop_worker(slot)

    def result(self) -> tuple[list[Trajectory], RolloutStats]:
        """The finished trajectories in task order, and the call's `RolloutStats`."""
        trajectories = [self.finished[order] for order in sorted(self.finished)]
        all_steps = [step for trajectory in trajectories for step in trajectory.steps]
        stats = RolloutStats(
            num_episodes=self.num_episodes,
            num_trajectories=len(trajectories),
            num_steps=len(all_steps),
            tokens_generated=sum(t.num_action_tokens for t in trajectories),
            valid_action_ratio=(
                sum(is_valid_action(step) for step in all_steps) / len(all_steps)
                if all_steps
                else 1.0
            ),
            seconds=time.perf_counter() - self.start,
            agent_seconds=self.agent_seconds,
            dropped=tuple(self.dropped),
        )
        return trajectories, stats


def _await_replies(
    pool: EnvWorkerPool,
    busy: list[_Slot],
    receive: Callable[[_Slot], None],
    drop: Callable[[_Slot, str], None],
    reset_grace_s: float,
) -> None:
    """Wait for the replies that form the next batch; drop slots past their deadline.

    With steps outstanding: wait for all of them (steps are short), then take any
    resets that finished meanwhile. With only resets outstanding: wait for the first,
    then up to `reset_grace_s` more for the others, so that resets finishing close
    together share one batched `act` while a slow one does not stall the rest.
    """
    stepping = [slot for slot in busy if slot.pending == "step"]
    waiting_for = stepping or list(busy)
    grace_end = None
    while waiting_for:
        limit = min(slot.deadline for slot in waiting_for)
        if grace_end is not None:
            limit = min(limit, grace_end)
        answered = pool.wait([slot.worker for slot in waiting_for], limit - time.monotonic())
        now = time.monotonic()
        for slot in list(waiting_for):
            if any(slot.worker is worker for worker in answered):
                receive(slot)
                waiting_for.remove(slot)
            elif now >= slot.deadline:
                drop(slot, f"timeout: no reply to {slot.pending} within the limit")
                waiting_for.remove(slot)
        if not stepping:
            if grace_end is None and any(slot.ready for slot in busy):
                grace_end = now + reset_grace_s
            if grace_end is not None and now >= grace_end:
                break
    for slot in busy:
        if slot.pending and slot.worker.poll():
            receive(slot)


def _poll_resets(
    busy: list[_Slot], receive: Callable[[_Slot], None], drop: Callable[[_Slot, str], None]
) -> None:
    """Take the resets that are done; drop those past their deadline; never wait."""
    now = time.monotonic()
    for slot in busy:
        if slot.pending != "reset":
            continue
        if slot.worker.poll():
            receive(slot)
        elif now >= slot.deadline:
            drop(slot, f"timeout: no reply to {slot.pending} within the limit")


def _stop_worker(slot: _Slot) -> None:
    """Kill a slot's worker (hung, broken, or mid-command) and forget it."""
    if slot.worker is not None:
        slot.worker.kill()
        slot.worker = None
