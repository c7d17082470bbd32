"""What Ray costs on one machine: the sweep executor and the env actors against the local way.

Sweep: the same grid of `--runs` runs (by default the random agent on SysDiag, `--episodes`
evaluation episodes each; `--sweep-model small --sweep-steps 5` trains each with GRPO
first, runs of a real length) run by `benchmarks.sweep` with `--executor local` and with
`--executor ray` into fresh folders, in this process; prints wall seconds of each and
the ratio ray / local, with Ray's start-up (`ray.init`, a local Ray) apart and included.
The Ray tasks run in worker processes that import `benchmarks.run` first (torch
included), once per worker: the grid is swept on Ray twice, into two fresh folders, and
the second ("warm") sweep's ratio is the overhead per run that is left once the workers
are up. On a 2-core machine two runs also go at once where the local executor runs one
after another.

Rollouts: `agents.rollout.collect` plays `--episodes-per-env` episodes per env at each
`--num-envs`, on worker processes, then on Ray actors (one kind's workers stopped before
the other's start: 32 Ray actors hold about 9 GB together), each `--repeats` times after
a first call that starts the workers (timed apart); prints env steps per second, best of
the repeats, and the ratio actors / processes. `--policy expert` (default) generates
nothing, so env traffic is all the time there is: the worst case for any worker
overhead; `--policy small` (or another model) puts an LLM's generation in the loop, as
in training. Target: both ratios within 10 % of 1.

    python -m creditgym.benchmarks.perf.bench_ray          # 4 runs; 8 and 32 envs
    # runs of a real length (small trained 5 iterations on KeyDoor), one at a time on Ray:
    python -m creditgym.benchmarks.perf.bench_ray --sweep-model small --sweep-env keydoor \
        --sweep-steps 5 --cpus-per-run 2 --num-envs 8 --repeats 1
    python -m creditgym.benchmarks.perf.bench_ray --no-sweep --policy small --env keydoor
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import ray

from creditgym.agents.base import Agent, ExpertAgent
from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import close_workers, collect
from creditgym.benchmarks import sweep
from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import Stopwatch, machine_state
from creditgym.envs import SHORT_NAMES
from creditgym.models.registry import ModelUnavailableError, load_model


@dataclass(frozen=True)
class BenchArgs:
    """Time the Ray sweep executor and Ray env actors against the local executor and
    worker processes."""

    runs: int = 4
    """Runs in the sweep grid (seeds 0..runs-1)."""
    episodes: int = 20
    """Evaluation episodes per sweep run."""
    sweep_model: str = "random"
    """Who the sweep's runs evaluate (and train, with --sweep-steps): random, or a model
    such as small."""
    sweep_env: str = "sysdiag"
    """Env of the sweep's runs (a short name)."""
    sweep_steps: int = 0
    """Training iterations of each sweep run (GRPO); 0: evaluation only."""
    cpus_per_run: float = 1.0
    """Ray CPUs per sweep run; 2 on a 2-core machine runs one at a time, as the local
    executor does, so the ratio is the executor's own overhead."""
    num_envs: tuple[int, ...] = (8, 32)
    """Parallel environments of the rollout comparison, one row each."""
    episodes_per_env: int = 4
    """Episodes each env plays in one timed rollout."""
    repeats: int = 3
    """Timed rollouts per worker kind and env count (best one kept)."""
    cpus: int | None = None
    """CPUs of the local Ray; unset: every core of the machine."""
    sweep: bool = True
    """Time the sweep executors (`--no-sweep`: the rollouts only)."""
    policy: str = "expert"
    """Who acts in the rollouts: `expert` (scripted) or a model name (e.g. small)."""
    env: str = "sysdiag"
    """Env of the rollouts (a short name of `envs.SHORT_NAMES`)."""
    max_steps: int = 5
    """Step limit of a rollout episode."""


def sweep_file(folder: Path, args: BenchArgs) -> Path:
    path = folder / "sweep.toml"
    credit = "grpo" if args.sweep_steps else "none"
    training = f"steps = {args.sweep_steps}\ntasks_per_step = 4\n" if args.sweep_steps else ""
    path.write_text(
        f'[common]\nenv = "{args.sweep_env}"\ncredit = "{credit}"\nmodel = "{args.sweep_model}"\n'
        f"eval_episodes = {args.episodes}\nsample_group_size = 0\n{training}"
        f"[[grid]]\nseed = {list(range(args.runs))}\n"
    )
    return path


def time_sweep(config: Path, out: Path, executor: str, cpus_per_run: float = 1.0) -> float:
    argv = ["--config", str(config), "--out", str(out), "--executor", executor, "--no-leaderboard"]
    if executor == "ray":
        argv += ["--cpus-per-run", str(cpus_per_run)]
    watch = Stopwatch()
    with watch:
        code = sweep.main(argv)
    if code != 0:
        raise SystemExit(f"error: the {executor} sweep failed (exit status {code})")
    return watch.wall_s


def steps_per_second(
    args: BenchArgs, agent: Agent, env_workers: str, num_envs: int, episodes: int
) -> float:
    """Env steps per wall second of one rollout of `episodes` episodes."""
    _, stats = collect(
        SHORT_NAMES[args.env],
        agent,
        list(range(episodes)),
        num_envs=num_envs,
        env_kwargs={"max_steps": args.max_steps},
        progress=False,
        env_workers=env_workers,
    )
    if stats.dropped:
        raise SystemExit(f"error: {env_workers} rollout dropped episodes: {stats.dropped[0]}")
    return stats.num_steps / stats.seconds


def main(args: BenchArgs) -> None:
    if args.runs < 1 or args.episodes < 1 or args.repeats < 1 or args.episodes_per_env < 1:
        raise SystemExit("error: --runs, --episodes, --repeats, --episodes-per-env must be >= 1")
    if not args.num_envs or min(args.num_envs) < 1:
        raise SystemExit("error: --num-envs must be >= 1")
    if args.sweep_steps < 0 or args.cpus_per_run <= 0:
        raise SystemExit("error: --sweep-steps must be >= 0 and --cpus-per-run > 0")
    if args.env not in SHORT_NAMES or args.sweep_env not in SHORT_NAMES:
        raise SystemExit(
            f"error: --env / --sweep-env must be one of {', '.join(sorted(SHORT_NAMES))}"
        )
    logging.basicConfig(level=logging.WARNING)
    agent: Agent = ExpertAgent()
    if args.policy != "expert":
        try:
            # Seeded per episode: every repeat and worker kind generates the same tokens.
            agent = LLMAgent(load_model(args.policy), max_new_tokens=16, seed=0)
        except ModelUnavailableError as error:
            raise SystemExit(f"error: {error}") from None
    print(machine_state(), flush=True)
    if args.sweep:
        time_sweeps(args)  # starts the local Ray, timing it
    else:
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    print(
        f"rollouts of {args.policy} on {args.env}, {args.max_steps}-step episodes\n"
        f"{'envs':>5} {'episodes':>8} {'start proc s':>12} {'start ray s':>11} "
        f"{'proc steps/s':>12} {'ray steps/s':>11} {'ray / proc':>10}"
    )
    for num_envs in args.num_envs:
        episodes = num_envs * args.episodes_per_env
        starts, best = {}, {}
        for kind in ("process", "ray"):
            start = time.perf_counter()  # the first call starts the workers: timed apart
            steps_per_second(args, agent, kind, num_envs, num_envs)
            starts[kind] = time.perf_counter() - start
            best[kind] = max(
                steps_per_second(args, agent, kind, num_envs, episodes) for _ in range(args.repeats)
            )
            close_workers()
        print(
            f"{num_envs:>5} {episodes:>8} {starts['process']:>12.1f} {starts['ray']:>11.1f} "
            f"{best['process']:>12.1f} {best['ray']:>11.1f} {best['ray'] / best['process']:>10.2f}",
            flush=True,
        )
    ray.shutdown()
    print(machine_state())


def time_sweeps(args: BenchArgs) -> None:
    """The grid swept locally, then twice on Ray (cold workers, warm workers)."""
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as scratch:
        folder = Path(scratch)
        config = sweep_file(folder, args)
        local_s = time_sweep(config, folder / "local", "local")
        start = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        init_s = time.perf_counter() - start
        ray_s = time_sweep(config, folder / "ray", "ray", args.cpus_per_run)
        warm_s = time_sweep(config, folder / "ray-warm", "ray", args.cpus_per_run)
    what = f"{args.sweep_model} on {args.sweep_env}, {args.sweep_steps} training iterations"
    print(
        f"sweep of {args.runs} runs ({what}) x {args.episodes} episodes, "
        f"{args.cpus_per_run:g} Ray CPUs per run: local {local_s:.1f} s; "
        f"ray {ray_s:.1f} s + ray.init {init_s:.1f} s, ratio ray / local "
        f"{ray_s / local_s:.2f} ({(ray_s + init_s) / local_s:.2f} with start-up); "
        f"on warm workers {warm_s:.1f} s, ratio {warm_s / local_s:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_ray"))
