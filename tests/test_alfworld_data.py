"""ALFWorld-v0's data: a wrong data folder is a clear error, and the game set played is
fingerprinted, recorded in the run folder and part of the run's identity."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from creditgym import envs
from creditgym.benchmarks.run import RunConfig, main, resolve
from creditgym.benchmarks.run.command import prepare_run_dir
from creditgym.envs.alfworld.data import (
    DEFAULT_SEED,
    DEFAULT_SIZES,
    ALFWorldDataError,
    data_fingerprint,
)
from creditgym.envs.alfworld.env import ALFWorldEnv
from creditgym.envs.alfworld.generate import GENERATOR_VERSION
from creditgym.report import records

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "tests" / "data" / "alfworld"
ALFWORLD_ID = "creditgym/ALFWorld-v0"
# An evaluation-only expert run: naming it builds no model and plays nothing.
EXPERT = {"env": "alfworld", "model": "expert", "credit": "none"}
# The game set ALFWorld-v0 plays with no data folder and no option set.
DEFAULT_GAME_SET = {
    "kind": "generated",
    "generator_version": GENERATOR_VERSION,
    "seed": DEFAULT_SEED,
    "sizes": DEFAULT_SIZES,
}


@pytest.fixture(autouse=True)
def no_alfworld_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a user who never set ALFWORLD_DATA."""
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)


def _fewer_games(tmp_path: Path) -> Path:
    """A copy of the committed test set without one of its train games."""
    root = tmp_path / "fewer"
    shutil.copytree(COMMITTED, root)
    shutil.rmtree(sorted((root / "json_2.1.1" / "train").iterdir())[0])
    return root


INSIDE = "points inside the data tree; point it at {root}, the folder holding json_2.1.1/"


@pytest.mark.parametrize(
    ("pointed_at", "expected"),
    [
        ("empty", "holds no json_2.1.1/ folder; expected {folder}/json_2.1.1/{{train,valid_seen"),
        ("json_2.1.1", INSIDE),  # one level too deep
        ("json_2.1.1/train", INSIDE),  # a split folder
        ("json_2.1.1/train/pick_heat_then_place_in_recep-Plate-None-Cabinet-17", INSIDE),
    ],
)
def test_wrong_alfworld_data_names_the_folder_expected(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pointed_at: str, expected: str
) -> None:
    # Before, a folder without json_2.1.1 silently fell back to the generated games.
    (tmp_path / "empty").mkdir()
    folder = tmp_path / "empty" if pointed_at == "empty" else COMMITTED / pointed_at
    message = expected.format(root=COMMITTED, folder=folder)
    monkeypatch.setenv("ALFWORLD_DATA", str(folder))
    with pytest.raises(ALFWorldDataError, match=re.escape(f"ALFWORLD_DATA={folder} {message}")):
        ALFWorldEnv()
    with pytest.raises(ALFWorldDataError, match=re.escape(f"data_dir {folder} {message}")):
        ALFWorldEnv(data_dir=str(folder))


def test_wrong_alfworld_data_is_one_line_at_the_command_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "empty"))
    out = tmp_path / "runs"
    argv = ["--env", "alfworld", "--model", "expert", "--credit", "none", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"ALFWORLD_DATA={tmp_path / 'empty'} holds no json_2.1.1/ folder" in err
    assert not (out.exists() and any(out.iterdir()))  # refused before any run folder


def _python(code: str, **environ: str) -> str:
    """stdout of `code` run by a fresh interpreter in the repository, with `environ` set
    (names mapped to "" are removed)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **environ}
    env = {name: value for name, value in env.items() if value}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_importing_the_env_creates_no_folder_and_keeps_alfworld_data_as_set(
    tmp_path: Path,
) -> None:
    # alfworld's own import creates $ALFWORLD_DATA (or ~/.cache/alfworld) and sets the
    # variable when unset; creditgym's import of it undoes both.
    home = tmp_path / "home"
    report = "import os, envs.alfworld.env; print(os.environ.get('ALFWORLD_DATA'))"
    typo = tmp_path / "typo" / "data"
    assert _python(report, HOME=str(home), ALFWORLD_DATA=str(typo)) == str(typo)
    assert _python(report, HOME=str(home), ALFWORLD_DATA="") == "None"
    assert not (tmp_path / "typo").exists() and not home.exists()


def test_alfworld_imported_first_still_means_the_generated_games(tmp_path: Path) -> None:
    # Then alfworld has already set ALFWORLD_DATA to its empty default folder.
    code = (
        "import alfworld.info, os\n"
        "from creditgym.envs.alfworld.data import named_data_root\n"
        "print(os.environ['ALFWORLD_DATA'] != '', named_data_root(None))"
    )
    assert _python(code, HOME=str(tmp_path), ALFWORLD_DATA="") == "True None"


def test_game_set_fingerprint_changes_with_the_game_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    default = data_fingerprint({})
    assert default.description == DEFAULT_GAME_SET
    others = [
        data_fingerprint({"generated_seed": 1}),
        data_fingerprint({"generated_sizes": {**DEFAULT_SIZES, "train": 10}}),
        data_fingerprint({"data_dir": str(COMMITTED)}),
        data_fingerprint({"data_dir": str(_fewer_games(tmp_path))}),
    ]
    descriptions = [json.dumps(f.description, sort_keys=True) for f in [default, *others]]
    assert len(set(descriptions)) == len(descriptions)
    committed = others[2].description
    assert committed["kind"] == "folder" and committed["games"]["train"]["count"] == 6
    # ALFWORLD_DATA names a folder the same way data_dir does; the env reports the same.
    monkeypatch.setenv("ALFWORLD_DATA", str(COMMITTED))
    assert data_fingerprint({}) == others[2] == ALFWorldEnv().game_set


def test_game_set_fingerprint_is_stable_across_processes() -> None:
    # Another interpreter (another hash seed, another cwd-independent path) agrees.
    code = (
        "import json\nfrom envs.alfworld.env import ALFWorldEnv\n"
        f"print(json.dumps(ALFWorldEnv(data_dir={str(COMMITTED)!r}).game_set.description))"
    )
    here = ALFWorldEnv(data_dir=str(COMMITTED)).game_set.description
    assert json.loads(_python(code, PYTHONHASHSEED="123")) == here


def test_a_run_on_another_game_set_gets_another_run_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg = RunConfig(out=tmp_path / "runs", **EXPERT)
    names = [resolve(cfg).name]
    for folder in (COMMITTED, _fewer_games(tmp_path)):
        monkeypatch.setenv("ALFWORLD_DATA", str(folder))
        names.append(resolve(cfg).name)
        config = records.read_json(prepare_run_dir(resolve(cfg)) / records.CONFIG_FILE)
        assert config["game_set"] == config["identity"]["game_set"]
        assert config["game_set"] == envs.data_fingerprint(ALFWORLD_ID, {}).description
    assert len(set(names)) == 3
    # The default set is recorded and hashed like any other.
    monkeypatch.delenv("ALFWORLD_DATA")
    config = records.read_json(prepare_run_dir(resolve(cfg)) / records.CONFIG_FILE)
    assert config["game_set"] == config["identity"]["game_set"] == DEFAULT_GAME_SET


def test_committed_run_folders_are_named_by_their_configuration() -> None:
    # Each committed run's name recomputed from its config.json, the default game set
    # (which the committed ALFWorld runs played) hashed like any other.
    fields = {field.name for field in dataclasses.fields(RunConfig)}
    folders = sorted((REPO / "results" / "runs").glob("*/" + records.CONFIG_FILE))
    assert any("alfworld" in path.parent.name for path in folders)
    for path in folders:
        config = {
            key: tuple(value) if isinstance(value, list) else value
            for key, value in json.loads(path.read_text()).items()
            if key in fields
        }
        assert resolve(RunConfig(**{**config, "out": Path(config["out"])})).name == path.parent.name
