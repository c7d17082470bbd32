"""Every record file validated where it is read: the trainer's metrics step by step (a lost
line is named, never resumed over), samples, evaluation trajectories and summaries on
resume, and every report over a damaged run one line with exit status 2."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from creditgym.agents.atomic import DamagedFileError
from creditgym.benchmarks import leaderboard, study
from creditgym.benchmarks.run import main
from creditgym.report import records
from creditgym.trainers.checkpoint import MetricsLog

SAMPLED = ["--env", "keydoor", "--model", "random", "--credit", "none", "--eval-episodes", "3"]
SAMPLED += ["--sample-group-size", "2"]


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory) -> Path:
    """A folder of runs holding one finished scripted run with samples (made once)."""
    runs = tmp_path_factory.mktemp("finished") / "runs"
    assert main([*SAMPLED, "--out", str(runs)]) == 0
    return runs


def copy_of(finished_runs: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(runs folder, run folder): a fresh copy of `finished_runs` under `tmp_path`."""
    runs = shutil.copytree(finished_runs, tmp_path / "runs")
    (run_dir,) = records.run_dirs(runs)
    return runs, run_dir


def metrics_text(steps) -> str:
    return "".join(json.dumps({"step": step, "losses/total": 0.5}) + "\n" for step in steps)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_metrics_line_lost_in_the_middle_is_named_by_file_and_line(tmp_path):
    path = tmp_path / records.METRICS_FILE
    path.write_text(metrics_text([1, 2, 4, 5]))
    with pytest.raises(DamagedFileError, match=r"metrics\.jsonl:3: .*step 4 where step 3 belongs"):
        MetricsLog(tmp_path, resume_step=5)
    with pytest.raises(DamagedFileError, match=r"records 3-3 are missing"):
        records.read_metrics(tmp_path)
    assert path.read_text() == metrics_text([1, 2, 4, 5])  # left as found


def test_a_metrics_file_cut_short_of_the_checkpoint_is_refused_not_resumed(tmp_path):
    # Cut inside record 3 with the checkpoint at step 8: records 3-8 would be lost for good
    # behind one warning about an incomplete last line.
    path = tmp_path / records.METRICS_FILE
    text = metrics_text(range(1, 9))
    path.write_text(text[: text.index('{"step": 3') + 5])
    with pytest.raises(DamagedFileError, match=r"steps 1-2, .* step 8: records 3-8 are lost"):
        MetricsLog(tmp_path, resume_step=8)


def test_metrics_records_past_the_checkpoint_are_dropped_and_earlier_ones_kept(tmp_path):
    (tmp_path / records.METRICS_FILE).write_text(metrics_text([1, 2, 3]))
    log = MetricsLog(tmp_path, resume_step=2)
    log.close()
    assert [r["step"] for r in records.read_metrics(tmp_path)] == [1, 2]


def test_every_metrics_record_is_fsynced_before_write_returns(tmp_path, monkeypatch):
    log = MetricsLog(tmp_path)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync_seen(fd: int) -> None:  # the real fsync, noting which file it flushed
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_seen)
    log.write(1, {"losses/total": 0.5})
    log.close()
    assert str(tmp_path / records.METRICS_FILE) in synced


def damage(path: Path, line: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = text
    path.write_text("".join(lines))


@pytest.mark.parametrize(
    ("name", "line", "text", "expected"),
    [
        (records.SAMPLES_FILE, 2, "garbage\n", ":2: damaged record"),
        (records.SAMPLES_FILE, 1, '{"trajectory": 3}\n', ":1: not a sample trajectory"),
        (records.EVAL_TRAJECTORIES_FILE, 2, "{torn\n", ":2: damaged record"),
        (records.EVAL_TRAJECTORIES_FILE, 1, '{"split": "test"}\n', ":1: not an evaluation"),
    ],
)
def test_a_rerun_over_a_damaged_record_file_names_it_and_writes_no_summary(
    name, line, text, expected, finished_runs, tmp_path, capsys
):
    runs, run_dir = copy_of(finished_runs, tmp_path)
    argv = [*SAMPLED, "--out", str(runs)]
    damage(run_dir / name, line, text)
    (run_dir / records.DONE_FILE).unlink()
    capsys.readouterr()
    assert main(argv) == 2
    assert one_error_line(capsys).startswith(f"error: {run_dir / name}{expected}")
    assert not (run_dir / records.DONE_FILE).exists()


def test_a_garbage_training_summary_is_named_and_the_run_stops(finished_runs, tmp_path, capsys):
    runs, run_dir = copy_of(finished_runs, tmp_path)
    argv = [*SAMPLED, "--out", str(runs)]
    (run_dir / records.TRAINING_FILE).write_text("[1, 2")
    capsys.readouterr()
    assert main(argv) == 2
    assert one_error_line(capsys).startswith(f"error: {run_dir / records.TRAINING_FILE}:1:")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (records.SAMPLES_FILE, "garbage\n"),
        (records.EVAL_TRAJECTORIES_FILE, '{"split": "test", "index": "x"}\n'),
        (records.METRICS_FILE, '{"step": 2}\n'),
        (records.CURVE_FILE, '{"iteration": "a"}\n'),
    ],
)
def test_the_leaderboard_and_the_study_over_a_damaged_run_are_one_line_exit_2(
    name, text, finished_runs, tmp_path, capsys
):
    runs, run_dir = copy_of(finished_runs, tmp_path)
    path = run_dir / name
    if path.exists():
        damage(path, 1, text)
    else:
        path.write_text(text)
    capsys.readouterr()
    assert leaderboard.main(["--runs", str(runs), "--out", str(tmp_path / "board")]) == 2
    assert one_error_line(capsys).startswith(f"error: {path}:1:")
    assert not (tmp_path / "board" / "leaderboard.md").exists()
    assert study.main(["--runs", str(runs), "--out", str(tmp_path / "study")]) == 2
    assert one_error_line(capsys).startswith(f"error: {path}:1:")
