"""Checkpoint files, RNG snapshots and the resumable metrics log (trainers/checkpoint.py)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from creditgym.trainers.checkpoint import (
    MetricsLog,
    latest_checkpoint,
    load_checkpoint,
    load_trainable_state_dict,
    prune_checkpoints,
    rng_state,
    save_checkpoint,
    set_rng_state,
    trainable_state_dict,
)


def test_rng_state_round_trip_replays_the_same_draws():
    state = rng_state()
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    set_rng_state(state)
    again = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    assert first == again


def test_trainable_state_dict_holds_only_trainable_parameters_and_restores_them():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    model[0].requires_grad_(False)
    saved = trainable_state_dict(model)
    assert set(saved) == {"1.weight", "1.bias"}
    with torch.no_grad():
        model[1].weight.add_(1.0)
    load_trainable_state_dict(model, saved)
    assert torch.equal(model[1].weight, saved["1.weight"])


def test_loading_a_checkpoint_of_another_model_names_the_mismatch():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="missing"):
        load_trainable_state_dict(model, {"weight": torch.zeros(2, 2)})


def test_latest_checkpoint_ignores_partial_folders_and_prune_keeps_newest(tmp_path):
    for step in (1, 2, 10):
        save_checkpoint(tmp_path, step, {"step": step})
    (tmp_path / "checkpoints" / "step_000099").mkdir()  # killed before state.pt landed
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and load_checkpoint(latest)["step"] == 10
    prune_checkpoints(tmp_path, keep=2)
    remaining = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert remaining == ["step_000010", "step_000099"]
    assert latest_checkpoint(tmp_path / "nowhere") is None


def test_metrics_log_drops_records_after_the_resume_step(tmp_path):
    log = MetricsLog(tmp_path)
    for step in (1, 2, 3):
        log.write(step, {"losses/policy": step * 0.5})
    log.close()
    resumed = MetricsLog(tmp_path, resume_step=2)
    resumed.write(3, {"losses/policy": 9.0})
    resumed.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["losses/policy"]) for r in lines] == [(1, 0.5), (2, 1.0), (3, 9.0)]
    assert any((tmp_path / "tensorboard").iterdir())


def test_a_staging_folder_left_by_a_killed_save_is_removed_by_the_next_save(tmp_path):
    root = tmp_path / "checkpoints"
    left = root / ".step_000003.partial_killed"  # what a kill during torch.save leaves
    left.mkdir(parents=True)
    (left / "state.pt").write_bytes(b"half a checkpoint")
    other = root / ".step_000004.partial_killed"  # another checkpoint's: not this save's
    other.mkdir()
    saved = save_checkpoint(tmp_path, 3, {"step": 3})
    assert not left.exists() and other.exists()
    assert load_checkpoint(saved)["step"] == 3
    assert oct(saved.stat().st_mode & 0o777) == oct(0o755)  # readable like every output
