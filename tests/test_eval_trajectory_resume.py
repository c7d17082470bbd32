"""A kill between an episode's trajectory line and its episode record leaves the trajectory
alone; the resumed evaluation plays the episode again, so the lone line must go first or
eval_trajectories.jsonl would differ from an uninterrupted run's."""

from __future__ import annotations

import json

from creditgym.benchmarks.run import main
from creditgym.benchmarks.run.evaluate import drop_unrecorded_trajectories
from creditgym.report import records

EXPERT = ["--env", "keydoor", "--model", "expert", "--credit", "none", "--sample-group-size", "0"]


def test_a_trajectory_without_its_episode_record_is_dropped_and_replayed_byte_for_byte(
    tmp_path,
):
    assert main([*EXPERT, "--eval-episodes", "3", "--out", str(tmp_path / "clean")]) == 0
    [clean] = records.run_dirs(tmp_path / "clean")
    assert main([*EXPERT, "--eval-episodes", "3", "--out", str(tmp_path / "cut")]) == 0
    [cut] = records.run_dirs(tmp_path / "cut")
    # As a kill after episode 2's trajectory line and before its episode record leaves it.
    episodes = (cut / records.EPISODES_FILE).read_bytes().splitlines(keepends=True)
    (cut / records.EPISODES_FILE).write_bytes(b"".join(episodes[:2]))
    (cut / records.DONE_FILE).unlink()
    lone = (cut / records.EVAL_TRAJECTORIES_FILE).read_bytes()
    assert [json.loads(line)["index"] for line in lone.splitlines()] == [0, 1, 2]

    assert main([*EXPERT, "--eval-episodes", "3", "--out", str(tmp_path / "cut")]) == 0
    for name in (records.EPISODES_FILE, records.EVAL_TRAJECTORIES_FILE):
        assert (cut / name).read_bytes() == (clean / name).read_bytes(), name


def test_nothing_to_drop_leaves_the_file_untouched(tmp_path):
    assert main([*EXPERT, "--eval-episodes", "2", "--out", str(tmp_path)]) == 0
    [run_dir] = records.run_dirs(tmp_path)
    path = run_dir / records.EVAL_TRAJECTORIES_FILE
    before = path.stat().st_mtime_ns, path.read_bytes()
    drop_unrecorded_trajectories(run_dir)
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before
