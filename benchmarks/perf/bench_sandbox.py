"""Sandbox speed: per-program overhead against a plain `python -c` (target <= 1.5x), and the
grading of one HumanEval submission against grading it in-process (target <= 2x).

Times, interleaved round by round so that load on a shared machine hits every side alike:
  - the same trivial program (`pass`) in the sandbox (`Sandbox.run_python`: the jailed
    file tree, namespaces, fresh uid, rlimits, tmpfs), as a plain subprocess with the
    same interpreter and flags (`python -S -B -c pass`), and as a plain `python -c pass`
    (default flags: `site` imported, as most harnesses run it);
  - the grading of HumanEval/0's canonical solution (`CodeRunner.run_hidden`: grader and
    callee sandboxes, seven tests), and the in-process reference: the program and the
    task's own `check(candidate)` in one sandbox: CodeExec's design before the grader and
    callee were split (docs/codeexec_security.md), and HumanEval's harness's -- fast, and
    forgeable. Its old driver also imported `json`
    and `traceback` and reported test by test, so this reference is a little faster
    than the old grading was.
Overhead ratio = sandbox time / plain time, medians per run.

With `--all-tasks`, also grades every HumanEval canonical solution once and reports the
total time and any task whose canonical solution does not pass all its hidden tests (the
test suite checks the same through the env, `test_canonical_submitter_wins_every_humaneval_task`).

Before that split (commit 546cf74, same machine, lighter load), measured with this
benchmark's predecessor and a loop over `run_hidden`: sandbox `pass` 13.72 ms against
9.72 ms plain (1.41x); HumanEval/0 graded in 51.7 ms (median of 30); all 164 canonical
solutions graded in 8.1 s.

    .venv/bin/python -m creditgym.benchmarks.perf.bench_sandbox [--rounds 100] [--all-tasks]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from creditgym.benchmarks.cli import run_script
from creditgym.benchmarks.perf.timing import machine_state, timed
from creditgym.envs.code.actions import assemble_program
from creditgym.envs.code.runner import CodeRunner
from creditgym.envs.code.sandbox import INTERPRETER, Sandbox
from creditgym.envs.code.tasks import CodeTask, load_tasks

TARGET_PROGRAM_RATIO = 1.5
TARGET_GRADING_RATIO = 2.0


@dataclass(frozen=True)
class BenchArgs:
    """Time the sandbox against plain subprocesses, and grading against in-process tests."""

    rounds: int = 100
    """interleaved samples of each variant"""
    all_tasks: bool = False
    """also grade every HumanEval canonical solution once (about 10-30 s on 2 cores)"""


def _in_process_check(task: CodeTask) -> str:
    """The program and the task's tests in one process: HumanEval's own way of grading."""
    program = assemble_program(task.prompt, task.entry_point, task.canonical_solution or "")
    return f"{program}\n\n{task.test}\n\ncheck({task.entry_point})\n"


def measure(rounds: int) -> dict[str, list[float]]:
    """Seconds per execution of each variant, `rounds` samples each, interleaved."""
    sandbox = Sandbox()
    runner = CodeRunner(sandbox)
    task = load_tasks()[0]
    program = assemble_program(task.prompt, task.entry_point, task.canonical_solution or "")
    in_process = _in_process_check(task)

    def graded() -> None:
        report = runner.run_hidden(task, program)
        assert report.num_passed == task.num_hidden_tests, report.outcomes

    def checked_in_process() -> None:
        result = sandbox.run_python(in_process)
        assert result.ok, result.stderr

    variants: dict[str, Callable[[], object]] = {
        "sandbox `pass`": lambda: sandbox.run_python("pass"),
        "plain `python -S -B -c pass`": lambda: subprocess.run(
            [INTERPRETER, "-S", "-B", "-c", "pass"], capture_output=True, check=True
        ),
        "plain `python -c pass`": lambda: subprocess.run(
            [INTERPRETER, "-c", "pass"], capture_output=True, check=True
        ),
        "grading HumanEval/0 (grader + callee)": graded,
        "in-process check, one sandbox (before)": checked_in_process,
    }
    for run in variants.values():  # warm caches (fork server, task parsing)
        run()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            samples[name].append(timed(run)[1].wall_s)
    return samples


def grade_all() -> tuple[float, float, list[str]]:
    """(total seconds, median seconds per task, ids of tasks whose canonical solution
    fails) over every HumanEval task."""
    runner = CodeRunner(Sandbox())
    times, failures = [], []
    for task in load_tasks():
        program = assemble_program(task.prompt, task.entry_point, task.canonical_solution or "")
        report, watch = timed(runner.run_hidden, task, program)
        times.append(watch.wall_s)
        if report.num_passed != task.num_hidden_tests:
            failures.append(task.task_id)
    return sum(times), statistics.median(times), failures


def _verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (target <= {target}x: {'met' if ratio <= target else 'NOT met'})"


def main(args: BenchArgs) -> None:
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    print(machine_state())
    samples = measure(args.rounds)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"Sandbox benchmark, {args.rounds} interleaved rounds, interpreter {INTERPRETER}")
    for name, median in medians.items():
        print(f"  {name:<40}: {median * 1000:7.2f} ms median, {1 / median:7.1f} per second")
    sandbox, plain = medians["sandbox `pass`"], medians["plain `python -S -B -c pass`"]
    default_flags = medians["plain `python -c pass`"]
    grading = medians["grading HumanEval/0 (grader + callee)"]
    before = medians["in-process check, one sandbox (before)"]
    print(f"  overhead per execution: {(sandbox - plain) * 1000:.2f} ms")
    print(f"  sandbox / plain, same flags: {_verdict(sandbox / plain, TARGET_PROGRAM_RATIO)}")
    print(f"  sandbox / plain `python -c pass`: {sandbox / default_flags:.2f}x")
    print(f"  grading / in-process check: {_verdict(grading / before, TARGET_GRADING_RATIO)}")
    if args.all_tasks:
        total, median, failures = grade_all()
        print(
            f"All HumanEval canonical solutions graded: {total:.1f} s total, "
            f"{median * 1000:.1f} ms median per task; failing: {failures or 'none'}"
        )
    print(machine_state())


if __name__ == "__main__":
    sys.exit(run_script(main, BenchArgs, "perf.bench_sandbox"))
