"""Damaged files: a corrupt record is an error naming its file and line, the incomplete last
line a kill leaves is reported when read and when cut off, a checkpoint that fails to
load is reported and passed over for the newest one that loads, and an exported policy
that fails to load is reported and exported again from the last checkpoint."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from creditgym.agents.atomic import DamagedFileError, cut_torn_tail, jsonl_records
from creditgym.benchmarks import leaderboard, sweep
from creditgym.benchmarks.run import main
from creditgym.report import records
from creditgym.trainers.checkpoint import (
    MetricsLog,
    UnreadableCheckpointError,
    load_newest_checkpoint,
    save_checkpoint,
)

EPISODE_ARGV = ["--env", "keydoor", "--model", "random", "--credit", "none"]
EPISODE_ARGV += ["--sample-group-size", "0"]


def write_lines(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


def test_an_incomplete_last_line_is_reported_with_its_line_and_not_read(tmp_path, caplog):
    path = write_lines(tmp_path / "a.jsonl", '{"i": 0}\n{"i": 1}\n{"i": 2, "x')
    with caplog.at_level(logging.WARNING):
        assert [record for _, record in jsonl_records(path)] == [{"i": 0}, {"i": 1}]
    assert f"{path}:3: incomplete last line" in caplog.text


@pytest.mark.parametrize(
    ("middle", "reason"),
    [
        ('{"i": 1, "x', "Unterminated string"),  # a torn write followed by more records
        ("", "Expecting value"),  # a blank line
        ("[1, 2]", "not a JSON object"),
        ("\x00\x00\x00\x00", "Expecting value"),  # a block of zeros after a crash
    ],
)
def test_a_damaged_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path, middle, reason):
    path = write_lines(tmp_path / "a.jsonl", f'{{"i": 0}}\n{middle}\n{{"i": 2}}\n')
    with pytest.raises(DamagedFileError, match=reason) as raised:
        list(jsonl_records(path))
    assert str(raised.value).startswith(f"{path}:2: damaged record")


def test_invalid_utf8_is_a_damaged_line_not_a_decoding_traceback(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"i": 0}\n{"i": "\xff\xfe"}\n')
    with pytest.raises(DamagedFileError, match=r"a\.jsonl:2: damaged record \(not UTF-8\)"):
        list(jsonl_records(path))


def test_cutting_a_torn_tail_says_which_line_it_dropped(tmp_path, caplog):
    path = write_lines(tmp_path / "a.jsonl", '{"i": 0}\n{"i": 1, "x')
    with caplog.at_level(logging.WARNING):
        assert cut_torn_tail(path) == len('{"i": 1, "x')
        assert cut_torn_tail(path) == 0  # nothing more to cut: no second report
    assert path.read_text() == '{"i": 0}\n'
    assert caplog.text.count("dropped an incomplete last line") == 1
    assert f"{path}:2:" in caplog.text


def test_an_episode_line_missing_a_field_names_file_and_line(tmp_path):
    good = records.EpisodeRecord(0, "env", "test", "t0", "", 1, "m", True, 1.0, 3, False, 0)
    line = json.dumps(good.to_dict())
    write_lines(tmp_path / records.EPISODES_FILE, f"{line}\n{line.replace('return', 'ret')}\n")
    with pytest.raises(DamagedFileError, match=r"episodes\.jsonl:2: not an episode record"):
        records.read_episodes(tmp_path)


def test_a_json_file_that_does_not_parse_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / records.CONFIG_FILE, '{\n  "seed": 0,\n  "env_id": \n')
    with pytest.raises(DamagedFileError, match=r"config\.json:4: damaged JSON file"):
        records.read_json(path)


def test_metrics_log_refuses_a_damaged_metrics_file_instead_of_rewriting_it(tmp_path):
    text = '{"step": 1}\nnot json\n{"step": 2}\n'
    write_lines(tmp_path / records.METRICS_FILE, text)
    with pytest.raises(DamagedFileError, match=r"metrics\.jsonl:2: damaged record"):
        MetricsLog(tmp_path, resume_step=2)
    assert (tmp_path / records.METRICS_FILE).read_text() == text  # left as found


def test_run_with_a_corrupt_episode_line_exits_2_naming_it_and_leaves_the_file(tmp_path, capsys):
    argv = [*EPISODE_ARGV, "--eval-episodes", "3", "--out", str(tmp_path)]
    assert main(argv) == 0
    (run_dir,) = records.run_dirs(tmp_path)
    path = run_dir / records.EPISODES_FILE
    lines = path.read_text().splitlines(keepends=True)
    damaged = "".join([lines[0], lines[1][: len(lines[1]) // 2] + "\n", lines[2]])
    path.write_text(damaged)
    capsys.readouterr()
    assert main([*argv[:-4], "--eval-episodes", "5", "--out", str(tmp_path)]) == 2
    assert one_error_line(capsys).startswith(f"error: {path}:2: damaged record")
    assert path.read_text() == damaged  # neither repaired nor extended


def test_run_resumed_after_a_torn_last_line_says_it_dropped_it(tmp_path, caplog):
    argv = [*EPISODE_ARGV, "--eval-episodes", "3", "--out", str(tmp_path)]
    assert main(argv) == 0
    (run_dir,) = records.run_dirs(tmp_path)
    path = run_dir / records.EPISODES_FILE
    (run_dir / records.DONE_FILE).unlink()  # as if killed while writing episode 3
    with open(path, "a") as handle:
        handle.write('{"index": 3, "env": "cre')
    with caplog.at_level(logging.WARNING):
        assert main([*argv[:-4], "--eval-episodes", "4", "--out", str(tmp_path)]) == 0
    assert f"{path}:4: incomplete last line (a write cut short), not read" in caplog.text
    assert f"{path}:4: dropped an incomplete last line" in caplog.text
    assert [e.index for e in records.read_episodes(run_dir)] == [0, 1, 2, 3]


def test_leaderboard_over_a_damaged_config_is_one_line_exit_2(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main([*EPISODE_ARGV, "--eval-episodes", "2", "--out", str(runs)]) == 0
    (run_dir,) = records.run_dirs(runs)
    config = run_dir / records.CONFIG_FILE
    config.write_text(config.read_text()[:100])
    capsys.readouterr()
    assert leaderboard.main(["--runs", str(runs)]) == 2
    assert one_error_line(capsys).startswith(f"error: {config}:")


def checkpoints(run_dir: Path, steps: int) -> list[Path]:
    return [save_checkpoint(run_dir, step, {"step": step}) for step in range(1, steps + 1)]


def truncate(folder: Path) -> Path:
    file = folder / "state.pt"
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    return file


def test_a_truncated_newest_checkpoint_is_named_and_the_one_before_is_used(tmp_path, caplog):
    saved = checkpoints(tmp_path, 3)
    damaged = truncate(saved[2])
    with caplog.at_level(logging.WARNING):
        folder, state = load_newest_checkpoint(tmp_path)
    assert folder == saved[1] and state["step"] == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith(f"checkpoint {damaged} cannot be loaded")


def test_no_loadable_checkpoint_says_how_to_start_afresh(tmp_path):
    for folder in checkpoints(tmp_path, 2):
        truncate(folder)
    with pytest.raises(UnreadableCheckpointError, match="none of the 2 checkpoints") as raised:
        load_newest_checkpoint(tmp_path)
    assert f"delete {tmp_path / 'checkpoints'} and run the same command again" in str(raised.value)
    assert load_newest_checkpoint(tmp_path / "fresh") is None  # no checkpoint: a fresh run


@pytest.mark.slow  # trains `tiny` for two iterations, then twice more from checkpoints
def test_training_resumes_from_the_newest_checkpoint_that_loads(tmp_path, capsys, caplog):
    argv = ["--env", "sysdiag", "--model", "tiny", "--credit", "grpo", "--steps", "2"]
    argv += ["--group-size", "2", "--eval-episodes", "1", "--max-episode-steps", "3"]
    argv += ["--sample-group-size", "0", "--out", str(tmp_path)]
    assert main(argv) == 0
    (run_dir,) = records.run_dirs(tmp_path)
    steps = [r["step"] for r in records.read_metrics(run_dir)]
    assert steps == [1, 2]

    def killed_before_export() -> None:
        # As if killed after the last checkpoint, before the export: training resumes.
        for name in (records.TRAINING_FILE, records.DONE_FILE, records.EPISODES_FILE):
            (run_dir / name).unlink()
        shutil.rmtree(run_dir / "final")

    killed_before_export()
    damaged = truncate(run_dir / "checkpoints" / "step_000002")
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 0
    assert f"checkpoint {damaged} cannot be loaded" in caplog.text
    assert "resumed from the checkpoint of optimiser step 1" in (run_dir / "train.log").read_text()
    assert [r["step"] for r in records.read_metrics(run_dir)] == steps  # step 2 played again
    assert torch.load(damaged, weights_only=False)["optimizer_step"] == 2  # rewritten whole

    killed_before_export()
    for folder in (run_dir / "checkpoints").iterdir():
        truncate(folder)
    caplog.clear()
    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 2
    assert one_error_line(capsys).startswith("error: none of the 2 checkpoints")
    assert caplog.text.count("cannot be loaded") == 2


@pytest.mark.slow  # trains `tiny` for one iteration, then loads and exports it again
def test_a_damaged_exported_policy_is_named_and_exported_again_from_the_last_checkpoint(
    tmp_path, caplog
):
    argv = ["--env", "sysdiag", "--model", "tiny", "--credit", "grpo", "--steps", "1"]
    argv += ["--group-size", "2", "--max-episode-steps", "3", "--sample-group-size", "0"]
    argv += ["--out", str(tmp_path)]
    assert main([*argv, "--eval-episodes", "1"]) == 0
    (run_dir,) = records.run_dirs(tmp_path)
    (weights,) = (run_dir / "final").glob("*.safetensors")
    exported = weights.read_bytes()
    weights.write_bytes(exported[:1000])  # a file cut short
    with caplog.at_level(logging.WARNING):
        assert main([*argv, "--eval-episodes", "2"]) == 0  # the trained policy plays one more
    assert f"the exported policy {run_dir / 'final'} cannot be loaded" in caplog.text
    assert weights.read_bytes() == exported  # the same weights, from the last checkpoint
    assert [r["step"] for r in records.read_metrics(run_dir)] == [1]  # nothing trained again
    assert [e.index for e in records.read_episodes(run_dir)] == [0, 1]


def damage_middle_line(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([lines[0], "{torn\n", *lines[1:]]))


def test_a_sweep_stops_on_a_damaged_finished_run_and_skips_a_damaged_unfinished_one(
    tmp_path, capsys
):
    config = tmp_path / "sweep.toml"
    config.write_text(
        '[common]\nenv = "keydoor"\ncredit = "none"\nmodel = "random"\neval_episodes = 2\n'
        "sample_group_size = 0\n\n[[grid]]\nseed = [0]\n"
    )
    argv = ["--config", str(config), "--out", str(tmp_path / "runs"), "--no-leaderboard"]
    assert sweep.main(argv) == 0
    (run_dir,) = records.run_dirs(tmp_path / "runs")
    damage_middle_line(run_dir / records.EPISODES_FILE)
    capsys.readouterr()
    assert sweep.main(argv) == 2  # checking which runs are finished reads the damage
    assert one_error_line(capsys).startswith(f"error: {run_dir / records.EPISODES_FILE}:2:")

    (run_dir / records.DONE_FILE).unlink()  # unfinished: the run itself meets the damage
    assert sweep.main(argv) == 1
    printed = capsys.readouterr()
    assert f"skipped, {run_dir / records.EPISODES_FILE}:2: damaged record" in printed.out
    assert "Traceback" not in printed.err
