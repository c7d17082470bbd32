"""Atomic writes: the old content or the complete new one, never part, and no leftovers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from creditgym.agents.atomic import atomic_folder, atomic_write_bytes, atomic_write_text


class Interrupted(Exception):
    pass


def test_atomic_write_text_replaces_the_file_readable_by_all(tmp_path: Path):
    path = tmp_path / "sub" / "config.json"
    atomic_write_text(path, "old\n")
    atomic_write_text(path, "new ü\n")
    assert path.read_text(encoding="utf-8") == "new ü\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(path.parent) == ["config.json"]


def test_a_failed_text_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path):
    path = tmp_path / "episodes.txt"
    atomic_write_text(path, "old\n")

    with pytest.raises(TypeError):
        atomic_write_bytes(path, 12)  # type: ignore[arg-type]  # write() refuses non-bytes
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["episodes.txt"]


def test_atomic_folder_replaces_an_older_folder_only_when_the_block_succeeds(tmp_path: Path):
    final = tmp_path / "checkpoints" / "step_000001"
    with atomic_folder(final) as staging:
        (staging / "state.pt").write_text("first")
    with pytest.raises(Interrupted), atomic_folder(final) as staging:
        (staging / "state.pt").write_text("half")
        raise Interrupted
    assert (final / "state.pt").read_text() == "first"
    assert os.listdir(final.parent) == ["step_000001"]
    with atomic_folder(final) as staging:
        (staging / "state.pt").write_text("second")
    assert (final / "state.pt").read_text() == "second"
    assert os.listdir(final.parent) == ["step_000001"]
