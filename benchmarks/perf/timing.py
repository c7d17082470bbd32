"""The timing every speed script shares: wall-clock and CPU seconds, and the machine's state.

A figure measured on a shared machine means little without the load it ran under, so each
script prints `machine_state()` before its figures and again after them (the load average
moves while a benchmark runs). CPU seconds are this process's (`time.process_time`): work
done in child processes, such as rollout env workers, is in wall time only.
"""

from __future__ import annotations

import os
import platform
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

Result = TypeVar("Result")


class Stopwatch:
    """Wall-clock and CPU seconds summed over every `with` block run under it.

    `with watch: ...` adds the block's time to `wall_s` and `cpu_s` and counts it in
    `blocks`, so one watch can total the steps of a loop, or time a single call.
    """

    def __init__(self) -> None:
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.blocks = 0

    def __enter__(self) -> Stopwatch:
        self._wall_start, self._cpu_start = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.wall_s += time.perf_counter() - self._wall_start
        self.cpu_s += time.process_time() - self._cpu_start
        self.blocks += 1


def timed(function: Callable[..., Result], *args: object) -> tuple[Result, Stopwatch]:
    """`function(*args)` and the Stopwatch that timed it."""
    watch = Stopwatch()
    with watch:
        result = function(*args)
    return result, watch


def random_play_rates(env: Any, total_steps: int) -> dict[str, float]:
    """Play uniformly random `info["admissible_commands"]` in `env` (a Gymnasium env) for
    `total_steps` steps over episodes reset with seeds 0, 1, 2, ...; `env.step` and
    `env.reset` timed apart. Returns counts and rates per CPU- and wall-clock second."""
    rng = random.Random(0)
    step, reset = Stopwatch(), Stopwatch()
    while step.blocks < total_steps:
        with reset:
            _observation, info = env.reset(seed=reset.blocks)
        done = False
        while not done and step.blocks < total_steps:
            action = rng.choice(info["admissible_commands"])
            with step:
                _observation, _reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
    return {
        "steps": step.blocks,
        "episodes": reset.blocks,
        "steps_per_cpu_second": step.blocks / step.cpu_s,
        "steps_per_wall_second": step.blocks / step.wall_s,
        "resets_per_cpu_second": reset.blocks / reset.cpu_s,
        "overall_steps_per_cpu_second": step.blocks / (step.cpu_s + reset.cpu_s),
    }


def rss_mb() -> float:
    """This process's resident memory now, MB (Linux /proc; NaN where it cannot be read)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def processor_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_state() -> str:
    """One line: UTC time, processor, cores this process may use, torch threads (and GPU)
    when torch is loaded, and the 1 / 5 / 15-minute load average."""
    parts = [
        datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        processor_name(),
        f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} cores usable",
    ]
    torch = sys.modules.get("torch")  # only when the script uses torch: no import cost
    if torch is not None:
        parts.append(f"torch {torch.get_num_threads()} threads")
        if torch.cuda.is_available():
            parts.append(f"GPU {torch.cuda.get_device_name()}")
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    parts.append(f"load average {load}")
    return "machine: " + "; ".join(parts)
