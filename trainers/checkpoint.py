"""Run state shared by the trainers: checkpoints, RNG states and the metrics log.

A checkpoint is one `state.pt` file per saved step, `<run_dir>/checkpoints/step_000012/`,
written to a temporary folder and renamed into place, so a run killed while saving
leaves either the previous checkpoint or the new one, never a half-written file. A
checkpoint damaged nonetheless (a disk error, a file truncated by hand) is reported in one
line naming it, and the run resumes from the newest one that loads (`load_newest_checkpoint`);
when none loads it stops with one line saying how to start training afresh.
It holds whatever the trainer puts in it; both trainers store the trainable
parameters (the LoRA adapter, or the whole model for full fine-tuning), the optimiser,
the credit module's `state_dict()`, the RNG states and the step.

`MetricsLog` writes one JSON line per optimiser step to `metrics.jsonl` (fsynced before
the step's checkpoint is written) and the same scalars to TensorBoard. On resume it drops
the records of steps after the checkpoint, so the log of a resumed run equals the log of
an uninterrupted one; a log whose steps are not 1, 2, ... up to the checkpoint's (a line
lost in the middle, a file cut short) is a `DamagedFileError` naming the line, never
resumed over. It also prints one
line per optimiser step (success, return, loss, gradient norm, phase times, throughput)
and appends the same lines to `train.log` in the run folder, which says when a run resumed.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from creditgym.agents.atomic import (
    DamagedFileError,
    atomic_folder,
    atomic_write_text,
    counted_records,
)
from creditgym.credit.base import CreditModule

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "step_"


def rng_state() -> dict[str, Any]:
    """Snapshot of every RNG a training step draws from (python, numpy, torch)."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore a snapshot taken by `rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters the optimiser updates: the LoRA adapter, or every weight (full FT)."""
    return {
        name: param.detach().clone()
        for name, param in model.named_parameters()
        if param.requires_grad
    }


def load_trainable_state_dict(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy saved trainable parameters back; every trainable parameter must be present."""
    params = dict(model.named_parameters())
    expected = {name for name, param in params.items() if param.requires_grad}
    if set(state) != expected:
        missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
        raise ValueError(
            "checkpoint does not match the model's trainable parameters "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]}); was it saved with a "
            "different model or fine-tuning mode?"
        )
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


def save_checkpoint(run_dir: str | os.PathLike, step: int, state: Mapping[str, Any]) -> Path:
    """Write `state` as the checkpoint of `step` atomically; returns its folder."""
    final = Path(run_dir) / "checkpoints" / f"{CHECKPOINT_PREFIX}{step:06d}"
    with atomic_folder(final) as staging:
        torch.save(dict(state), staging / "state.pt")
    return final


def complete_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The folders of every complete checkpoint (a `state.pt` inside), newest step first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    complete = [
        path
        for path in root.glob(f"{CHECKPOINT_PREFIX}*")
        if path.name[len(CHECKPOINT_PREFIX) :].isdigit() and (path / "state.pt").is_file()
    ]
    return sorted(complete, key=lambda path: int(path.name[len(CHECKPOINT_PREFIX) :]), reverse=True)


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The folder of the highest-step complete checkpoint, or None."""
    return next(iter(complete_checkpoints(run_dir)), None)


class UnreadableCheckpointError(DamagedFileError):
    """A run has checkpoints and none of them loads (the message says how to start afresh)."""


def load_newest_checkpoint(run_dir: str | os.PathLike) -> tuple[Path, dict[str, Any]] | None:
    """(folder, state) of the newest checkpoint that loads, or None when there is none.

    A checkpoint that fails to load is reported in one logged line naming its file, and the
    one before it is tried.

    Raises:
        UnreadableCheckpointError: checkpoints exist and none loads.
    """
    folders = complete_checkpoints(run_dir)
    for folder in folders:
        try:
            return folder, load_checkpoint(folder)
        # torch.load of a damaged file raises whatever its reader meets first (OSError,
        # EOFError, RuntimeError, KeyError, pickle errors): any of them means unreadable.
        except Exception as error:
            reason = (str(error).splitlines() or [""])[0]
            logger.warning(
                "checkpoint %s cannot be loaded (%s: %s); skipped",
                folder / "state.pt",
                type(error).__name__,
                reason,
            )
    if not folders:
        return None
    root = Path(run_dir) / "checkpoints"
    raise UnreadableCheckpointError(
        f"none of the {len(folders)} checkpoints in {root} loads (the lines above name each); "
        f"to train this run afresh, delete {root} and run the same command again"
    )


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint folder written by `save_checkpoint`."""
    file = Path(path) / "state.pt"
    if not file.is_file():
        raise FileNotFoundError(f"no checkpoint at {file}")
    # RNG states and optimiser state are plain python / numpy objects, hence weights_only=False;
    # checkpoints are files this project wrote itself.
    return torch.load(file, map_location="cpu", weights_only=False)


def prune_checkpoints(run_dir: str | os.PathLike, keep: int) -> None:
    """Delete all but the `keep` newest checkpoints (keep <= 0 keeps everything)."""
    if keep <= 0:
        return
    root = Path(run_dir) / "checkpoints"
    steps = sorted(
        path
        for path in root.glob(f"{CHECKPOINT_PREFIX}*")
        if path.name[len(CHECKPOINT_PREFIX) :].isdigit()
    )
    for path in steps[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


def training_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    credit: CreditModule,
    counters: Mapping[str, int],
    config: Any,
) -> dict[str, Any]:
    """Everything a resumed run needs to continue identically: trainable weights,
    optimiser, credit-module state (e.g. HP-RLVR's baseline), RNG states, the trainer's
    counters and its config (a dataclass)."""
    return {
        **counters,
        "trainable": trainable_state_dict(model),
        "optimizer": optimizer.state_dict(),
        "credit": credit.state_dict(),
        "rng": rng_state(),
        "config": asdict(config),
    }


def restore_training_state(
    state: Mapping[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    credit: CreditModule,
    counter_names: Iterable[str],
) -> dict[str, int]:
    """Load a `training_state` back in place; returns the named counters."""
    load_trainable_state_dict(model, state["trainable"])
    optimizer.load_state_dict(state["optimizer"])
    credit.load_state_dict(state["credit"])
    set_rng_state(state["rng"])
    return {name: int(state[name]) for name in counter_names}


TRAIN_LOG = "train.log"
# (metric, label, format) of the one-line summary of an optimiser step, in print order.
STEP_LINE_FIELDS = (
    ("rollout/success_rate", "success", "{:.2f}"),
    ("rollout/mean_return", "return", "{:.3f}"),
    ("losses/total", "loss", "{:.4f}"),
    ("charts/grad_norm", "grad", "{:.3g}"),
    ("time/rollout_s", "rollout", "{:.1f}s"),
    ("time/credit_s", "credit", "{:.1f}s"),
    ("time/train_s", "update", "{:.1f}s"),
    ("rollout/tokens_per_s", "gen", "{:.0f} tok/s"),
)


def step_line(step: int, total: int | None, record: Mapping[str, float]) -> str:
    """`step 3/8 | success 0.50 | return 0.412 | loss -0.0123 | ...` for the metrics present."""
    parts = [f"step {step}/{total}" if total else f"step {step}"]
    parts += [
        f"{label} {fmt.format(record[key])}"
        for key, label, fmt in STEP_LINE_FIELDS
        if key in record
    ]
    return " | ".join(parts)


class MetricsLog:
    """One JSON record per optimiser step (`metrics.jsonl`) plus TensorBoard scalars.

    Args:
        run_dir: the run folder; `metrics.jsonl` and `tensorboard/` go inside.
        resume_step: the step of the checkpoint a run resumes from (0 for a fresh run);
            records with a later step are dropped, since the resumed run rewrites them.
    """

    def __init__(
        self, run_dir: str | os.PathLike, resume_step: int = 0, total_steps: int | None = None
    ) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.text_path = Path(run_dir) / TRAIN_LOG
        self.total_steps = total_steps
        self.path.parent.mkdir(parents=True, exist_ok=True)
        written = self.read()
        # A step's record is written before its checkpoint: every step up to the one
        # resumed from must be there, or the resumed log would lack records for good.
        if len(written) < resume_step:
            raise DamagedFileError(
                f"{self.path}: holds the records of steps 1-{len(written)}, the checkpoint "
                f"resumed from is at step {resume_step}: records {len(written) + 1}-"
                f"{resume_step} are lost; delete the run folder to run it afresh"
            )
        kept = written[:resume_step]
        # Atomic: a kill during this rewrite must not lose the records of earlier steps.
        atomic_write_text(self.path, "".join(json.dumps(record) + "\n" for record in kept))
        # purge_step hides TensorBoard events that the resumed run will write again.
        self.writer = SummaryWriter(
            str(Path(run_dir) / "tensorboard"), purge_step=resume_step + 1 if resume_step else None
        )
        if resume_step:
            self.say(f"resumed from the checkpoint of optimiser step {resume_step}")

    def read(self) -> list[dict[str, Any]]:
        """All records written so far, steps 1, 2, ... (empty when the file does not exist);
        an incomplete last line is reported and not read; a damaged line, or a step missing
        or out of order, raises `DamagedFileError` naming the line."""
        return counted_records(self.path, "step")

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        """Append the record of optimiser step `step`, on disk (fsynced) before returning:
        the checkpoint written next must never be on disk without it."""
        record = {"step": step, **{key: float(value) for key, value in scalars.items()}}
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        for key, value in scalars.items():
            self.writer.add_scalar(key, float(value), step)
        self.writer.flush()
        self.say(step_line(step, self.total_steps, record))

    def say(self, line: str) -> None:
        """Print `line` (above any progress bar) and append it to `train.log`."""
        tqdm.write(line)
        with open(self.text_path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def close(self) -> None:
        self.writer.close()
