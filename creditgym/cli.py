"""The `creditgym` console script: `creditgym <command> [args]` runs
`python -m creditgym.benchmarks.<module> [args]` (the same entry point, the same arguments
and exit codes).

    creditgym run --env alfworld --credit hp_rlvr
    creditgym sweep --config benchmarks/configs/study_fair.toml --shard 0/2
    creditgym leaderboard --runs results/runs

While a command starts (its imports take seconds), two things end it in one line rather
than a traceback: Ctrl-C (exit status 130; once the command runs, it says what was saved),
and a package of an optional extra that this install lacks, e.g. torch without
`pip install 'creditgym[train]'` (exit status 2). The
same holds for `python -m creditgym.benchmarks.<module>` (`report_start_failures`, which
`benchmarks/__init__.py` installs for a module run so). Every command parses its command
line here too (`parse_arguments`: a bad flag is one line, exit status 2), so that envs/
shares it with benchmarks/. This module imports nothing beyond the standard library
(tyro only when a config is parsed), so it works in the light install.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import importlib.metadata
import io
import os
import re
import signal
import sys
import tomllib
import types
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

# command -> module under creditgym.benchmarks, each with `main(argv) -> int`.
COMMANDS = {
    "run": "run",
    "sweep": "sweep",
    "leaderboard": "leaderboard",
    "study": "study",
    "compare": "compare",
    "credit-truth": "credit_truth",
    "credit-quality": "credit_quality",
    "hindsight-ablation": "hindsight_ablation",
    "decomposition": "decomposition",
    "trl-grpo": "trl_grpo",
    "gpu-check": "gpu_check",
}
USAGE_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what shells report for a Ctrl-C'd command
INTERRUPTED_WHILE_STARTING = "interrupted while starting; nothing was done"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def usage() -> str:
    return "usage: creditgym {" + ",".join(COMMANDS) + "} [args] (creditgym <command> --help)"


def requirement_name(requirement: str) -> str:
    """The import name of a requirement string (`torch>=2.11; extra == "train"` -> torch)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return match.group(1).lower().replace("-", "_") if match else ""


def extras_by_package() -> dict[str, str]:
    """Import name -> the first optional extra of creditgym that installs it, as declared
    once in pyproject.toml: read from the installed metadata, else from the checkout's
    pyproject.toml."""
    found: dict[str, str] = {}
    try:
        for requirement in importlib.metadata.requires("creditgym") or []:
            extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
            if extra:
                found.setdefault(requirement_name(requirement), extra.group(1))
        if found:
            return found
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return found
    for extra, requirements in declared.get("optional-dependencies", {}).items():
        for requirement in requirements:
            found.setdefault(requirement_name(requirement), extra)
    return found


def exception_chain(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it was raised from or while handling, in order."""
    chain: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    return chain


def start_failure_line(error: BaseException, command: str) -> tuple[str, int] | None:
    """(the line to print, the exit status) for an error that stops `command` before its
    work, or None for any other error (left to its traceback)."""
    if any(isinstance(link, KeyboardInterrupt) for link in exception_chain(error)):
        # transformers' lazy imports re-raise a Ctrl-C that lands in them as
        # "ModuleNotFoundError: Could not import module 'LlamaConfig'", the interrupt its cause.
        return INTERRUPTED_WHILE_STARTING, INTERRUPTED_EXIT_CODE
    if isinstance(error, ModuleNotFoundError) and error.name:
        package = error.name.split(".")[0]
        extra = extras_by_package().get(package.lower())
        if extra is not None:
            return (
                f"error: {command} needs {package}, which this install lacks (the {extra!r} "
                f"extra): pip install 'creditgym[{extra}]'",
                USAGE_EXIT_CODE,
            )
    return None


# Command lines: one parser for every command (benchmarks/, envs/alfworld/generate.py).


class UsageError(Exception):
    """Bad user input; the message is the whole explanation (no traceback shown)."""


# tyro draws a usage error as a box on a terminal, as plain text elsewhere: a title, the
# message, then sections (the argument's help, "Perhaps you meant", "For full helptext")
# between rules of these characters.
BOX_CORNERS = "╭╮╰╯"
BOX_SIDE = "│"
RULE_CHARACTERS = frozenset("─-")
# Lines of a section indented this far past its first are help text under an argument.
HELP_TEXT_INDENT = 8


def parse_arguments(
    config_type: Any,
    args: Sequence[str] | None,
    prog: str,
    **kwargs,
) -> Any:
    """The one parser of every command line: `tyro.cli(config_type, args=args, prog=prog,
    **kwargs)`, or for an `argparse.ArgumentParser` its `parse_args(args)` under `prog`;
    a usage error either way is one `UsageError` line (exit status 2) instead of tyro's
    5-11-line box or argparse's usage lines; `--help` as the parser prints it. (tyro is
    imported here, not above: the argparse commands run where only the standard library
    is, e.g. the GPU check before its install.)"""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            if isinstance(config_type, argparse.ArgumentParser):
                config_type.prog = prog
                return config_type.parse_args(args)
            import tyro

            return tyro.cli(config_type, args=args, prog=prog, **kwargs)
    except SystemExit as exit:
        if exit.code in (0, None):
            sys.stderr.write(captured.getvalue())
            raise
        if isinstance(config_type, argparse.ArgumentParser):
            options = list(config_type._option_string_actions)
            raise UsageError(argparse_error_line(captured.getvalue(), prog, options)) from None
        raise UsageError(tyro_error_line(captured.getvalue(), prog)) from None


def argparse_error_line(output: str, prog: str, options: Iterable[str] = ()) -> str:
    """One line from argparse's error output (its usage lines, then `prog: error: ...`):
    the message, close matches of an unrecognized option among `options`, then where the
    options are listed."""
    errors = [line.split(": error: ", 1)[1] for line in output.splitlines() if ": error: " in line]
    message = (errors[-1].strip() if errors else "bad arguments").rstrip(".")
    unknown = re.match(r"unrecognized arguments: (.*)", message)
    close = [
        match
        for word in (unknown.group(1).split() if unknown else [])
        for match in difflib.get_close_matches(word.split("=")[0], list(options), n=2)
    ]
    hint = f" Did you mean {', '.join(dict.fromkeys(close))}?" if close else ""
    return f"{message}.{hint} (`{prog} --help` lists the options)"


def indent_of(text: str) -> int:
    return len(text) - len(text.lstrip())


def box_sections(box: str) -> list[list[str]]:
    """The sections of tyro's error output (either drawing), title left out: each a list
    of lines, their indentation kept relative to the section's least indented line."""
    lines = [line.rstrip() for line in box.splitlines() if line.strip()]
    drawn = bool(lines) and lines[0].lstrip()[:1] in BOX_CORNERS
    sections: list[list[str]] = [[]]
    for number, line in enumerate(lines):
        text = line.strip()
        if text[:1] in BOX_CORNERS or (not drawn and number == 0):
            continue  # the title (drawn into the top border, or a line of its own)
        if drawn and text.startswith(BOX_SIDE):
            line = text[1:].removesuffix(BOX_SIDE).rstrip()
        if set(line.strip()) <= RULE_CHARACTERS:
            if sections[-1]:
                sections.append([])
            continue  # a rule: the title's underline, or between sections
        sections[-1].append(line)
    relative = []
    for section in sections:
        base = min(map(indent_of, section), default=0)
        relative.append([line[base:] for line in section])
    return relative


def tyro_error_line(box: str, prog: str) -> str:
    """One line from tyro's error output: its message (arguments named, their help text
    left out) and any close matches it suggests, then where the options are listed."""
    sections = box_sections(box)
    message = " ".join(text.strip() for text in sections[0] if indent_of(text) < HELP_TEXT_INDENT)
    close = [
        text.split()[0]
        for section in sections[1:]
        if section and section[0].startswith("Perhaps you meant")
        for text in section[1:]
        if text.strip().startswith("-") and indent_of(text) < HELP_TEXT_INDENT
    ]
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    message = (message or "bad arguments").rstrip(".")
    return f"{message}.{hint} (`{prog} --help` lists the options)"


def run_script(main: Callable[[Any], object], config_type: type, prog: str) -> int:
    """The `__main__` block of a script whose `main` takes its parsed config (the perf
    scripts, `python -m creditgym.envs.alfworld.generate`): the command line parsed as
    every command's is (`parse_arguments`: a bad flag is one line, exit status 2), then
    `main(config)`, its errors its own."""
    try:
        config = parse_arguments(config_type, None, prog)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_EXIT_CODE
    main(config)
    return 0


def interrupted_while_starting(signum: int, frame: types.FrameType | None) -> None:
    """SIGINT handler while a command imports: one line, exit status 130, at once. A
    KeyboardInterrupt raised inside a library's import can come out as another error (a
    numpy extension's "cannot load module more than once", transformers' "Could not import
    module 'LlamaConfig'"), so the handler ends the process itself; nothing has been done
    that needs cleaning up."""
    print(f"\n{INTERRUPTED_WHILE_STARTING}", file=sys.stderr, flush=True)
    os._exit(INTERRUPTED_EXIT_CODE)


def interrupted_while_importing_main(signum: int, frame: types.FrameType | None) -> None:
    """SIGINT handler of `python -m creditgym.benchmarks.<module>`: while the module's
    top level runs (its imports), `interrupted_while_starting`; once it has defined its
    `main`, the usual KeyboardInterrupt, which the command's `main` reports."""
    if callable(getattr(sys.modules.get("__main__"), "main", None)):
        signal.default_int_handler(signum, frame)
    interrupted_while_starting(signum, frame)


def command_module(argv: Sequence[str]) -> str:
    """The command `python -m [creditgym.]benchmarks.<module>` runs, from the interpreter's
    own command line (`sys.orig_argv`): a package's command (`benchmarks/run/`) fails in its
    `__init__`, before its `__main__` module has a name."""
    if "-m" not in argv[:-1]:
        return "<command>"
    return argv[argv.index("-m") + 1].removesuffix(".__main__").rsplit(".", 1)[-1]


def report_start_failures() -> None:
    """For `python -m creditgym.benchmarks.<module>`: a Ctrl-C while the module imports
    (`interrupted_while_importing_main`), and an uncaught missing extra, print their one
    line and end the process with their exit status; any other error keeps its traceback."""
    signal.signal(signal.SIGINT, interrupted_while_importing_main)

    def hook(kind: type[BaseException], error: BaseException, trace: types.TracebackType | None):
        module = command_module(sys.orig_argv)
        failure = start_failure_line(error, f"python -m creditgym.benchmarks.{module}")
        if failure is None:
            sys.__excepthook__(kind, error, trace)
            return
        line, status = failure
        print(f"\n{line}" if status == INTERRUPTED_EXIT_CODE else line, file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(status)  # the interpreter would otherwise exit 1

    sys.excepthook = hook


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `creditgym` console script."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        return run_command(args)
    except (KeyboardInterrupt, ModuleNotFoundError) as error:
        failure = start_failure_line(error, " ".join(["creditgym", *args[:1]]))
        if failure is None:
            raise
        line, status = failure
        print(f"\n{line}" if status == INTERRUPTED_EXIT_CODE else line, file=sys.stderr)
        return status


def run_command(args: list[str]) -> int:
    """Import the command's module and call its `main` with the remaining arguments."""
    if not args:
        print(usage(), file=sys.stderr)
        return USAGE_EXIT_CODE
    if args[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" Did you mean {close[0]}?" if close else ""
        print(f"creditgym: unknown command {command!r}.{hint} {usage()}", file=sys.stderr)
        return USAGE_EXIT_CODE
    # As `python -m creditgym.benchmarks.run` does in its __main__ block: tokenizers' thread pool
    # would otherwise warn after the rollout workers fork.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.argv[0] = f"creditgym {command}"  # argparse's prog, for --help and usage lines
    signal.signal(signal.SIGINT, interrupted_while_starting)
    module = importlib.import_module(f"creditgym.benchmarks.{COMMANDS[command]}")
    # From here the command's `main` reports a Ctrl-C (saying what was saved).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
