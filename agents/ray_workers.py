"""Environment workers as Ray actors: one env per actor, the rollout engine unchanged.

The alternative to `agents.workers`' processes for a rollout whose envs should live on a
Ray cluster (`collect(..., env_workers="ray")`): each actor holds one `EnvServer`, the
same code that answers commands in a worker process, so the same seeds give the same
trajectories. verl-agent runs its ALFWorld envs the same way, one env per actor.

A command is an actor call whose ObjectRef stays outstanding until the reply is taken;
`RayActorPool.wait` is `ray.wait` over those refs. An actor that dies (killed, out of
memory, its node lost) fails its call with a `RayActorError`, which becomes `WorkerGone`:
the rollout drops that episode with the reason and goes on with a new actor. A hung actor
passes its deadline and is killed (`ray.kill`), as a hung worker process is.

`ray.init()` is called on first use where no Ray is connected: it joins the cluster named
by `RAY_ADDRESS`, or starts a local one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import ray
from ray.actor import ActorHandle

from creditgym.agents.workers import EnvServer, IdleWorkers, Reply, Reset, TakeStep, WorkerGone

# An env actor reserves no CPU in Ray's accounting: a rollout asks for all its actors at
# once and keeps them between calls, and an actor that cannot be placed would leave its
# episode waiting until the reset timeout. The work is there all the same; an env step is
# short next to the policy's generation, which holds the run's CPUs (or GPU).
ENV_ACTOR_CPUS = 0
# How long an idle actor may take to answer the liveness check before reuse.
PING_TIMEOUT_S = 10.0


class _EnvActor(EnvServer):
    """`EnvServer` with a liveness check, run as a Ray actor."""

    def ping(self) -> bool:
        return True


_RemoteEnvActor = ray.remote(num_cpus=ENV_ACTOR_CPUS, max_restarts=0)(_EnvActor)


@dataclass
class RayWorker:
    """One env actor and the ref of its outstanding call (`agents.workers.EnvWorker`)."""

    actor: ActorHandle
    pending: ray.ObjectRef | None = None
    reply: Reply | None = None  # the pending call's reply, once `RayActorPool.wait` took it
    dead: bool = False

    def send(self, command: Reset | TakeStep) -> None:
        if self.dead:
            raise WorkerGone("actor already dead")
        self.pending, self.reply = self.actor.handle.remote(command), None

    def receive(self) -> Reply:
        ref, reply, self.pending, self.reply = self.pending, self.reply, None, None
        if reply is not None:
            return reply
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as error:
            self.dead = True
            raise WorkerGone(f"{type(error).__name__}: {str(error).splitlines()[0]}") from error

    def poll(self) -> bool:
        if self.reply is not None:
            return True
        ready, _ = ray.wait([self.pending], timeout=0)
        return bool(ready)

    def is_alive(self) -> bool:
        """False once a call failed or the actor was killed (Ray tells no sooner)."""
        return not self.dead

    def kill(self) -> None:
        if ray.is_initialized():
            ray.kill(self.actor, no_restart=True)
        self.dead, self.pending, self.reply = True, None, None

    def close(self) -> None:
        """Close the actor's env, then end the actor."""
        if ray.is_initialized() and not self.dead:
            # Dead or stuck: killed below all the same.
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(self.actor.close.remote(), timeout=5)
        self.kill()


@dataclass
class RayActorPool(IdleWorkers):
    """The idle env actors of one env id and kwargs (`agents.workers.EnvWorkerPool`)."""

    def usable(self, worker: RayWorker) -> bool:
        # An actor killed between calls is only seen when called: check before reuse, so
        # that it does not cost the next episode.
        try:
            ray.get(worker.actor.ping.remote(), timeout=PING_TIMEOUT_S)
            return True
        except ray.exceptions.RayError:
            worker.kill()
            return False

    def new_worker(self) -> RayWorker:
        if not ray.is_initialized():
            ray.init()
        return RayWorker(_RemoteEnvActor.remote(self.env_id, self.env_kwargs))

    def wait(self, workers: Sequence[RayWorker], timeout: float) -> list[RayWorker]:
        by_ref = {worker.pending: worker for worker in workers}
        ready, rest = ray.wait(list(by_ref), num_returns=1, timeout=max(timeout, 0.0))
        if ready and rest:  # ray.wait returns num_returns refs; take every one that is done
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        # One `ray.get` for every reply that is in, instead of one per worker; a failed
        # call raises here, and then each worker's own `receive` says which.
        with contextlib.suppress(ray.exceptions.RayError):
            for ref, reply in zip(ready, ray.get(ready), strict=True):
                by_ref[ref].reply = reply
        return [by_ref[ref] for ref in ready]
