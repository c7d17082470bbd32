"""Execute a candidate program in the sandbox: the visible examples or the hidden tests.

The in-sandbox side is `envs/code/driver.py`; this side builds its payload, runs it,
and turns the report lines into per-test outcomes. A test with no result line (the
program was killed while it ran, exited early, or closed the report pipe) counts as
failed, with the sandbox's reason; so does a malformed line.

Limitation: the candidate runs in the driver's own process (as in HumanEval's harness),
so code written to cheat -- writing result lines to the report descriptor itself, or
patching the driver's functions -- could forge passes. The sandbox protects the host and
the harness; it does not make the reward tamper-proof against such code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from envs.code.sandbox import ExecutionResult, Sandbox
from envs.code.tasks import CodeTask

DRIVER_SOURCE = (Path(__file__).parent / "driver.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class TestOutcome:
    """One example or hidden test: passed, and if not, what was returned or raised."""

    passed: bool
    got: str = ""
    error: str = ""


@dataclass(frozen=True)
class RunReport:
    """One execution of the driver.

    Attributes:
        load_error: traceback of loading the program ("" when it loaded).
        outcomes: one per example / hidden test, in order.
        execution: the raw sandbox result (stdout, stderr, limits hit).
    """

    load_error: str
    outcomes: tuple[TestOutcome, ...]
    execution: ExecutionResult

    @property
    def num_passed(self) -> int:
        return sum(outcome.passed for outcome in self.outcomes)


class CodeRunner:
    """Runs one task's visible examples or hidden tests against programs, in `sandbox`."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def run_examples(self, task: CodeTask, program: str, check: bool) -> RunReport:
        """Execute the docstring examples; `check` compares them (`test`), else prints
        them (`run`)."""
        payload = {
            "mode": "test" if check else "run",
            "program": program,
            "entry_point": task.entry_point,
            "examples": [
                {"source": e.source, "want": e.want, "literal": e.literal}
                for e in task.visible_examples
            ],
        }
        return self._execute(payload, len(task.visible_examples))

    def run_hidden(self, task: CodeTask, program: str) -> RunReport:
        """Execute the hidden tests; one outcome per test (setup statements left out)."""
        payload = {
            "mode": "hidden",
            "program": program,
            "entry_point": task.entry_point,
            "candidate_name": task.candidate_name,
            "hidden": [
                {"source": item.source, "is_test": item.is_test} for item in task.hidden_items
            ],
        }
        report = self._execute(payload, len(task.hidden_items))
        tests = tuple(
            outcome
            for outcome, item in zip(report.outcomes, task.hidden_items, strict=True)
            if item.is_test
        )
        return RunReport(report.load_error, tests, report.execution)

    def _execute(self, payload: dict, count: int) -> RunReport:
        execution = self.sandbox.run_python(
            DRIVER_SOURCE, stdin=json.dumps(payload).encode(), report_channel=True
        )
        results: dict[int, TestOutcome] = {}
        load_error = ""
        loaded = False
        for line in execution.report.splitlines():
            try:
                record = json.loads(line)
                kind = record["kind"]
                if kind == "loaded":
                    loaded = True
                elif kind == "load_error":
                    load_error = str(record["error"])
                elif kind == "result" and 0 <= int(record["index"]) < count:
                    results[int(record["index"])] = TestOutcome(
                        record["passed"] is True, str(record["got"]), str(record["error"])
                    )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a line the program forged or cut: ignored, its test stays failed
        if not loaded and not load_error:
            load_error = execution.failure_reason() or "the program ended before it loaded"
        missing = (
            f"not run: {load_error.strip().splitlines()[-1]}"
            if load_error
            else execution.failure_reason() or "the program ended before this test finished"
        )
        outcomes = tuple(
            results.get(index, TestOutcome(False, error=missing)) for index in range(count)
        )
        return RunReport(load_error, outcomes, execution)
