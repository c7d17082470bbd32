"""Environment workers for `agents.rollout`: one env per worker, typed messages.

The parent sends `Reset` / `TakeStep` / `Close`; a worker answers a `Reset` with
`ResetDone`, a `TakeStep` with `StepDone`, and either with `Failed` when the env raised
(the worker stays up; the parent drops that episode). The env is built on the first
reset, so a failing constructor costs one episode, not the run. `EnvServer` is that
answering side; it runs in a worker process here and in a Ray actor in
`agents.ray_workers`, both behind the `EnvWorker` / `EnvWorkerPool` protocols the rollout
engine drives. A worker that dies or cannot be reached raises `WorkerGone`.

Workers run under forkserver and stay alive between `collect` calls: `WorkerPool` keeps
the idle ones per env id and kwargs, so a trainer calling `collect` every iteration
starts them once. A worker forks from the server that preloaded `agents.workers` and
`envs`, and is started without re-importing the caller's main module
(`main_module_hidden`), so starting one costs milliseconds, not the torch import; an env
registered only in the caller's main script is therefore unknown to workers (name it
`module:Id`, gymnasium's convention, and the worker imports that module). `close_workers`
ends them (and runs at exit).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import multiprocessing as mp
import signal
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

import gymnasium as gym

from creditgym.agents.episode import env_name, jsonable


@dataclass(frozen=True)
class Reset:
    """Parent -> worker: reset the env with this seed and these options."""

    seed: int
    options: Mapping[str, Any] | None


@dataclass(frozen=True)
class TakeStep:
    """Parent -> worker: step the env with this action."""

    action: str


@dataclass(frozen=True)
class Close:
    """Parent -> worker: close the env and exit."""


@dataclass(frozen=True)
class ResetDone:
    """Worker -> parent: the reset's observation and (JSON-serialisable) info."""

    observation: str
    info: dict[str, Any]
    env_id: str  # `agents.episode.env_name` of the worker's env


@dataclass(frozen=True)
class StepDone:
    """Worker -> parent: what `env.step` returned, info JSON-serialisable."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


@dataclass(frozen=True)
class Failed:
    """Worker -> parent: the env raised; one-line reason, then the traceback."""

    reason: str


Command = Reset | TakeStep | Close
Reply = ResetDone | StepDone | Failed


class WorkerGone(Exception):
    """The worker died or cannot be reached; the message says how (exit code, Ray error)."""


def _make_env(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env:
    importlib.import_module("creditgym.envs")  # registers the creditgym ids in this process
    return gym.make(env_id, **env_kwargs)


class EnvServer:
    """One env, built on the first `Reset`, answering commands with replies.

    Every env failure becomes a `Failed` reply, so the server stays up for the next
    episode; the caller decides what a failed episode costs (the rollout drops it)."""

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self.env: gym.Env | None = None

    def handle(self, command: Reset | TakeStep) -> Reply:
        """The reply to one `Reset` or `TakeStep`."""
        try:
            if isinstance(command, Reset):
                if self.env is None:
                    self.env = _make_env(self.env_id, self.env_kwargs)
                observation, info = self.env.reset(seed=command.seed, options=command.options)
                return ResetDone(observation, jsonable(info), env_name(self.env))
            observation, reward, terminated, truncated, info = self.env.step(command.action)
            return StepDone(
                observation, float(reward), bool(terminated), bool(truncated), jsonable(info)
            )
        except Exception as error:  # any env failure is reported, the server stays up
            reason = f"{type(error).__name__}: {error}".splitlines()[0]
            return Failed(f"{reason}\n{traceback.format_exc()}")

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def worker_main(conn: Connection, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    """Worker process loop: serve `Reset` / `TakeStep` until `Close` (module docstring)."""
    # Ctrl-C reaches the whole process group; the parent ends the run and stops its
    # workers, so a worker printing its own KeyboardInterrupt traceback is only noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = EnvServer(env_id, env_kwargs)
    while True:
        command: Command = conn.recv()
        if isinstance(command, Close):
            break
        conn.send(server.handle(command))
    server.close()
    conn.close()


class EnvWorker(Protocol):
    """What the rollout engine needs of one worker: one command outstanding at a time."""

    def send(self, command: Reset | TakeStep) -> None:
        """Send a command; raises `WorkerGone` when the worker is known to be gone."""

    def receive(self) -> Reply:
        """The reply to the outstanding command; raises `WorkerGone` if the worker died."""

    def poll(self) -> bool:
        """Whether `receive` would return (or raise) at once."""

    def is_alive(self) -> bool: ...

    def kill(self) -> None:
        """End the worker now (hung, broken, or mid-command)."""

    def close(self) -> None:
        """End the worker politely (its env closed), killing it if it does not end."""


class EnvWorkerPool(Protocol):
    """Workers of one env id and kwargs, kept between `collect` calls."""

    def take(self) -> EnvWorker:
        """An idle live worker, or a new one."""

    def release(self, worker: EnvWorker) -> None:
        """Keep a healthy worker, with no command outstanding, for the next call."""

    def wait(self, workers: Sequence[EnvWorker], timeout: float) -> list[EnvWorker]:
        """Block up to `timeout` s until one of `workers` has a reply; those that have."""

    def close(self) -> None:
        """Stop the idle workers."""


@dataclass
class Worker:
    """One worker process and the parent's end of its pipe."""

    process: BaseProcess
    conn: Connection

    def send(self, command: Command) -> None:
        """Send `command`; raises `WorkerGone` when the worker is gone."""
        try:
            self.conn.send(command)
        except (BrokenPipeError, OSError) as error:
            raise WorkerGone(f"pipe closed ({type(error).__name__})") from error

    def receive(self) -> Reply:
        """The worker's reply; raises `WorkerGone` (with the exit code) when it died."""
        try:
            return self.conn.recv()
        except (EOFError, OSError) as error:
            self.process.join(timeout=1)  # let the exit code arrive
            raise WorkerGone(f"exit code {self.process.exitcode}") from error

    def poll(self) -> bool:
        return self.conn.poll()

    def is_alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        """Kill the worker (hung, broken, or mid-command) and close the pipe."""
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not within 5 s."""
        try:
            self.conn.send(Close())
            self.process.join(timeout=5)
        except (BrokenPipeError, OSError):
            pass  # already gone; killed below if still alive
        self.kill()


@dataclass
class IdleWorkers:
    """The idle workers of one env id and kwargs, kept between `collect` calls.

    The part every `EnvWorkerPool` shares; a kind says how a new worker is made
    (`new_worker`) and whether a kept one can still serve (`usable`)."""

    env_id: str
    env_kwargs: dict[str, Any]
    idle: list[Any] = field(default_factory=list)

    def take(self) -> Any:
        """An idle worker that can still serve, or a new one."""
        while self.idle:
            worker = self.idle.pop()
            if self.usable(worker):
                return worker
        return self.new_worker()

    def usable(self, worker: Any) -> bool:
        """Whether a kept worker can serve again (one that cannot is cleaned up here)."""
        return worker.is_alive()

    def new_worker(self) -> Any:
        raise NotImplementedError

    def release(self, worker: Any) -> None:
        """Keep a healthy worker, with no command outstanding, for the next call."""
        self.idle.append(worker)

    def close(self) -> None:
        """Stop the idle workers."""
        for worker in self.idle:
            worker.close()
        self.idle.clear()


@dataclass
class WorkerPool(IdleWorkers):
    """The idle worker processes of one env id and kwargs."""

    def usable(self, worker: Worker) -> bool:
        if worker.is_alive():
            return True
        worker.conn.close()
        return False

    def new_worker(self) -> Worker:
        context = mp.get_context("forkserver")
        # Workers fork from a server that has imported these once (effective only before
        # the server's first start), instead of paying the torch import in every worker.
        context.set_forkserver_preload(["creditgym.agents.workers", "creditgym.envs"])
        parent_conn, child_conn = context.Pipe()
        process = context.Process(
            target=worker_main, args=(child_conn, self.env_id, self.env_kwargs), daemon=True
        )
        with main_module_hidden():
            process.start()
        child_conn.close()
        return Worker(process, parent_conn)

    def wait(self, workers: Sequence[Worker], timeout: float) -> list[Worker]:
        """Block up to `timeout` s until one of `workers` has a reply; those that have."""
        ready = wait([worker.conn for worker in workers], timeout=max(timeout, 0.0))
        return [worker for worker in workers if worker.conn in ready]


class InlineWorker:
    """An env served in the caller's process: `send` computes the reply at once.

    For envs that are pure in-memory Python (`EnvInfo.in_process`: KeyDoor, Umbrella): no
    worker start-up and no pipe round trip per step, which for a 32-rollout KeyDoor
    iteration of `small` was a third of the rollout (benchmarks/perf/bench_small.py). No
    timeout can stop such an env, so only envs that cannot hang qualify.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
        self.server = EnvServer(env_id, env_kwargs)
        self.reply: Reply | None = None
        self.closed = False

    def send(self, command: Reset | TakeStep) -> None:
        if self.closed:
            raise WorkerGone("inline env closed")
        self.reply = self.server.handle(command)

    def receive(self) -> Reply:
        reply, self.reply = self.reply, None
        if reply is None:
            raise WorkerGone("no command outstanding")
        return reply

    def poll(self) -> bool:
        return self.reply is not None

    def is_alive(self) -> bool:
        return not self.closed

    def kill(self) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.server.close()
        self.closed, self.reply = True, None


@dataclass
class InlinePool(IdleWorkers):
    """The idle in-process envs of one env id and kwargs."""

    def new_worker(self) -> InlineWorker:
        return InlineWorker(self.env_id, self.env_kwargs)

    def wait(self, workers: Sequence[InlineWorker], timeout: float) -> list[InlineWorker]:
        """Those of `workers` with a reply: all that were sent one (replies come in `send`)."""
        return [worker for worker in workers if worker.poll()]


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """Start a worker without making it import the caller's main module.

    multiprocessing tells a new process to import `__main__` (by its `__spec__` name, or
    else its `__file__`) so that objects defined there unpickle; a worker needs only
    `worker_main` and the env, both importable by name. Re-importing a main module such
    as `benchmarks.sweep` costs a worker the torch / transformers import: seconds on an
    idle machine, minutes on a loaded one, where resets then timed out and whole
    evaluations were dropped. Hiding both attributes while `start()` builds the
    preparation data makes the worker a plain fork of the preloaded forkserver.
    """
    main = sys.modules["__main__"]
    saved = {key: main.__dict__[key] for key in ("__spec__", "__file__") if key in main.__dict__}
    main.__dict__["__spec__"] = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


_POOLS: dict[str, EnvWorkerPool] = {}


def pool_for(
    env_id: str, env_kwargs: Mapping[str, Any], kind: type[EnvWorkerPool] = WorkerPool
) -> EnvWorkerPool:
    """The pool of `kind` (worker processes, Ray actors) for `env_id` with `env_kwargs`
    (made on first use)."""
    env_kwargs = dict(env_kwargs)
    key = f"{kind.__qualname__}|{env_id}|{sorted(env_kwargs.items())!r}"
    if key not in _POOLS:
        _POOLS[key] = kind(env_id, env_kwargs)
    return _POOLS[key]


def close_workers() -> None:
    """Stop every idle worker kept for reuse between `collect` calls (runs at exit too)."""
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()


atexit.register(close_workers)
