"""`creditgym/CodeExec-v1`: write, run and test code over several steps; hidden tests judge.

Episode: `reset` picks a task (HumanEval by default, see `envs.code.tasks`) and shows
its prompt; each step is one action of the language in `envs.code.actions`
(`write` a code block, `run`, `test`, `submit`). Every execution happens in
`envs.code.sandbox.Sandbox`; the hidden tests, which decide the reward, run in a grader
sandbox of their own that the candidate can only answer with plain data
(`envs.code.grading`, threat model in docs/codeexec_security.md). The episode ends
when a submission passes every hidden test (success, reward 1), when `max_submissions`
submissions have failed (reward 0), or at `max_steps` (truncated; the hidden tests judge
the code as it stands, reward 1 if it passes them all).

`info` per step: `success`, `task_id`, `task` (the prompt), `feedback` (the verifier's
verdict on the current code: hidden tests passed, and which failed and why -- privileged,
for hindsight credit modules and scripted agents, never for policies), `key_step`
(this step's code passed more hidden tests than any earlier version, the prompt's own
stub included), `hidden_passed` / `hidden_total`, `admissible_commands` (`run`,
`test`, `submit`; writes are free text), `expert_action` (the canonical-solution
expert: write the canonical body, then submit), `invalid_action`.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym

from creditgym.envs.code.actions import (
    COMMANDS,
    CodeAction,
    assemble_program,
    defines_function,
    parse_action,
)
from creditgym.envs.code.options import CodeExecOptions
from creditgym.envs.code.runner import CodeRunner, RunReport
from creditgym.envs.code.sandbox import ExecutionResult, Sandbox, SandboxLimits
from creditgym.envs.code.tasks import CodeTask, load_tasks
from creditgym.envs.spaces import text_space

MAX_OBSERVATION_CHARS = 8192
MAX_ACTION_CHARS = 24_000
# Hidden-test feedback lists at most this many failures (each with its reason).
MAX_FEEDBACK_FAILURES = 5


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of `text` within `limit` characters, marking the cut."""
    if len(text) <= limit:
        return text
    marker = f"\n... [{len(text) - limit} characters cut] ...\n"
    keep = max(0, limit - len(marker))
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head) :]


class CodeExecEnv(gym.Env):
    """Multi-step programming tasks judged by hidden tests (see module doc).

    Args (`tasks_path`, `max_submissions` and `max_output_chars` fields of
    `CodeExecOptions`, which checks them):
        tasks_path: JSONL task file in HumanEval's format; None for HumanEval's 164.
        max_steps: step limit of an episode (truncation).
        max_submissions: failed submissions allowed before the episode ends.
        max_output_chars: each tool output (stdout, stderr, failing tests) shown to the
            agent is cut to this many characters, head and tail kept.
        sandbox_limits: per-execution limits; defaults to `SandboxLimits()`.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(
        self,
        max_steps: int = 10,
        sandbox_limits: SandboxLimits | None = None,
        **options: Any,
    ) -> None:
        if options.get("tasks_path") is not None:  # a Path from Python is a path too
            options["tasks_path"] = os.fspath(options["tasks_path"])
        self.options = CodeExecOptions(**options)
        if max_steps < 1:
            raise ValueError(f"need max_steps >= 1, got {max_steps}")
        self.tasks = load_tasks(self.options.tasks_path)
        self.tasks_by_id = {task.task_id: task for task in self.tasks}
        self.max_steps = max_steps
        self.max_submissions = self.options.max_submissions
        self.max_output_chars = self.options.max_output_chars
        self.runner = CodeRunner(Sandbox(sandbox_limits))
        self.observation_space = text_space(MAX_OBSERVATION_CHARS)
        self.action_space = text_space(MAX_ACTION_CHARS)
        self.task: CodeTask | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Pick a task (`options["task_id"]`, else drawn with the seed) and show it."""
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is None:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        elif task_id in self.tasks_by_id:
            self.task = self.tasks_by_id[task_id]
        else:
            raise ValueError(
                f"unknown task_id {task_id!r}; this task set has {len(self.tasks)} tasks, "
                f"e.g. {', '.join(repr(t.task_id) for t in self.tasks[:3])}"
            )
        self.code = ""  # empty: the prompt's own stub (its docstring as the body)
        self.program = self.task.prompt
        self.steps_taken = 0
        self.submissions = 0
        self.hidden = self.runner.run_hidden(self.task, self.program)
        self.best_hidden_passed = self.hidden.num_passed
        self.episode_over = False
        observation = (
            f"Task {self.task.task_id}: complete the function `{self.task.entry_point}`.\n"
            f"```python\n{self.task.prompt.rstrip()}\n```\n"
            f"{len(self.task.visible_examples)} visible example(s); hidden tests decide. "
            "Actions: write ```python <function or body>```, run, test, submit."
        )
        return truncate(observation, MAX_OBSERVATION_CHARS), self._info(False, False, False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None or self.episode_over:
            raise RuntimeError("call reset() before step(), and again after an episode ends")
        self.steps_taken += 1
        parsed = parse_action(action)
        key_step = terminated = success = False
        if parsed.kind == "write":
            observation, key_step = self._write(parsed)
        elif parsed.kind == "submit":
            observation, terminated, success = self._submit()
        elif parsed.kind in ("run", "test"):
            observation = self._examples(check=parsed.kind == "test")
        else:
            observation = f"Invalid action: {parsed.error}."
        truncated = not terminated and self.steps_taken >= self.max_steps
        if truncated:
            success = self.hidden.num_passed == len(self.hidden.outcomes)
            observation += (
                f"\nStep limit ({self.max_steps}) reached; your current code "
                f"{'passes' if success else 'fails'} the hidden tests."
            )
        self.episode_over = terminated or truncated
        info = self._info(success, key_step, parsed.kind == "invalid")
        reward = 1.0 if success and self.episode_over else 0.0
        return truncate(observation, MAX_OBSERVATION_CHARS), reward, terminated, truncated, info

    def _write(self, parsed: CodeAction) -> tuple[str, bool]:
        assert self.task is not None
        self.code = parsed.code
        self.program = assemble_program(self.task.prompt, self.task.entry_point, parsed.code)
        self.hidden = self.runner.run_hidden(self.task, self.program)
        key_step = self.hidden.num_passed > self.best_hidden_passed
        self.best_hidden_passed = max(self.best_hidden_passed, self.hidden.num_passed)
        lines = len(parsed.code.splitlines())
        status = (
            "it loads"
            if not self.hidden.load_error
            else "it does not load:\n"
            + (truncate(_last_lines(self.hidden.load_error), self.max_output_chars))
        )
        shape = (
            "a full definition"
            if defines_function(parsed.code, self.task.entry_point)
            else "the function body"
        )
        return f"Code saved ({lines} lines, as {shape}); {status}", key_step

    def _submit(self) -> tuple[str, bool, bool]:
        assert self.task is not None
        self.submissions += 1
        passed, total = self.hidden.num_passed, len(self.hidden.outcomes)
        if passed == total:
            return f"Submission accepted: all {total} hidden tests pass.", True, True
        left = self.max_submissions - self.submissions
        observation = f"Submission rejected: {passed}/{total} hidden tests pass."
        observation += f" {left} submission(s) left." if left else " No submissions left."
        return observation, left == 0, False

    def _examples(self, check: bool) -> str:
        assert self.task is not None
        if not self.task.visible_examples and check:
            return "This task shows no examples to test; use run, or submit."
        report = self.runner.run_examples(self.task, self.program, check)
        parts = []
        if report.load_error:
            parts.append("Your code does not load:\n" + _last_lines(report.load_error))
        elif check:
            parts.append(self._test_summary(report))
        else:
            parts.append(
                "Ran your code on the docstring examples."
                if self.task.visible_examples
                else "Ran your code (this task shows no examples to run)."
            )
        parts.extend(_streams(report.execution, self.max_output_chars))
        return "\n".join(parts)

    def _test_summary(self, report: RunReport) -> str:
        assert self.task is not None
        lines = [f"Visible tests: {report.num_passed}/{len(report.outcomes)} pass."]
        for example, outcome in zip(self.task.visible_examples, report.outcomes, strict=True):
            if not outcome.passed:
                got = outcome.got.strip() or _last_lines(outcome.error, 3) or "None"
                lines.append(
                    f"FAILED >>> {example.source}\n  expected: {example.want}\n  got: {got}"
                )
        return truncate("\n".join(lines), self.max_output_chars)

    def _feedback(self) -> str:
        """The verifier's verdict on the current code (privileged: names hidden tests)."""
        assert self.task is not None
        passed, total = self.hidden.num_passed, len(self.hidden.outcomes)
        lines = [f"Hidden tests: {passed}/{total} pass."]
        if self.hidden.load_error:
            lines.append("The code does not load: " + _last_lines(self.hidden.load_error, 1))
        tests = [item for item in self.task.hidden_items if item.is_test]
        failures = [
            (item, outcome)
            for item, outcome in zip(tests, self.hidden.outcomes, strict=True)
            if not outcome.passed
        ]
        for item, outcome in failures[:MAX_FEEDBACK_FAILURES]:
            lines.append(f"FAILED {truncate(item.source, 300)} -> {outcome.error}")
        if len(failures) > MAX_FEEDBACK_FAILURES:
            lines.append(f"... and {len(failures) - MAX_FEEDBACK_FAILURES} more failed.")
        return truncate("\n".join(lines), self.max_output_chars)

    def _info(self, success: bool, key_step: bool, invalid: bool) -> dict[str, Any]:
        assert self.task is not None
        solved = self.hidden.num_passed == len(self.hidden.outcomes)
        if solved or self.task.canonical_solution is None:
            expert_action = "submit" if solved else None
        else:
            expert_action = f"write\n```python\n{self.task.canonical_solution.rstrip()}\n```"
        info: dict[str, Any] = {
            "success": success,
            "task_id": self.task.task_id,
            "task": self.task.prompt,
            "feedback": self._feedback(),
            "key_step": key_step,
            "hidden_passed": self.hidden.num_passed,
            "hidden_total": len(self.hidden.outcomes),
            "admissible_commands": list(COMMANDS),
            "invalid_action": invalid,
        }
        if expert_action is not None:
            info["expert_action"] = expert_action
        return info


def _last_lines(text: str, count: int = 6) -> str:
    """The end of a traceback: where it failed and why."""
    return "\n".join(text.strip().splitlines()[-count:])


def _streams(execution: ExecutionResult, limit: int) -> list[str]:
    parts = []
    if execution.stdout.strip():
        parts.append("[stdout]\n" + truncate(execution.stdout.rstrip(), limit))
    if execution.stderr.strip():
        parts.append("[stderr]\n" + truncate(execution.stderr.rstrip(), limit))
    if execution.failure_reason():
        parts.append("[sandbox] " + execution.failure_reason())
    return parts
