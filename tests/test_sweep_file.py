"""Sweep files and command lines refused in one line (exit status 2) before any work: every
field of its declared type, integer seeds, no empty axis, no unknown key or section; tyro's
error boxes turned into one line."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from creditgym.benchmarks import leaderboard, sweep
from creditgym.benchmarks.cli import tyro_error_line
from creditgym.benchmarks.run import main as run_main
from creditgym.benchmarks.sweep_file import check_sweep_file


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("error: ")
    return err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[common]\nsteps = "abc"\n[[grid]]\nseed = [0]\n',
            "[common] steps = 'abc': expected an integer",
        ),
        (
            "[common]\neval_episodes = {a = 1}\n[[grid]]\nseed = 0\n",
            "eval_episodes = {'a': 1}: expected an integer",
        ),
        ("[[grid]]\nfaults = 3\n", "[grid] faults = 3: expected text or a list of text"),
        ("grid = 5\n", "no [[grid]] table (got 5)"),
        ("[[grid]]\nseed = 1.5\n", "[grid] seed = 1.5: expected an integer"),
        ("[[grid]]\nseed = [0, 1.5]\n", "a value of the axis seed = 1.5: expected an integer"),
        ("[[grid]]\nseed = true\n", "[grid] seed = true: expected an integer"),
        ("[[grid]]\nseed = []\n", "[grid] seed = []: an empty axis runs nothing"),
        ("[[grid]]\nsead = [0]\n", "unknown run option 'sead'. Did you mean seed"),
        ("[grids]\n[[grid]]\nseed = 0\n", "unknown section(s) grids"),
        ('[[grid]]\ndtype = "fp8"\n', "dtype = 'fp8': expected one of 'auto', 'float32'"),
        ("[[grid]]\nconstrained = 1\n", "constrained = 1: expected true or false"),
        ("[[grid]]\nlearning_rate = true\n", "learning_rate = true: expected a number"),
        ("[[grid]]\nseed = 0\n[[grid]]\nout = 'x'\n", "`out` belongs in [common]"),
        ("[[grid]]\nseed = -1\n", "--seed must be >= 0"),
        ("[common]\nsteps = 2\n", "no [[grid]] table"),
        ("common = 3\n[[grid]]\nseed = 0\n", "common = 3: expected a [common] table"),
        ("[[grid]\n", "is not valid TOML"),
    ],
)
def test_a_bad_sweep_file_is_one_line_exit_2_and_writes_nothing(text, expected, tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    out = tmp_path / "out" / "runs"
    assert sweep.main(["--config", str(path), "--out", str(out)]) == 2
    assert expected in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_a_sweep_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_bytes(b"[[grid]]\nenv = '\xff'\n")
    assert sweep.main(["--config", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "is not valid TOML" in one_error_line(capsys)


def test_the_committed_sweep_files_pass_the_checks():
    paths = sorted(Path("benchmarks/configs").glob("*.toml"))
    assert len(paths) >= 8
    for path in paths:
        check_sweep_file(path, tomllib.loads(path.read_text()))


@pytest.mark.parametrize(
    ("command", "argv", "expected"),
    [
        (run_main, ["--steps", "abc"], "Error parsing --steps: invalid literal for int()"),
        (run_main, ["--stepz", "3"], "Unrecognized options: --stepz, 3. Did you mean --steps?"),
        (run_main, ["--dtype", "fp8"], "invalid choice 'fp8' for argument '--dtype'"),
        (run_main, ["--steps"], "Missing value for argument '--steps'"),
        (sweep.main, [], "Missing from python -m creditgym.benchmarks.sweep: --config PATH."),
        (sweep.main, ["--config", "x", "--retries", "x"], "Error parsing --retries"),
        (leaderboard.main, ["--runz", "x"], "Did you mean --runs?"),
    ],
)
def test_a_command_line_tyro_cannot_parse_is_one_line_exit_2(command, argv, expected, capsys):
    assert command(argv) == 2
    err = one_error_line(capsys)
    assert expected in err and "--help` lists the options" in err


# tyro 1.0.17's output for `--stepz 3`, drawn as on a terminal and as into a pipe.
DRAWN = """\
╭─ Unrecognized options ───────────────────────────────────────────────────────╮
│ Unrecognized options: --stepz, 3                                             │
│ ──────────────────────────────────────────────────────────────────────────── │
│ Perhaps you meant:                                                           │
│     --steps INT                                                              │
│         Optimiser steps (policy_gradient: iterations of rollout -> credit -> │
│         update;                                                              │
│ ──────────────────────────────────────────────────────────────────────────── │
│ For full helptext, run p --help                                              │
╰──────────────────────────────────────────────────────────────────────────────╯
"""
PLAIN = """\
 Unrecognized options
 ------------------------------------------------------------------------------
  Unrecognized options: --stepz, 3
  ------------------------------------------------------------------------------
  Perhaps you meant:
      --steps INT
          Optimiser steps (policy_gradient: iterations of rollout -> credit ->
          update;
  ------------------------------------------------------------------------------
  For full helptext, run p --help
"""


@pytest.mark.parametrize("output", [DRAWN, PLAIN])
def test_tyros_error_is_read_from_either_drawing(output):
    assert tyro_error_line(output, "p") == (
        "Unrecognized options: --stepz, 3. Did you mean --steps? (`p --help` lists the options)"
    )
