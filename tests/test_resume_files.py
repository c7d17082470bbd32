"""A run resumed after its training ended (the policy reloaded from `final/`) writes every
file as the uninterrupted run does, `samples.jsonl` included (tests/run_files.py)."""

from __future__ import annotations

import shutil

import pytest

from creditgym.benchmarks import run as run_module
from creditgym.report import records
from tests.run_files import assert_same_run_files

ARGV = [
    "--env", "keydoor", "--model", "small", "--credit", "hp_rlvr", "--steps", "2",
    "--eval-episodes", "8", "--eval-every", "1", "--curve-episodes", "2",
    "--sample-group-size", "3", "--threads", "1",
]  # fmt: skip
# What a kill between the export of `final/` and the end of the run leaves unwritten.
WRITTEN_AFTER_TRAINING = (
    records.EPISODES_FILE,
    records.EVAL_TRAJECTORIES_FILE,
    records.SAMPLES_FILE,
    records.DONE_FILE,
)


@pytest.mark.slow  # trains `small` two iterations, then evaluates and samples twice (~25 s)
def test_a_run_resumed_after_training_writes_every_file_as_the_uninterrupted_one(tmp_path):
    assert run_module.main([*ARGV, "--out", str(tmp_path / "clean")]) == 0
    (clean,) = (tmp_path / "clean").iterdir()
    resumed = tmp_path / "resumed" / clean.name
    shutil.copytree(clean, resumed)
    for name in WRITTEN_AFTER_TRAINING:
        (resumed / name).unlink()
    assert run_module.main([*ARGV, "--out", str(tmp_path / "resumed")]) == 0
    assert (resumed / records.SAMPLES_FILE).read_bytes().count(b"\n") == 3
    assert_same_run_files(clean, resumed)
