"""Every file of two run folders compared: what a resumed run wrote against what the same
run writes uninterrupted (the exactly-once tests).

Each file a run writes (`report/records.py`'s layout) is compared by its own rule, and
a file that no rule names fails the comparison, so a new file cannot go unchecked:

- records and summaries: equal, less the fields measured in wall-clock time (and
  config.json's `out`, which names the folder each run was given);
- samples, episodes, the exported policy and every other data file: byte for byte;
- checkpoints: the loaded states equal, tensor by tensor (`torch.save`'s archive is not
  byte-stable across processes);
- TensorBoard: the same scalars at the same steps, less the clock ones (its event files
  are named by clock and process, one per attempt);
- the logs of what happened: `commands.txt` has a line per invocation (the same command,
  less its time stamp), `train.log` the same optimiser steps (less their timings and the
  lines saying where a run resumed).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from creditgym.benchmarks import lock
from creditgym.report import records

# Metric fields measured in wall-clock time: they differ between any two runs.
CLOCK_PREFIXES = ("time/", "rollout/tokens_per_s", "eval_s", "wall_seconds")


def without_clock(value: Any) -> Any:
    """`value` with every mapping's clock fields (`CLOCK_PREFIXES`) left out, recursively."""
    if isinstance(value, dict):
        return {
            key: without_clock(item)
            for key, item in value.items()
            if not str(key).startswith(CLOCK_PREFIXES)
        }
    if isinstance(value, list):
        return [without_clock(item) for item in value]
    return value


def same_state(a: Any, b: Any) -> bool:
    """Deep equality of loaded checkpoint states (tensors and arrays bit for bit)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
        )
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_state, a, b))
    return a == b


def jsonl(path: Path) -> list[Any]:
    return [without_clock(json.loads(line)) for line in path.read_text().splitlines()]


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> (step, value) of every scalar the folder's event files hold, as TensorBoard
    shows them (a resumed run's purge of the steps it rewrote applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
        if not tag.startswith(CLOCK_PREFIXES)
    }


def commands_run(path: Path) -> set[tuple[str, ...]]:
    """commands.txt: the commands that worked in the folder, less their time stamps and
    `--out` (the folder each run was given)."""
    commands = set()
    for line in path.read_text().splitlines():
        words = shlex.split(line.split(" ", 1)[1])
        at = words.index("--out")
        commands.add(tuple(words[:at] + words[at + 2 :]))
    return commands


def steps_logged(path: Path) -> set[str]:
    """train.log: which optimiser steps it reports (`step 2/3`), less their timings."""
    lines = path.read_text().splitlines()
    return {line.split(" |")[0] for line in lines if line.startswith("step ")}


def config_without_out(path: Path) -> Any:
    return {key: value for key, value in json.loads(path.read_text()).items() if key != "out"}


def checkpoint(path: Path) -> Any:
    """A checkpoint's state, less the state of Python's own `random`: the interpreter
    seeds it from the OS at start, no run seeds it (trainers/core.py seeds torch) and no
    run draws from it (no call during a training run), so it holds whichever process
    first wrote the checkpoint's seed, a difference that reaches no result."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    state["rng"].pop("python")
    return state


# (how a file is named, relative to the run folder -> its comparable form), first match wins.
RULES: list[tuple[Callable[[str], bool], Callable[[Path], Any]]] = [
    (lambda name: name == records.CONFIG_FILE, config_without_out),
    (
        lambda name: name in (records.TRAINING_FILE, records.DONE_FILE),
        lambda p: without_clock(json.loads(p.read_text())),
    ),
    (lambda name: name in (records.METRICS_FILE, records.CURVE_FILE), jsonl),
    (lambda name: name == records.COMMANDS_FILE, commands_run),
    (lambda name: name == "train.log", steps_logged),
    (lambda name: name.startswith("checkpoints/") and name.endswith(".pt"), checkpoint),
    (
        lambda name: (
            name == records.PROVENANCE_FILE
            or name in (records.EPISODES_FILE, records.SAMPLES_FILE, records.EVAL_TRAJECTORIES_FILE)
            or name.startswith("final/")
        ),
        Path.read_bytes,
    ),
]
NOT_WRITTEN_BY_A_FINISHED_RUN = {lock.RUN_LOCK_FILE}


# TensorBoard names its event files by clock and process (a resumed run leaves one per
# attempt): the folder is compared as a whole, by the scalars it holds.
TENSORBOARD = "tensorboard"


def files_of(run_dir: Path) -> set[str]:
    return {
        str(path.relative_to(run_dir))
        for path in run_dir.rglob("*")
        if path.is_file()
        and path.name not in NOT_WRITTEN_BY_A_FINISHED_RUN
        and path.relative_to(run_dir).parts[0] != TENSORBOARD
    }


def assert_same_run_files(expected: Path, actual: Path) -> None:
    """Every file of the two run folders equal by its rule; the same files in both."""
    names = files_of(expected)
    assert files_of(actual) == names, sorted(files_of(actual) ^ names)
    for name in sorted(names):
        rule = next((form for named, form in RULES if named(name)), None)
        assert rule is not None, f"{name}: a file no rule of tests/run_files.py compares"
        assert same_state(rule(actual / name), rule(expected / name)), name
    assert (expected / TENSORBOARD).is_dir() == (actual / TENSORBOARD).is_dir()
    if (expected / TENSORBOARD).is_dir():
        assert tensorboard_scalars(actual / TENSORBOARD) == tensorboard_scalars(
            expected / TENSORBOARD
        ), TENSORBOARD
