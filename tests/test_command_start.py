"""Starting a command: a light install (no training stack) gets one line naming the extra,
Ctrl-C during the imports one line, every command a message or usage line names works
from a checkout and installed, and no hub is asked for a model nobody named for it.

The light install is this venv with the optional extras' packages made unimportable at
start-up (a `sitecustomize` on PYTHONPATH whose import finder refuses them, as an
environment without them would): what the commands meet there is what `pip install
creditgym` gives. "Installed" runs a command from a folder outside the checkout, where
only the installed `creditgym` package resolves (`python -m benchmarks.run` does not).
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import runpy
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import pytest

from creditgym import cli
from creditgym.cli import COMMANDS, extras_by_package
from creditgym.models.registry import ALLOW_HUB_ENV, ModelUnavailableError, load_model

REPO = Path(__file__).resolve().parent.parent
CREDITGYM = Path(sys.executable).parent / "creditgym"
OPTIONAL = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
# What `pip install creditgym` leaves out: every optional extra's packages.
NOT_IN_THE_LIGHT_INSTALL = sorted(
    {
        re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("-", "_")
        for requirements in OPTIONAL.values()
        for requirement in requirements
    }
    - {"creditgym"}
)
BLOCKER = textwrap.dedent(
    f"""
    import importlib.abc
    import sys

    ABSENT = {NOT_IN_THE_LIGHT_INSTALL!r}

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ABSENT:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    """
)


@pytest.fixture(scope="module")
def light_env(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("light")
    (folder / "sitecustomize.py").write_text(BLOCKER)
    return {**os.environ, "PYTHONPATH": str(folder)}


def stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_the_extras_of_each_package_are_read_from_what_pyproject_declares():
    extras = extras_by_package()
    assert extras["torch"] == "train" and extras["pandas"] == "train"
    assert extras["trl"] == "trl" and extras["verl"] == "verl"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_needing_the_training_stack_says_which_extra_in_one_line(command, light_env):
    result = subprocess.run(
        [str(CREDITGYM), command, "--help"],
        capture_output=True, text=True, env=light_env, cwd=REPO, timeout=120,
    )  # fmt: skip
    lines = stderr_lines(result.stderr)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    if result.returncode == 0:  # a command that runs on the core set: its help
        assert "usage" in result.stdout.lower()
        return
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert re.fullmatch(
        rf"error: creditgym {command} needs \w+, which this install lacks \(the '\w+' extra\): "
        r"pip install 'creditgym\[\w+\]'",
        lines[0],
    ), lines[0]


@pytest.mark.parametrize("module", ["run", "sweep", "leaderboard"])
def test_a_module_run_with_python_m_in_the_light_install_is_one_line_too(module, light_env):
    result = subprocess.run(
        [sys.executable, "-m", f"creditgym.benchmarks.{module}", "--help"],
        capture_output=True, text=True, env=light_env, cwd=REPO, timeout=120,
    )  # fmt: skip
    lines = stderr_lines(result.stderr)
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"error: python -m creditgym.benchmarks.{module} needs ")
    assert lines[0].endswith("pip install 'creditgym[train]'")


def test_an_unknown_model_fails_at_once_without_asking_a_hub(monkeypatch):
    monkeypatch.delenv(ALLOW_HUB_ENV, raising=False)
    started = time.monotonic()
    refusal = f"hub lookups are off: set {ALLOW_HUB_ENV}=1"
    for name in ("nosuch-model-xyz", "nosuch-org/nosuch-model-xyz"):
        with pytest.raises(ModelUnavailableError, match=refusal):
            load_model(name)
    # A hub lookup where none is reachable takes about a minute of retries.
    assert time.monotonic() - started < 10


# The folders of the installed package (`creditgym.<folder>`, creditgym/ itself).
PACKAGE_FOLDERS = (
    "creditgym", "agents", "benchmarks", "credit", "envs", "integrations", "measure", "models",
    "report", "trainers",
)  # fmt: skip
# Modules with a `__main__` block that take no flags of a user's, each with its reason.
NOT_COMMANDS = {
    "creditgym/cli.py": "the console script itself, whose commands are tested one by one",
    "envs/code/sandbox.py": "the code env's fork server, started by the env with its own argv",
    "agents/tokenizer_corpus.py": "a maintainer's rebuild whose one argument is the file to write",
}
# Every module a user runs, found rather than listed (a new command is covered at once):
# each module of the package with a `__main__` block (the perf scripts, the ALFWorld game
# generator), as `<folder>.<module>`: `python -m creditgym.<folder>.<module>` runs it (a
# package's `__main__.py` as the package: `benchmarks.run`).
COMMAND_MODULES = sorted(
    ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__main__")
    for folder in PACKAGE_FOLDERS
    for path in (REPO / folder).rglob("*.py")
    if 'if __name__ == "__main__":' in path.read_text()
    and str(path.relative_to(REPO)) not in NOT_COMMANDS
)
BAD_FLAGS = ["--no-such-flag", "1"]


def assert_one_usage_line(status: object, err: str, prog: str) -> None:
    lines = stderr_lines(err)
    assert status == 2 and len(lines) == 1, (status, err[-3000:])
    # The unknown flag, or a required one missing, which tyro reports first.
    assert lines[0].startswith("error: "), lines[0]
    assert lines[0].endswith(f"(`{prog} --help` lists the options)"), lines[0]


def test_the_commands_found_include_every_console_command_and_the_perf_scripts():
    assert {f"benchmarks.{module}" for module in COMMANDS.values()} <= set(COMMAND_MODULES)
    assert "benchmarks.perf.bench_matmul" in COMMAND_MODULES
    assert "benchmarks.dependency_locks" in COMMAND_MODULES
    assert "envs.alfworld.generate" in COMMAND_MODULES
    for file in NOT_COMMANDS:
        assert 'if __name__ == "__main__":' in (REPO / file).read_text(), file


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy's re-run
@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_a_bad_flag_of_every_command_module_is_one_line_and_exit_2(module, monkeypatch, capsys):
    # As `python -m creditgym.<module> --no-such-flag 1` runs it: its `__main__` block.
    monkeypatch.setattr(sys, "argv", [str(REPO / module.replace(".", "/")), *BAD_FLAGS])
    with pytest.raises(SystemExit) as exit:
        runpy.run_module(f"creditgym.{module}", run_name="__main__", alter_sys=True)
    assert_one_usage_line(exit.value.code, capsys.readouterr().err, f"python -m creditgym.{module}")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_flag_of_every_console_command_is_one_line_and_exit_2(command, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["creditgym", command, *BAD_FLAGS])  # it sets argv[0]
    status = cli.main([command, *BAD_FLAGS])
    assert_one_usage_line(status, capsys.readouterr().err, f"creditgym {command}")


# Where a command line is parsed: `creditgym.cli.parse_arguments` alone (envs/ may import
# it, not benchmarks/), so that every command refuses a bad flag the same way. Other
# calls, each with its reason.
OTHER_PARSERS = {
    # Re-reads the command recorded in a committed report, not a user's flags.
    "benchmarks/credit_truth.py",
}
PARSER_CALL = re.compile(r"\btyro\.cli\(|\.parse_args\(")


def test_no_command_parses_its_flags_but_through_the_shared_helper():
    sources = [path for folder in PACKAGE_FOLDERS for path in (REPO / folder).rglob("*.py")]
    callers = {
        str(path.relative_to(REPO))
        for path in sources
        if PARSER_CALL.search(path.read_text()) and path != REPO / "creditgym/cli.py"
    }
    assert callers == OTHER_PARSERS


# The forms of a command a message may name: the console script's commands, and modules of
# the installed package (both resolve from a checkout and from anywhere else).
NAMED_COMMAND = re.compile(r"python -m ([A-Za-z_][\w.]*)|(?:^|`)creditgym ([a-z][a-z-]*)")
# Where messages and usage lines are written: every module of the installed package, found
# rather than listed (a message added anywhere is checked).
MESSAGE_FILES = sorted(
    str(path.relative_to(REPO))
    for folder in PACKAGE_FOLDERS
    for path in (REPO / folder).rglob("*.py")
)
# A checkout-only form a string names on purpose: (file, command) -> why.
NAMED_ON_PURPOSE = {
    ("benchmarks/credit_truth.py", "python -m benchmarks"): (
        "the pattern that reads back the command of reports written before it was renamed"
    ),
}


def message_strings(source: str) -> list[str]:
    """Every string literal of a module but its docstrings (messages, usage lines)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    ]  # fmt: skip


def named_commands(source: str) -> set[str]:
    """The commands the messages of a module name, as argv prefixes; a module name an
    f-string completes (`python -m creditgym.benchmarks.{module}`) ends in `.*`."""
    return set().union(set(), *map(named_in_text, message_strings(source)))


def named_in_text(text: str) -> set[str]:
    """The commands a text names (a message, a command's --help output), as in
    `named_commands`."""
    named = set()
    for module, command in NAMED_COMMAND.findall(text):
        module = f"{module}*" if module.endswith(".") else module
        named.add(f"python -m {module}" if module else f"creditgym {command}")
    return named


def named_in_messages() -> set[str]:
    """The commands every message and usage line of the package names, but
    `NAMED_ON_PURPOSE`."""
    return {
        command
        for file in MESSAGE_FILES
        for command in named_commands((REPO / file).read_text())
        if (file, command) not in NAMED_ON_PURPOSE
    }


def help_text(module: str) -> str:
    """What `python -m creditgym.<module> --help` prints (run in this process, wide)."""
    out, argv, columns = io.StringIO(), sys.argv, os.environ.get("COLUMNS")
    sys.argv, os.environ["COLUMNS"] = [str(REPO / module.replace(".", "/")), "--help"], "400"
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit:
            runpy.run_module(f"creditgym.{module}", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = argv
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    assert exit.value.code in (0, None), (module, exit.value.code)
    return out.getvalue()


def works_installed(command: str) -> bool:
    """A console-script command, or a module of the installed `creditgym` package."""
    words = command.split()
    if words[0] == "creditgym":
        return words[1] in COMMANDS
    return words[2].startswith("creditgym.")


def test_every_command_a_message_names_works_installed_and_the_guard_catches_one_that_does_not():
    named = named_in_messages()
    assert "python -m creditgym.envs.alfworld.generate" in named
    assert "creditgym study" in named  # the command a study report records
    assert sorted(c for c in named if not works_installed(c)) == []
    for file, command in NAMED_ON_PURPOSE:  # each exception still needed
        assert command in named_commands((REPO / file).read_text()), (file, command)
    # A planted message naming the checkout-only form is caught.
    planted = named_commands('raise ValueError("run `python -m benchmarks.run --steps 2`")')
    assert [c for c in planted if not works_installed(c)] == ["python -m benchmarks.run"]


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy's re-run
@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_every_command_a_commands_help_names_works_installed(module):
    # tyro and argparse show a module's or a config's docstring as the description.
    named = named_in_text(help_text(module))
    assert sorted(c for c in named if not works_installed(c)) == [], module


def argv_of(command: str) -> list[str]:
    """The argv that runs a named command here (`python` is this interpreter)."""
    words = command.split()
    return [sys.executable, *words[1:]] if words[0] == "python" else [str(CREDITGYM), *words[1:]]


@pytest.mark.slow  # 2 x 44 fresh interpreters, most importing torch (about 9 min on 2 cores)
@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy's re-run
def test_each_named_commands_help_works_from_a_checkout_and_installed(tmp_path):
    # The commands to run are read from the messages and from every command's --help, so a
    # command named anywhere new is run without being listed here.
    named = named_in_messages().union(*(named_in_text(help_text(m)) for m in COMMAND_MODULES))
    commands = {f"creditgym {command}" for command in COMMANDS}
    commands |= {command for command in named if not command.endswith(".*")}  # no templates
    assert "python -m creditgym.envs.alfworld.generate" in commands
    for where in (REPO, tmp_path):  # a checkout, and anywhere else (installed)
        for argv in map(argv_of, sorted(commands)):
            result = subprocess.run(
                [*argv, "--help"], capture_output=True, text=True, cwd=where, timeout=300
            )
            assert result.returncode == 0, (where, argv, result.stderr[-1500:])
            assert "usage" in result.stdout.lower(), (where, argv)


def interrupted(argv: list[str], after_s: float) -> subprocess.CompletedProcess:
    """Run `argv` in its own process group, SIGINT the group after `after_s` seconds (as
    a terminal's Ctrl-C does), and return how it ended."""
    process = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    time.sleep(after_s)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


SCRIPTED = ["--model", "random", "--credit", "none", "--sample-group-size", "0"]


@pytest.mark.slow  # twelve interpreters started and interrupted (about 40 s on 2 cores)
@pytest.mark.parametrize(
    "form",
    [
        [sys.executable, "-m", "benchmarks.run"],
        [sys.executable, "-m", "creditgym.benchmarks.run"],
        [str(CREDITGYM), "run"],
    ],
    ids=["python -m benchmarks.run", "python -m creditgym.benchmarks.run", "creditgym run"],
)
@pytest.mark.parametrize("after_s", [0.4, 1.0, 1.6, 2.5])
def test_ctrl_c_in_the_first_seconds_prints_one_line(form, after_s, tmp_path):
    # The imports take seconds; a Ctrl-C among them (the issue: 50 lines in the first
    # 2.5 s) is one line, whichever library's import it lands in.
    result = interrupted([*form, *SCRIPTED, "--out", str(tmp_path)], after_s)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in stderr_lines(result.stderr) if "ep/s" not in line]
    assert result.returncode == 130 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0] in (
        "interrupted while starting; nothing was done",
        "interrupted; finished work is saved: run the same command again to resume",
    )


@pytest.mark.parametrize(
    ("resumes", "line"),
    [
        (True, "interrupted; finished work is saved: run the same command again to resume"),
        (False, "interrupted"),
    ],
)
def test_ctrl_c_line_promises_a_resume_only_for_commands_that_resume(capsys, resumes, line):
    from creditgym.benchmarks.cli import exit_on_usage_error

    @exit_on_usage_error(resumes=resumes)
    def main(argv: list[str] | None = None) -> int:
        raise KeyboardInterrupt

    assert main([]) == 130
    assert capsys.readouterr().err.strip() == line


def test_commands_that_write_no_resumable_records_do_not_promise_a_resume():
    # leaderboard, study and the GPU/lock tools rebuild or check; nothing to resume.
    for module in ("leaderboard", "study", "dependency_locks", "gpu_check", "gpu_wheels"):
        source = (REPO / "benchmarks" / f"{module}.py").read_text(encoding="utf-8")
        assert "@exit_on_usage_error(resumes=False)" in source, module
