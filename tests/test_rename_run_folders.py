"""tools/rename_run_folders.py renames a run folder named by the old run identity to the name
the current one gives it, once: a sweep resuming finds it there, a report listing it names
it anew, a second run renames nothing, and a taken target or a live writer stops it before
anything changes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from creditgym.benchmarks import lock
from creditgym.benchmarks.run import RunConfig, resolve
from creditgym.benchmarks.run.evaluate import missing_episodes
from creditgym.benchmarks.run.identity import hashed_name, method_config
from creditgym.report import records
from tools.rename_run_folders import main, old_identity

# An evaluation-only scripted run: naming it builds no model. K = 2, as every run prompted
# before --history-len existed.
SCRIPTED = {"env": "keydoor", "model": "random", "credit": "none", "eval_episodes": 2,
            "history_len": 2}  # fmt: skip


def old_run_folder(out: Path) -> tuple[RunConfig, Path]:
    """A run folder as the old rules named it, unfinished (no done.json), with one episode
    and the lock file a killed run leaves behind."""
    cfg = RunConfig(out=out, **SCRIPTED)
    identity = old_identity(resolve(cfg).identity)
    old_dir = out / hashed_name(resolve(cfg), identity)
    old_dir.mkdir(parents=True)
    config = {
        **json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
        "run_name": old_dir.name,
        "identity": identity,
        "method_config": method_config(resolve(cfg)),
    }
    for field in ("dtype", "history_len", "reward_channel"):  # written before they existed
        del config[field]
    records.atomic_write_json(old_dir / records.CONFIG_FILE, config)
    episode = records.EpisodeRecord(
        index=0, env="creditgym/KeyDoor-v0", split="test", task_id="t0", task_type="", seed=0,
        method="random (eval-only)", success=False, episode_return=0.0, steps=3,
        truncated=False, tokens=0, train_step=0,
    )  # fmt: skip
    (old_dir / records.EPISODES_FILE).write_text(json.dumps(episode.to_dict()) + "\n")
    lock.run_folder_lock(old_dir).write_text('{"pid": 1, "host": "gone", "since": "then"}\n')
    return cfg, old_dir


def test_an_old_named_folder_gets_its_new_name_once(tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    cfg, old_dir = old_run_folder(out)
    report = tmp_path / "runs.csv"
    report.write_text(f"run,seed\n{old_dir.name},0\n")
    assert old_dir.name != resolve(cfg).name

    assert main([str(tmp_path)]) == 0
    new_dir = out / resolve(cfg).name
    assert [p.name for p in out.iterdir()] == [new_dir.name]
    assert f"{old_dir} -> {new_dir.name}" in capsys.readouterr().out
    # The run resumes there: its episode is kept, the other one is still to play.
    assert [(split.name, index) for split, index in missing_episodes(resolve(cfg), new_dir)] == [
        ("test", 1)
    ]
    config = records.read_json(new_dir / records.CONFIG_FILE)
    assert config["run_name"] == new_dir.name and config["identity"] == resolve(cfg).identity
    assert config["dtype"] == "float32" and config["history_len"] == 2
    assert report.read_text() == f"run,seed\n{new_dir.name},0\n"

    assert main([str(tmp_path)]) == 0
    assert "nothing to rename" in capsys.readouterr().out
    assert [p.name for p in out.iterdir()] == [new_dir.name]


def test_a_taken_target_or_a_live_writer_changes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    cfg, old_dir = old_run_folder(out)
    (out / resolve(cfg).name).mkdir()  # another folder under the new name
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already is" in err and "nothing was changed" in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before

    (out / resolve(cfg).name).rmdir()
    with lock.hold(lock.run_folder_lock(old_dir), str(old_dir)):
        assert main([str(tmp_path)]) == 2
    assert "is being written by" in capsys.readouterr().err
    assert old_dir.is_dir() and not (out / resolve(cfg).name).exists()
