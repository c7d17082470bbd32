"""Command-line edge helpers: name lookup with suggestions, and one-line errors.

Every `benchmarks` entry point turns names into objects through `lookup` and reports
bad input as a `UsageError`: one line on stderr, exit status 2, no traceback; a command
line tyro cannot parse is one such line too (`parse_arguments`). Library
modules report one-off progress (a model download, a data set built on first use) through
`logging`; an entry point wrapped by `exit_on_usage_error` shows those messages on stderr.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from creditgym import cli
from creditgym.agents.atomic import DamagedFileError
from creditgym.cli import (  # re-exported: parsing lives beside the console script
    USAGE_EXIT_CODE,
    UsageError,
    argparse_error_line,
    box_sections,
    parse_arguments,
    tyro_error_line,
)

T = TypeVar("T")
__all__ = [
    "USAGE_EXIT_CODE",
    "UsageError",
    "argparse_error_line",
    "box_sections",
    "parse_arguments",
    "tyro_error_line",
]


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


def prog_of(module: str) -> str:
    """How usage lines name the command of `creditgym.benchmarks.<module>`: as typed through
    the console script (`creditgym run`, which sets argv[0] so), else the module form,
    which works both from a checkout and installed (`python -m benchmarks.run` finds no
    module once installed)."""
    invoked = sys.argv[0] if sys.argv else ""
    if invoked.startswith("creditgym "):
        return invoked
    return f"python -m creditgym.benchmarks.{module}"


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


def exit_on_usage_error(
    main: Callable[[list[str] | None], int] | None = None, *, resumes: bool = True
) -> Any:
    """Wrap an entry point so a `UsageError` or a `DamagedFileError` prints one line and
    exits with status 2, and Ctrl-C one line with status 130; the library's progress
    messages are shown (`show_library_progress`).

    `resumes`: whether running the command again continues where an interrupted one
    stopped (run folders, append-only tables); the Ctrl-C line says so only then. Use as
    `@exit_on_usage_error` or `@exit_on_usage_error(resumes=False)`."""
    if main is None:
        return functools.partial(exit_on_usage_error, resumes=resumes)
    interrupted = (
        "interrupted; finished work is saved: run the same command again to resume"
        if resumes
        else "interrupted"
    )

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
            print(f"\n{interrupted}", file=sys.stderr)
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
    """The `__main__` block of a perf script, `creditgym.benchmarks.<module>`, whose `main`
    takes its parsed config (`creditgym.cli.run_script`: a bad flag is one line, exit
    status 2)."""
    return cli.run_script(main, config_type, prog_of(module))
