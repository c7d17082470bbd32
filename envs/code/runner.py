"""Execute a candidate program in the sandbox: the visible examples or the hidden tests.

Hidden tests (the reward) run as two sandboxes joined by a pair of pipes
(`envs/code/grading.py`): the grader runs the task's tests and decides each verdict, the
callee runs the candidate's program and only answers calls with plain data. The report
read here is the grader's; the candidate's process never holds its descriptor.

Visible examples (`run`, `test`: feedback to the agent, never reward) run in one
sandbox with the program, through `envs/code/driver.py`; a program can fake its own
visible results there, which only misleads itself.

A test with no result line (its sandbox was killed while it ran, exited early, or
closed the report pipe) counts as failed, with the sandbox's reason; so does a
malformed line.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from creditgym.envs.code.grading import split_messages
from creditgym.envs.code.sandbox import REPORT_FD, ExecutionResult, Sandbox
from creditgym.envs.code.tasks import CodeTask, names_tests_take_from_prompt

DRIVER_SOURCE = (Path(__file__).parent / "driver.py").read_text(encoding="utf-8")
# Both grading sandboxes run `grading.py` compiled here once and sent, with the payload,
# as marshal data on stdin: compiling its source in every sandbox would cost more than
# the rest of a typical grading.
GRADING_PATH = Path(__file__).parent / "grading.py"
GRADING_CODE = compile(GRADING_PATH.read_text(encoding="utf-8"), str(GRADING_PATH), "exec")
GRADING_BOOTSTRAP = (
    "import marshal, sys\n"
    "code, main, payload = marshal.loads(sys.stdin.buffer.read())\n"
    "namespace = {'__name__': 'grading'}\n"
    "exec(code, namespace)\n"
    "namespace[main](payload)\n"
)
# The grader outlives the callee's wall limit by this much, so that a candidate killed
# at its limit is reported by the grader (test by test) rather than cut off with it.
GRADER_EXTRA_WALL_SECONDS = 2.0
# How long a callee may take to end by itself once the grader is done (it normally ends
# at once: the grader's exit closes its calls pipe) before it is cancelled.
CALLEE_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class TestOutcome:
    """One example or hidden test: passed, and if not, what was returned or raised."""

    passed: bool
    got: str = ""
    error: str = ""


@dataclass(frozen=True)
class RunReport:
    """One run of a program on a task's visible examples or hidden tests.

    Attributes:
        load_error: traceback of loading the program ("" when it loaded).
        outcomes: one per example / hidden test, in order.
        execution: the raw sandbox result of the program's own process (stdout, stderr,
            limits hit): the driver's for examples, the callee's for hidden tests.
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
        limits = sandbox.limits
        self.grader_sandbox = Sandbox(
            dataclasses.replace(
                limits, wall_seconds=limits.wall_seconds + GRADER_EXTRA_WALL_SECONDS
            )
        )

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
        """Grade `program` on the hidden tests; one outcome per test (setup left out).

        `execution` of the report is the candidate's sandbox (its output and limits).
        """
        calls_read, calls_write = os.pipe()  # grader -> callee
        replies_read, replies_write = os.pipe()  # callee -> grader
        cancel_read, cancel_write = os.pipe()  # closed by us: the callee is no longer needed
        callee_payload = {
            "program": program,
            "entry_point": task.entry_point,
            "calls_fd": REPORT_FD,
            "replies_fd": REPORT_FD + 1,
        }
        grader_payload = {
            # The prompt only where tests call its helpers: its imports (`typing`, mostly)
            # would cost the grader more than the tests themselves.
            "prompt": task.prompt if names_tests_take_from_prompt(task) else "",
            "entry_point": task.entry_point,
            "candidate_name": task.candidate_name,
            "hidden": [item.source for item in task.hidden_items],
            "report_fd": REPORT_FD,
            "calls_fd": REPORT_FD + 1,
            "replies_fd": REPORT_FD + 2,
        }
        callee: list[ExecutionResult | BaseException] = []

        def run_callee() -> None:
            try:
                callee.append(
                    self.sandbox.run_python(
                        GRADING_BOOTSTRAP,
                        stdin=marshal.dumps((GRADING_CODE, "serve_candidate", callee_payload)),
                        pass_fds=(calls_read, replies_write),
                        cancel_fd=cancel_read,
                    )
                )
            except BaseException as error:  # re-raised in the caller's thread below
                callee.append(error)

        thread = threading.Thread(target=run_callee, name="codeexec-callee", daemon=True)
        thread.start()
        try:
            grader = self.grader_sandbox.run_python(
                GRADING_BOOTSTRAP,
                stdin=marshal.dumps((GRADING_CODE, "grade", grader_payload)),
                report_channel=True,
                pass_fds=(calls_write, replies_read),
            )
        finally:
            # A callee that ends by itself (its own limit; or the grader's end closing its
            # calls pipe) reports its own fate; only one still running after a grace is
            # cancelled, being of no use once the grader is done. Cancelled at once, a
            # callee killed by its CPU limit was, under load, seen cancelled before its
            # reaping reached the status pipe, and the reason for its tests was lost.
            thread.join(CALLEE_GRACE_SECONDS)
            os.close(cancel_write)
            thread.join()
            os.close(cancel_read)
        if isinstance(callee[0], BaseException):
            raise callee[0]
        execution = callee[0]
        report = self._outcomes(
            _grader_records(grader.report), len(task.hidden_items), grader, execution
        )
        tests = tuple(
            outcome
            for outcome, item in zip(report.outcomes, task.hidden_items, strict=True)
            if item.is_test
        )
        return RunReport(report.load_error, tests, execution)

    def _execute(self, payload: dict, count: int) -> RunReport:
        execution = self.sandbox.run_python(
            DRIVER_SOURCE, stdin=json.dumps(payload).encode(), report_channel=True
        )
        return self._outcomes(_driver_records(execution.report), count, execution, execution)

    @staticmethod
    def _outcomes(
        records: list[tuple], count: int, reporter: ExecutionResult, program: ExecutionResult
    ) -> RunReport:
        """Outcomes from `reporter`'s records; `program` ran the candidate's code (the same
        execution for examples), and its fate explains tests that never finished."""
        results: dict[int, TestOutcome] = {}
        load_error = ""
        loaded = False
        for record in records:
            if record[0] == "loaded":
                loaded = True
            elif record[0] == "load_error":
                load_error = record[1]
            elif record[0] == "result" and 0 <= record[1] < count:
                results[record[1]] = TestOutcome(record[2], record[3], record[4])
        # A callee cancelled after the grader finished says nothing about the tests.
        ended = ("" if program.cancelled else program.failure_reason()) or (
            reporter.failure_reason()
        )
        if not loaded and not load_error:
            load_error = ended or "the program ended before it loaded"
        missing = (
            f"not run: {load_error.strip().splitlines()[-1]}"
            if load_error
            else ended or "the program ended before this test finished"
        )
        outcomes = tuple(
            results.get(index, TestOutcome(False, error=missing)) for index in range(count)
        )
        if ended:  # say why the candidate stopped answering
            outcomes = tuple(
                dataclasses.replace(o, error=f"{o.error} ({ended})")
                if o.error.startswith("CandidateGone")
                else o
                for o in outcomes
            )
        return RunReport(load_error, outcomes, program)


def _driver_records(report: str) -> list[tuple]:
    """The driver's JSON report lines as records (see `_grader_records`), skipping lines
    the program forged or cut: their tests stay failed."""
    records = []
    for line in report.splitlines():
        try:
            record = json.loads(line)
            kind = record["kind"]
            if kind == "loaded":
                records.append(("loaded",))
            elif kind == "load_error":
                records.append(("load_error", str(record["error"])))
            elif kind == "result":
                records.append(
                    (
                        "result",
                        int(record["index"]),
                        record["passed"] is True,
                        str(record["got"]),
                        str(record["error"]),
                    )
                )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return records


def _grader_records(report: str) -> list[tuple]:
    """The grader's report as records: ("loaded",), ("load_error", text) and
    ("result", index, passed, got, error); anything else, or a cut-off tail, is dropped."""
    records = []
    messages, _ = split_messages(report.encode("utf-8", "surrogateescape"))
    for message in messages:
        shape = tuple(type(field) for field in message)
        if (shape, message[0]) in (((str,), "loaded"), ((str, str), "load_error")):
            records.append(message)
        elif shape == (str, int, bool, str) and message[0] == "result":
            records.append(("result", message[1], message[2], "", message[3]))
    return records
