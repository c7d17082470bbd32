"""Sandbox speed: executions per second and overhead against a plain `python -c` (target <= 1.5x).

Times, interleaved round by round so that load on a shared machine hits both sides
alike, the same trivial program (`pass`) run
  - in the sandbox (`Sandbox.run_python`: namespaces, fresh uid, rlimits, tmpfs),
  - as a plain subprocess with the same interpreter and flags (`python -S -B -c pass`),
  - as a plain `python -c pass` (default flags: `site` imported, as most harnesses run it),
and the driver a CodeExec step runs (HumanEval/0's seven hidden tests on the canonical
solution) in the sandbox. Overhead ratio = sandbox time / plain time, medians per run.

    .venv/bin/python -m benchmarks.bench_sandbox [--rounds 100]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from collections.abc import Callable

from envs.code.actions import assemble_program
from envs.code.runner import CodeRunner
from envs.code.sandbox import INTERPRETER, Sandbox
from envs.code.tasks import load_tasks

TARGET_OVERHEAD_RATIO = 1.5


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(rounds: int) -> dict[str, list[float]]:
    """Seconds per execution of each variant, `rounds` samples each, interleaved."""
    sandbox = Sandbox()
    runner = CodeRunner(sandbox)
    task = load_tasks()[0]
    program = assemble_program(task.prompt, task.entry_point, task.canonical_solution or "")
    variants: dict[str, Callable[[], object]] = {
        "sandbox `pass`": lambda: sandbox.run_python("pass"),
        "plain `python -S -B -c pass`": lambda: subprocess.run(
            [INTERPRETER, "-S", "-B", "-c", "pass"], capture_output=True, check=True
        ),
        "plain `python -c pass`": lambda: subprocess.run(
            [INTERPRETER, "-c", "pass"], capture_output=True, check=True
        ),
        "sandbox hidden tests (HumanEval/0)": lambda: runner.run_hidden(task, program),
    }
    for run in variants.values():  # warm caches (namespace holder, task parsing)
        run()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            samples[name].append(_timed(run))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="executions per variant")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    samples = measure(args.rounds)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"Sandbox benchmark, {args.rounds} interleaved rounds, interpreter {INTERPRETER}")
    for name, median in medians.items():
        print(f"  {name:<38}: {median * 1000:7.2f} ms median, {1 / median:7.1f} executions/s")
    same_flags = medians["sandbox `pass`"] / medians["plain `python -S -B -c pass`"]
    default_flags = medians["sandbox `pass`"] / medians["plain `python -c pass`"]
    overhead_ms = (medians["sandbox `pass`"] - medians["plain `python -S -B -c pass`"]) * 1000
    print(f"  overhead per execution: {overhead_ms:.2f} ms")
    print(
        f"  ratio sandbox / plain, same flags     : {same_flags:.2f}x "
        f"(target <= {TARGET_OVERHEAD_RATIO}x: {'met' if same_flags <= 1.5 else 'NOT met'})"
    )
    print(f"  ratio sandbox / plain `python -c pass`: {default_flags:.2f}x")


if __name__ == "__main__":
    main()
