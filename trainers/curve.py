"""Learning curves: the policy evaluated on fixed held-out tasks every N iterations.

A point after k training iterations (k = 0, N, 2N, ..., and the last iteration) plays
`len(seeds)` held-out tasks once each at a low temperature with the policy as it stands
and appends one record to `curve.jsonl` in the run folder:

    {"iteration": k, "optimizer_step": s, "episodes": n, "success_rate": ..., "mean_return": ...,
     "mean_length": ..., "eval_s": ...}

The tasks and the sampling seed are the same at every point, so two points differ only
by the weights (common random numbers: the curve's step-to-step noise is the policy's,
not the task draw's). The point is taken from the weights after iteration k, before
iteration k + 1 starts; a resumed run keeps the points up to its checkpoint and takes the
rest again, so a killed-and-resumed run writes the curve an uninterrupted one writes.
Rollouts used and training seconds at a point are read from `metrics.jsonl` by the
reporting side (`report/records.py`), which owns those clocks. Periodic evaluation
at a validation temperature of 0.4 follows GiGPO (arXiv 2505.10978).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from creditgym.agents.atomic import atomic_write_text, jsonl_records
from creditgym.agents.llm import LLMAgent, SamplingConfig
from creditgym.agents.rollout import EnvWorkers, collect
from creditgym.models.registry import LoadedModel

CURVE_FILE = "curve.jsonl"


@dataclass(frozen=True)
class CurveSettings:
    """Where and how often the learning curve is measured."""

    every: int
    """Training iterations between two points (> 0); the first point is before training."""
    seeds: tuple[int, ...]
    """Env reset seeds of the held-out tasks, one episode each, the same at every point."""
    temperature: float = 0.4
    """Sampling temperature of the evaluation policy (GiGPO validates at 0.4)."""
    agent_seed: int = 0
    """Base seed of the evaluation policy's sampling, the same at every point."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Constructor kwargs of the evaluation env (the held-out split's)."""
    num_envs: int = 32
    """Evaluation episodes played together."""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"curve evaluation every {self.every} iterations: must be >= 1")
        if not self.seeds:
            raise ValueError("curve evaluation needs at least one held-out task seed")

    def due(self, iteration: int, last_iteration: int) -> bool:
        """Whether a point belongs after `iteration` training iterations."""
        return iteration % self.every == 0 or iteration == last_iteration


class CurveLog:
    """`curve.jsonl`: one fsynced record per point, kept up to a resumed checkpoint."""

    def __init__(self, run_dir: str | os.PathLike, resume_iteration: int = 0) -> None:
        self.path = Path(run_dir) / CURVE_FILE
        kept = [point for point in self.read() if point["iteration"] <= resume_iteration]
        # Atomic: a kill during this rewrite must not lose the points kept.
        atomic_write_text(self.path, "".join(json.dumps(point) + "\n" for point in kept))
        self.iterations = {point["iteration"] for point in kept}

    def read(self) -> list[dict[str, Any]]:
        """Points written so far (an incomplete last line, from a kill mid-write, is reported
        and dropped; a damaged line raises `agents.atomic.DamagedFileError`)."""
        return [point for _, point in jsonl_records(self.path)]

    def append(self, point: Mapping[str, float]) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(dict(point)) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.iterations.add(int(point["iteration"]))


def evaluate_point(
    policy: LoadedModel,
    env_id: str,
    sampling: SamplingConfig,
    settings: CurveSettings,
    env_workers: EnvWorkers = "auto",
) -> dict[str, float]:
    """Play the held-out tasks once each with `policy` on the training run's kind of env
    workers; success rate, return, length."""
    start = time.perf_counter()
    agent = LLMAgent(
        policy,
        **{**asdict(sampling), "temperature": settings.temperature},
        seed=settings.agent_seed,
    )
    trajectories, _ = collect(
        env_id,
        agent,
        seeds=list(settings.seeds),
        group_size=1,
        num_envs=min(settings.num_envs, len(settings.seeds)),
        env_kwargs=settings.env_kwargs,
        env_workers=env_workers,
        progress=False,
    )
    return {
        "episodes": float(len(trajectories)),
        "success_rate": _mean([t.success for t in trajectories]),
        "mean_return": _mean([t.total_return for t in trajectories]),
        "mean_length": _mean([t.length for t in trajectories]),
        "eval_s": time.perf_counter() - start,
    }


def _mean(values: Sequence[float]) -> float:
    # Every episode dropped (a crashed env) gives NaN, never a made-up 0.
    return float(np.mean(values)) if values else float("nan")
