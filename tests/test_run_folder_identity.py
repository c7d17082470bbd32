"""A run folder's identity judged from what it holds, and `--name` kept inside `--out`:
each refusal one line, exit status 2, the folder untouched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from creditgym.benchmarks.run import main
from creditgym.report import records

SCRIPTED = ["--env", "keydoor", "--credit", "none", "--sample-group-size", "0"]
RANDOM = [*SCRIPTED, "--model", "random", "--eval-episodes", "2"]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_named_folder_with_records_but_no_config_is_refused(tmp_path, capsys):
    out = tmp_path / "runs"
    assert main([*RANDOM, "--seed", "0", "--name", "mine", "--out", str(out)]) == 0
    (out / "mine" / records.CONFIG_FILE).unlink()
    before = snapshot(out / "mine")
    capsys.readouterr()
    # Another configuration (seed 7) under the same name: its episodes would join seed 0's.
    assert main([*RANDOM, "--seed", "7", "--name", "mine", "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert "holds run records" in err and "no config.json" in err
    assert snapshot(out / "mine") == before


def test_a_config_copied_over_another_runs_episodes_is_refused(tmp_path, capsys):
    out = tmp_path / "runs"
    assert main([*RANDOM, "--name", "random-run", "--out", str(out)]) == 0
    assert main([*SCRIPTED, "--model", "expert", "--eval-episodes", "2", "--name", "expert-run",
                 "--out", str(out)]) == 0  # fmt: skip
    # The expert's config.json over the random agent's episodes.
    shutil.copy(out / "expert-run" / records.CONFIG_FILE, out / "random-run" / records.CONFIG_FILE)
    before = snapshot(out / "random-run")
    capsys.readouterr()
    argv = [*SCRIPTED, "--model", "expert", "--eval-episodes", "4", "--name", "random-run"]
    assert main([*argv, "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert "episode 1 was played by 'random (eval-only)'" in err
    assert snapshot(out / "random-run") == before


def test_a_named_folder_of_another_configuration_is_refused(tmp_path, capsys):
    out = tmp_path / "runs"
    assert main([*RANDOM, "--seed", "0", "--name", "mine", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main([*RANDOM, "--seed", "7", "--name", "mine", "--out", str(out)]) == 2
    assert "holds another configuration (seed 0 there, 7 here)" in one_line_error(capsys)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../escape", "holds a path separator"),
        ("a/b", "holds a path separator"),
        ("..", "starts with a dot"),
        (".", "starts with a dot"),
        (".hidden", "starts with a dot"),
        ("", "is empty"),
        ("tab\there", "control character"),
    ],
)
def test_a_name_that_would_leave_out_is_refused_and_nothing_is_written(
    name, expected, tmp_path, capsys
):
    out = tmp_path / "inside" / "runs"
    assert main([*RANDOM, "--name", name, "--out", str(out)]) == 2
    assert expected in one_line_error(capsys)
    assert not (tmp_path / "inside").exists()


def test_an_absolute_name_is_refused(tmp_path, capsys):
    target = tmp_path / "elsewhere"
    assert main([*RANDOM, "--name", str(target), "--out", str(tmp_path / "runs")]) == 2
    assert "path separator" in one_line_error(capsys)
    assert not target.exists() and not (tmp_path / "runs").exists()
