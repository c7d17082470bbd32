"""Command-line edge helpers: name lookup with suggestions, and one-line errors.

Every `benchmarks` entry point turns names into objects through `lookup` and reports
bad input as a `UsageError`: one line on stderr, exit status 2, no traceback; a command
line tyro cannot parse is one such line too (`parse_arguments`). Library
modules report one-off progress (a model download, a data set built on first use) through
`logging`; an entry point wrapped by `exit_on_usage_error` shows those messages on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from creditgym.agents.atomic import DamagedFileError

T = TypeVar("T")

USAGE_EXIT_CODE = 2


class UsageError(Exception):
    """Bad user input; the message is the whole explanation (no traceback shown)."""


def suggest(name: str, candidates: Iterable[str]) -> str:
    """' Did you mean a, b?' for close matches of `name`, or '' when none is close."""
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.5)
    return f" Did you mean {', '.join(close)}?" if close else ""


def lookup(kind: str, name: str, registry: Mapping[str, T]) -> T:
    """`registry[name]`, or a `UsageError` listing valid names and close matches."""
    if name in registry:
        return registry[name]
    valid = ", ".join(sorted(registry))
    raise UsageError(f"unknown {kind} {name!r}; valid: {valid}.{suggest(name, registry)}")


# tyro draws a usage error as a box on a terminal, as plain text elsewhere: a title, the
# message, then sections (the argument's help, "Perhaps you meant", "For full helptext")
# between rules of these characters.
BOX_CORNERS = "╭╮╰╯"
BOX_SIDE = "│"
RULE_CHARACTERS = frozenset("─-")
# Lines of a section indented this far past its first are help text under an argument.
HELP_TEXT_INDENT = 8


def prog_of(module: str) -> str:
    """How usage lines name the command of `creditgym.benchmarks.<module>`: as typed through
    the console script (`creditgym run`, which sets argv[0] so), else the module form,
    which works both from a checkout and installed (`python -m benchmarks.run` finds no
    module once installed)."""
    invoked = sys.argv[0] if sys.argv else ""
    if invoked.startswith("creditgym "):
        return invoked
    return f"python -m creditgym.benchmarks.{module}"


def parse_arguments(
    config_type: type[T] | argparse.ArgumentParser,
    args: Sequence[str] | None,
    prog: str,
    **kwargs,
) -> T | argparse.Namespace:
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
    message = " ".join(
        text.strip() for text in sections[0] if indent_of(text) < HELP_TEXT_INDENT
    )
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


INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what shells report for a Ctrl-C'd command
# creditgym's packages, whose INFO messages an entry point shows.
LIBRARY_PACKAGES = ("creditgym", "__main__")


def show_library_progress() -> None:
    """Show INFO and above from creditgym's own loggers on stderr. The root logger keeps
    its WARNING level, so other libraries' INFO messages stay hidden."""
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(name)s: %(message)s")
    for name in LIBRARY_PACKAGES:
        logging.getLogger(name).setLevel(logging.INFO)


def exit_on_usage_error(main: Callable[[list[str] | None], int]) -> Callable[..., int]:
    """Wrap an entry point so a `UsageError` or a `DamagedFileError` prints one line and
    exits with status 2; the library's progress messages are shown
    (`show_library_progress`)."""

    def wrapped(argv: list[str] | None = None) -> int:
        show_library_progress()
        try:
            return main(argv)
        # A damaged results file is bad input too (its message names file and line and
        # what to do): every command reading run folders ends in one line, never a
        # traceback, whichever reader met the damage.
        except (UsageError, DamagedFileError) as error:
            print(f"error: {error}", file=sys.stderr)
            return USAGE_EXIT_CODE
        except KeyboardInterrupt:
            # Every finished episode and checkpoint is already on disk (fsynced records),
            # so the interrupted command resumes where it stopped; a traceback adds nothing.
            print(
                "\ninterrupted; finished work is saved: run the same command again to resume",
                file=sys.stderr,
            )
            return INTERRUPTED_EXIT_CODE
        except BrokenPipeError:
            # The reader went away (`... | head`): stop quietly, as Unix tools do. Python
            # would otherwise print a second error when it flushes stdout at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1

    wrapped.__doc__ = main.__doc__
    wrapped.__name__ = main.__name__
    return wrapped


def run_script(main: Callable[[T], object], config_type: type[T], module: str) -> int:
    """The `__main__` block of a script whose `main` takes its parsed config (the perf
    scripts): the command line parsed as every command's is (`parse_arguments`, a bad flag
    one line, exit status 2), then `main(config)` as before, its errors its own."""
    try:
        config = parse_arguments(config_type, None, prog_of(module))
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_EXIT_CODE
    main(config)
    return 0
