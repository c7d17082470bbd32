"""tools/rename_runs.py renames a run folder whose env options were recorded as typed (a
default spelled out) to the name of their parsed form: nothing without --apply, then
once, with its config.json and a report listing it updated; a second run renames
nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from creditgym.benchmarks.run import RunConfig, resolve
from creditgym.benchmarks.run.identity import hashed_name, method_config, run_identity
from creditgym.report import records
from tools.rename_runs import main

# An evaluation-only scripted run on Umbrella with its default length spelled out.
TYPED = ("length=10", "num_distractors=0")


def typed_run_folder(out: Path) -> tuple[RunConfig, Path]:
    """A run folder named and recorded as the old rule did: the options hashed as typed."""
    cfg = RunConfig(env="umbrella", model="random", credit="none", env_options=TYPED, out=out)
    plan = resolve(cfg)
    old_plan = dataclasses.replace(plan, config=dataclasses.replace(plan.config, env_options=TYPED))
    identity = run_identity(old_plan)
    folder = out / hashed_name(old_plan, identity)
    folder.mkdir(parents=True)
    config = {
        **json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
        "env_id": plan.env_id,
        "run_name": folder.name,
        "identity": identity,
        "method_config": method_config(plan),
    }
    records.atomic_write_json(folder / records.CONFIG_FILE, config)
    return cfg, folder


def test_a_folder_named_from_typed_options_is_renamed_once(tmp_path, capsys) -> None:
    cfg, old = typed_run_folder(tmp_path / "runs")
    report = tmp_path / "runs" / "runs.csv"
    report.write_text(f"run,success\n{old.name},0.5\n")
    new_name = resolve(cfg).name
    assert old.name.startswith("umbrella-length10-numdistractors0_") and new_name != old.name

    assert main([str(tmp_path / "runs")]) == 0  # a dry run changes nothing
    assert "dry run: 1 of 1 run folder(s) to rename" in capsys.readouterr().out
    assert old.is_dir() and not (old.parent / new_name).exists()

    assert main(["--apply", str(tmp_path / "runs")]) == 0
    renamed = old.parent / new_name
    assert renamed.is_dir() and not old.exists()
    config = json.loads((renamed / records.CONFIG_FILE).read_text())
    assert config["env_options"] == ["num_distractors=0"] and config["run_name"] == new_name
    assert config["identity"] == resolve(cfg).identity
    assert report.read_text() == f"run,success\n{new_name},0.5\n"
    capsys.readouterr()

    assert main(["--apply", str(tmp_path / "runs")]) == 0
    assert "nothing to rename" in capsys.readouterr().out


def test_a_folder_whose_name_follows_from_neither_rule_stops_everything(tmp_path, capsys) -> None:
    _, old = typed_run_folder(tmp_path / "runs")
    stray = old.with_name("umbrella_random_eval-only_seed0_000000")
    old.rename(stray)
    assert main(["--apply", str(tmp_path / "runs")]) == 2
    assert "neither of which it has" in capsys.readouterr().err
    assert stray.is_dir()
