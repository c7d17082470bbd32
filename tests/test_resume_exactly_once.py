"""Exactly-once resume: a training run killed with SIGKILL at 20 moments, resumed each time,
ends with what the same run writes uninterrupted.

The run is `python -m benchmarks.run`'s own entry point (`benchmarks.run.main`) on a
fixed-seed `small` KeyDoor training run with HP-RLVR (a credit phase that runs the model,
a credit state that is checkpointed), a learning curve and a two-batch evaluation. Each
run is a child forked from this test process, which has already imported everything, so
an attempt pays no interpreter start: the code path is the command's, from `main` on.

The kill moments are a seeded choice, four in each phase -- rollout, credit, update,
checkpoint writing, evaluation -- at iterations and fractions of the phase drawn at
random, placed with the uninterrupted run's phase timings and the resumed run's own
phase markers (its progress bars and step lines on stderr, the checkpoint's staging
folder on disk); which phase each kill landed in is read back from the same markers.
What is compared (docs/running.md, "Faults"): every file the run writes, each by its
rule (tests/run_files.py): `episodes.jsonl`, `samples.jsonl`, the evaluation trajectories
and the exported policy byte for byte, the records and summaries without their wall-clock
fields, the checkpoints tensor by tensor, TensorBoard's scalars.
"""

from __future__ import annotations

import os
import random
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import torch

from creditgym.benchmarks import run as run_module
from creditgym.report import records
from tests.run_files import assert_same_run_files

ITERATIONS = 3
EVAL_EPISODES = 16  # two evaluation batches of 8
ARGV = [
    "--env", "keydoor", "--model", "small", "--credit", "hp_rlvr",
    "--steps", str(ITERATIONS), "--eval-episodes", str(EVAL_EPISODES),
    "--eval-batch-size", "8", "--eval-every", "2", "--curve-episodes", "4",
    "--sample-group-size", "2", "--threads", "1",
]  # fmt: skip
PHASES = ("rollout", "credit", "update", "checkpoint", "evaluation")
KILLS_PER_PHASE = 4
KILL_SEED = 20261203
# A kill aimed into the update (hp_rlvr on `small`: tens of milliseconds) can land after it
# when the machine's load shifts (seen: all 12 tries of one run); each retry aims 4x
# earlier in the phase, so four reach the moment its bar appears.
RETRIES_PER_KILL = 4
ATTEMPT_TIMEOUT_S = 120.0
ROLLOUT_BAR = "rollout creditgym/KeyDoor-v0"


@dataclass
class Child:
    """One forked run of `benchmarks.run.main`; its stdout and stderr, split at newlines and
    carriage returns, with the seconds since its start at which each part arrived."""

    pid: int
    started: float
    events: list[tuple[float, str]] = field(default_factory=list)
    reader: threading.Thread | None = None
    status: int | None = None

    def alive(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is None

    def wait(self, timeout_s: float = ATTEMPT_TIMEOUT_S) -> int:
        """The exit status (`os.waitpid`'s), once the child has ended and its output is read."""
        deadline = time.monotonic() + timeout_s
        while self.alive():
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                raise AssertionError(f"run did not end within {timeout_s} s:\n{self.text()}")
            time.sleep(0.01)
        self.reader.join()
        return self.status

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.wait()
        assert os.WIFSIGNALED(self.status) and os.WTERMSIG(self.status) == signal.SIGKILL

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def text(self) -> str:
        return "\n".join(text for _, text in list(self.events))

    def first(self, pattern: str) -> float | None:
        """When a part matching `pattern` (from its start) first arrived, or None."""
        return next((when for when, text in list(self.events) if re.match(pattern, text)), None)

    def bars(self, kind: str) -> list[tuple[float, float | None]]:
        """(first drawn, cleared or None) of every top-level progress bar starting `kind`.

        tqdm redraws a bar as carriage return + text and clears it (leave=False) with
        blanks; a bar below another (evaluation's rollouts) moves the cursor up after each
        draw, so its parts carry ESC [A and are left out.
        """
        spans: list[tuple[float, float | None]] = []
        drawn = None  # the description of the bar on the line now, if any
        for when, text in list(self.events):
            if "\x1b[A" in text:
                continue
            if not text.strip():
                if drawn is not None and drawn.startswith(kind) and spans[-1][1] is None:
                    spans[-1] = (spans[-1][0], when)
                drawn = None
                continue
            description = text.split(":")[0]
            if description != drawn and description.startswith(kind):
                spans.append((when, None))
            drawn = description
        return spans


def start(out: Path) -> Child:
    """Fork a child running `benchmarks.run.main([*ARGV, "--out", out])`."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the command, its output into the pipe, never back to pytest
        code = 1
        try:
            os.close(read_fd)
            os.dup2(write_fd, 1)
            os.dup2(write_fd, 2)
            sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            code = run_module.main([*ARGV, "--out", str(out)])
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_fd)
    child = Child(pid, time.monotonic())

    def read() -> None:
        pending = b""
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                now = child.elapsed()
                *parts, pending = re.split(rb"[\r\n]", pending + chunk)
                child.events.extend((now, part.decode(errors="replace")) for part in parts)

    child.reader = threading.Thread(target=read, daemon=True)
    child.reader.start()
    return child


def run_dir_of(out: Path) -> Path:
    (folder,) = [path for path in out.iterdir() if path.is_dir()]
    return folder


def newest_checkpoint(run_dir: Path) -> int:
    """Step of the newest complete checkpoint (0: none), as `trainers.checkpoint` finds it."""
    steps = [
        int(path.name.removeprefix("step_"))
        for path in (run_dir / "checkpoints").glob("step_*")
        if (path / "state.pt").is_file()
    ]
    return max(steps, default=0)


@dataclass(frozen=True)
class Target:
    """Kill in `phase` of training iteration `iteration` (1-based; evaluation: after the
    last), `fraction` of the way through the phase as the uninterrupted run timed it.
    Evaluation is hit in two ways, alternately: while a batch plays, and while its
    episodes are being written (`writing`)."""

    phase: str
    iteration: int
    fraction: float
    writing: bool = False


def kill_plan() -> list[Target]:
    """KILLS_PER_PHASE targets per phase, in the order the run meets them."""
    rng = random.Random(KILL_SEED)
    targets = [
        Target(
            phase,
            ITERATIONS + 1 if phase == "evaluation" else rng.randint(1, ITERATIONS),
            rng.uniform(0.05, 0.5),
            writing=phase == "evaluation" and k % 2 == 1,
        )
        for phase in PHASES
        for k in range(KILLS_PER_PHASE)
    ]
    return sorted(targets, key=lambda t: (t.iteration, PHASES.index(t.phase), t.fraction))


def phase_timings(child: Child) -> dict[str, list[float]]:
    """Seconds per phase and iteration of an uninterrupted run, read from its markers:
    the rollout bar (drawn to cleared), credit (to the update bar), the update bar (drawn
    to cleared); evaluation: the evaluate bar to its first count (one batch played)."""
    rollouts = child.bars(ROLLOUT_BAR)[:ITERATIONS]
    updates = child.bars("update")[:ITERATIONS]
    steps = [child.first(rf"step {i}/{ITERATIONS} \|") for i in range(1, ITERATIONS + 1)]
    evaluation = child.first(r"evaluate: +\d+%.*\| *[1-9]") - child.first(r"evaluate")
    return {
        "rollout": [end - begin for begin, end in rollouts],
        "credit": [u[0] - r[1] for r, u in zip(rollouts, updates, strict=True)],
        # The bar's own span: the step line comes after the step's record is fsynced, a
        # wait that is no part of the update (kills aimed into it landed after the update).
        "update": [(u[1] or s) - u[0] for u, s in zip(updates, steps, strict=True)],
        "evaluation": [evaluation],
    }


def wait_for(child: Child, moment, poll_s: float = 0.002) -> float | None:
    """Poll until `moment()` gives a time (returned), or the child ends (None)."""
    deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
    while time.monotonic() < deadline:
        found = moment()
        if found is not None or not child.alive():
            return moment() if found is None else found
        time.sleep(poll_s)
    raise AssertionError(f"no marker within {ATTEMPT_TIMEOUT_S} s:\n{child.text()}")


def lines(path: Path) -> int:
    """Complete lines of a file (0 when it does not exist)."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


def nth(spans: list, index: int):
    return spans[index] if len(spans) > index else None


def attempt(out: Path, target: Target, timings: dict[str, list[float]]) -> tuple[str, str]:
    """Start the run, SIGKILL it at `target`; return the phase aimed at (the target's, or
    evaluation once the checkpoints on disk are past its iteration) and the phase the kill
    landed in."""
    folder = run_dir_of(out) if out.exists() else None
    resumed_at = newest_checkpoint(folder) if folder else 0
    phase, iteration = target.phase, target.iteration
    if phase != "evaluation" and iteration <= resumed_at:
        iteration = resumed_at + 1  # that iteration is on disk already: the next one
    if iteration > ITERATIONS:
        phase = "evaluation"
    k = iteration - resumed_at - 1  # the iteration's bars are this attempt's k-th
    written = lines(folder / records.EPISODES_FILE) if folder else 0
    staging_before = staging_folders(out)
    child = start(out)
    if phase == "rollout":
        begin = wait_for(child, lambda: (s := nth(child.bars(ROLLOUT_BAR), k)) and s[0])
        at = begin + target.fraction * timings["rollout"][iteration - 1]
    elif phase == "credit":
        begin = wait_for(child, lambda: (s := nth(child.bars(ROLLOUT_BAR), k)) and s[1])
        at = begin + target.fraction * timings["credit"][iteration - 1]
    elif phase == "update":
        begin = wait_for(child, lambda: (s := nth(child.bars("update"), k)) and s[0])
        at = begin + target.fraction * timings["update"][iteration - 1]
    elif phase == "checkpoint":
        # After the step line the checkpoint is written into a staging folder, renamed into
        # place when complete: kill as soon as the staging folder is there (or, had the
        # write been too quick to see, the checkpoint itself).
        wait_for(child, lambda: child.first(rf"step {iteration}/{ITERATIONS} \|"))
        checkpoints = run_dir_of(out) / "checkpoints"
        wait_for(
            child,
            lambda: (
                0.0
                if any(checkpoints.glob(f".step_{iteration:06d}.partial_*"))
                or (checkpoints / f"step_{iteration:06d}").is_dir()
                else None
            ),
            poll_s=0.0002,
        )
        at = child.elapsed()
    elif target.writing:
        # A batch's episodes are appended one by one once it is played: kill as soon as
        # the first of them is on disk.
        episodes = run_dir_of(out) / records.EPISODES_FILE
        wait_for(
            child,
            lambda: 0.0 if episodes.exists() and lines(episodes) > written else None,
            poll_s=0.0002,
        )
        at = child.elapsed()
    else:
        begin = wait_for(child, lambda: child.first(r"evaluate"))
        at = begin + target.fraction * timings["evaluation"][0]
    while child.alive() and child.elapsed() < at:
        time.sleep(0.001)
    assert child.alive(), f"the run ended before the kill at {target}:\n{child.text()}"
    child.kill()
    landing = landed(child, out, staging_before)
    print(f"{target}: killed after {at:.2f} s, in {landing}")  # shown with pytest -s
    return phase, landing


def staging_folders(out: Path) -> set[Path]:
    """Checkpoint staging folders on disk: left by kills during checkpoint writing (until
    the next write of that checkpoint removes them)."""
    if not out.exists():
        return set()
    return set((run_dir_of(out) / "checkpoints").glob(".step_*.partial_*"))


def landed(child: Child, out: Path, staging_before: set[Path]) -> str:
    """The phase a kill landed in, read from the markers the run left."""
    if staging_folders(out) - staging_before:
        return "checkpoint"  # killed while writing it: its staging folder is left
    if child.first(r"evaluate") is not None:
        return "evaluation"
    rollouts, updates = child.bars(ROLLOUT_BAR), child.bars("update")
    if updates and (not rollouts or updates[-1][0] > rollouts[-1][0]):
        return "update" if updates[-1][1] is None else "after the update"
    if rollouts:
        return "rollout" if rollouts[-1][1] is None else "credit"
    return "start"


@pytest.mark.slow  # 22 runs of a small model: 3 to 6 min on the 2-core CPU shared with other jobs
def test_sigkill_at_20_moments_then_resume_equals_the_uninterrupted_run(tmp_path):
    torch.set_num_threads(1)
    clean = start(tmp_path / "clean")
    assert clean.wait() == 0, clean.text()
    timings = phase_timings(clean)

    killed_out = tmp_path / "killed"
    landings = []
    for target in kill_plan():
        # A phase that runs faster in this attempt than in the clean run (a machine whose
        # load changes) lets a kill land in the next one; aim again, earlier in the phase,
        # so that every phase is hit on any machine. A missed kill is a kill all the same.
        for retry in range(RETRIES_PER_KILL + 1):
            earlier = replace(target, fraction=target.fraction / 4**retry)
            aimed, landing = attempt(killed_out, earlier, timings)
            landings.append(landing)
            if landing == aimed:
                break
    final = start(killed_out)
    assert final.wait() == 0, final.text()

    counts = {phase: landings.count(phase) for phase in PHASES}
    assert all(counts.values()), f"a phase got no kill: {landings}"
    expected, resumed = run_dir_of(tmp_path / "clean"), run_dir_of(killed_out)
    assert (resumed / records.EPISODES_FILE).read_bytes().count(b"\n") == EVAL_EPISODES
    assert (resumed / records.SAMPLES_FILE).read_bytes().count(b"\n") == 2
    assert_same_run_files(expected, resumed)
