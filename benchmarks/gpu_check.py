"""The prepared GPU check: install from carried wheels, then tests, speed figures and three
optimiser steps, every figure into one file: `bash benchmarks/gpu_check.sh`.

Runs on a bare GPU machine with no package registry (docs/gpu.md): the wheels that
`benchmarks.gpu_wheels` prepared travel in `wheels/part-*/`. Each step is a subprocess
with its own time limit (its process group is killed past it), so one failure costs only
its own minutes, and the whole check stays within `--budget-s` (8 minutes by default):
1. gpu: `nvidia-smi`'s name, memory, driver and clock of the GPU (where it exists);
2. install: join the wheel parts, `pip install --no-index --find-links wheels/py312` of
   the locked versions that decide results (`benchmarks.gpu_wheels.check_requirements`),
   beside the machine's own torch (skipped in a dry run, and where the Python is not 3.12);
3. environment: Python, torch and its CUDA device, the versions the check runs with;
4. model: load the policy once (smollm2-135m: from the carried wheel, converted once);
5. tests: the tests whose models take `--device` (KV cache, continuous batching, LLM
   agent, hindsight scoring, generation cache);
6. the rollout, decode and credit-scoring benchmarks (`benchmarks/perf/`);
7. `python -m benchmarks.run`, 3 optimiser steps each of grpo (G = 8) and hp_rlvr (G = 1)
   on SysDiag, and the seconds of each step by phase (rollout, credit, train) read from
   the runs' metrics.
`--dry-run` runs every step at toy sizes (tiny model, 1 optimiser step, few episodes):
`bash benchmarks/gpu_check.sh --device cpu --dry-run` checks the script on a CPU.

    bash benchmarks/gpu_check.sh --device cuda --out gpu_check.txt
    bash benchmarks/gpu_check.sh --device cpu --dry-run --out /tmp/gpu_check.txt
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TextIO

from creditgym.benchmarks.cli import UsageError, exit_on_usage_error, parse_arguments, prog_of
from creditgym.benchmarks.gpu_wheels import (
    PYTHON_VERSION,
    REPO_ROOT,
    WHEEL_FOLDER,
    WHEELS_DIR,
    check_requirements,
    unpack_bundle,
)

# The tests whose models are placed on `--device` (tests/conftest.py's fixture).
DEVICE_TESTS = (
    "tests/test_kv_cache.py",
    "tests/test_batching.py",
    "tests/test_credit_hindsight.py",
    "tests/test_generation_cache.py",
    "tests/test_llm.py",
)
PHASES = ("time/rollout_s", "time/credit_s", "time/train_s")
# Runs of `benchmarks.run`, by label: its credit module at the method's own group size.
RUNS = {"grpo (G=8)": "grpo", "hp_rlvr (G=1)": "hp_rlvr"}

ENVIRONMENT_SCRIPT = """
import platform, sys
from importlib import metadata
import torch
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available",
      torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), torch.cuda.device_count(), "visible")
for name in ("transformers", "tokenizers", "peft", "accelerate", "safetensors", "gymnasium",
             "tyro", "gguf", "numpy", "pytest"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "not installed")
"""


@dataclass(frozen=True)
class Sizes:
    """How big each step's work is: the real check, or the dry run's toy version."""

    model: str
    tests: tuple[str, ...]
    rollout: tuple[str, ...]
    decode: tuple[str, ...]
    credit: tuple[str, ...]
    run: tuple[str, ...]


SIZES = {
    "check": Sizes(
        model="smollm2-135m",
        tests=DEVICE_TESTS,
        # One batch of 8 against 8 one at a time: the batch-8 speed-up (target >= 4x).
        rollout=("--batch-sizes", "1", "8", "--tasks", "8", "--max-new-tokens", "128"),
        decode=("--batch-sizes", "1", "4", "8", "16"),
        credit=("--envs", "sysdiag"),
        run=("--steps", "3"),
    ),
    "dry-run": Sizes(
        model="tiny",
        tests=("tests/test_kv_cache.py",),
        rollout=("--batch-sizes", "1", "2", "--tasks", "2", "--max-new-tokens", "8"),
        decode=("--batch-sizes", "1", "2", "--steps", "2", "--context", "32"),
        credit=("--envs", "sysdiag", "--steps", "2", "--max-new-tokens", "8"),
        run=("--steps", "1", "--max-new-tokens", "8", "--max-episode-steps", "2"),
    ),
}


@dataclass(frozen=True)
class Step:
    """One step of the check: a command (or an in-process function) and its time limit."""

    name: str
    limit_s: float
    argv: tuple[str, ...] = ()
    function: Callable[[float], str] | None = None


@dataclass(frozen=True)
class Outcome:
    """How one step ended."""

    name: str
    status: str  # ok, failed, timed out, skipped
    seconds: float


def run_command(argv: Sequence[str], limit_s: float, env: dict[str, str]) -> tuple[int | None, str]:
    """(exit status, stdout + the stderr tail) of `argv`; past `limit_s` its whole process
    group (env workers too) is killed and the status is None."""
    process = subprocess.Popen(
        argv,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        return None, stdout + _tail(stderr)
    return process.returncode, stdout + (_tail(stderr) if process.returncode else "")


def _tail(text: str, lines: int = 25) -> str:
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return ("-- stderr (last lines) --\n" + "\n".join(kept) + "\n") if kept else ""


def install(limit_s: float, dry_run: bool = False) -> str:
    """Join the carried wheel parts and pip-install the check's locked versions from them."""
    if dry_run:
        raise SkipStep("dry run: the packages this Python already has")
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != PYTHON_VERSION:
        raise SkipStep(f"the wheels are for Python {PYTHON_VERSION}, this is {running}")
    joined = unpack_bundle()
    argv = [sys.executable, "-m", "pip", "install", "--no-index", "--no-cache-dir"]
    argv += ["--find-links", str(WHEELS_DIR / WHEEL_FOLDER), *check_requirements()]
    status, output = run_command(argv, limit_s, dict(os.environ))
    if status != 0:
        raise RuntimeError(f"{joined}\npip install failed (status {status}):\n{output}")
    installed = [line for line in output.splitlines() if line.startswith("Successfully")]
    return "\n".join([joined, *(installed or ["nothing to install"])])


class SkipStep(Exception):
    """A step that does not apply here; the message says why."""


def phase_split(run_dir: Path) -> list[str]:
    """Seconds of each optimiser step of a `benchmarks.run` folder by phase, one line
    each, then the mean over the steps after the first (which pays one-off start-up)."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    records = [json.loads(line) for line in lines if line.strip().endswith("}")]
    if not records:
        return [f"  no metrics in {path}"]
    rows = [[record.get(phase, float("nan")) for phase in PHASES] for record in records]
    text = [f"  {'step':<6}{'rollout s':>11}{'credit s':>11}{'train s':>11}{'total s':>11}"]
    for index, row in enumerate(rows, start=1):
        text.append(f"  {index:<6}" + "".join(f"{v:>11.3f}" for v in [*row, sum(row)]))
    later = rows[1:] or rows
    mean = [sum(column) / len(later) for column in zip(*later, strict=True)]
    label = "mean 2+" if len(rows) > 1 else "mean"
    text.append(f"  {label:<6}" + "".join(f"{v:>11.3f}" for v in [*mean, sum(mean)]))
    return text


def plan(args: argparse.Namespace, work: Path) -> list[Step]:
    """The check's steps for `args` (device, sizes), writing run folders under `work`."""
    sizes = SIZES["dry-run" if args.dry_run else "check"]
    python, device = sys.executable, args.device
    steps = [
        Step("install", 90, function=partial(install, dry_run=args.dry_run)),
        # After the install: the versions the check ran with.
        Step("environment", 30, (python, "-c", ENVIRONMENT_SCRIPT)),
    ]
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,memory.total,driver_version,clocks.max.sm"
        steps.insert(0, Step("gpu", 20, ("nvidia-smi", query, "--format=csv")))
    load = (
        f"from creditgym.models.registry import load_model; load_model({sizes.model!r}, {device!r})"
    )
    pytest = (python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--device", device)
    steps += [
        Step("model", 90, (python, "-c", load + "; print('loaded')")),
        # The ALFWorld packages are not installed there (benchmarks.gpu_wheels.LEFT_OUT).
        Step("tests", 120, (*pytest, "-k", "not ALFWorld", *sizes.tests)),
    ]
    for name, options in (
        ("bench_rollout", sizes.rollout),
        ("bench_decode", sizes.decode),
        ("bench_credit", sizes.credit),
    ):
        argv = (python, "-m", f"benchmarks.perf.{name}", "--model", sizes.model)
        steps.append(Step(name, 60, (*argv, "--device", device, *options)))
    for label, credit in RUNS.items():
        argv = (python, "-m", "benchmarks.run", "--env", "sysdiag", "--credit", credit)
        argv += ("--model", sizes.model, "--device", device, "--eval-episodes", "1")
        argv += ("--sample-group-size", "0", "--out", str(work), "--name", credit)
        steps.append(Step(f"run {label}", 90, (*argv, *sizes.run)))
    return steps


def check(args: argparse.Namespace, report: TextIO) -> list[Outcome]:
    """Run every step of `plan` within the budget; each step's output goes to `report`."""

    def write(text: str) -> None:
        report.write(text + "\n")
        report.flush()
        print(text, flush=True)

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # No registry there: pip (models.registry fetches smollm2 with it) reads the carried
    # wheels and fails at once instead of retrying a network that is not there.
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(WHEELS_DIR / WHEEL_FOLDER))
    started = time.perf_counter()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        work = Path(scratch)
        for step in plan(args, work):
            left = args.budget_s * args.time_scale - (time.perf_counter() - started)
            limit = min(step.limit_s * args.time_scale, left)
            step_start = time.perf_counter()
            if limit < 5:
                budget = args.budget_s * args.time_scale
                status, output = "skipped", f"(no time left of the {budget:g} s budget)"
            elif step.function is not None:
                try:
                    status, output = "ok", step.function(limit)
                except SkipStep as reason:
                    status, output = "skipped", str(reason)
                except (OSError, ValueError, RuntimeError) as error:
                    status, output = "failed", str(error)
            else:
                code, output = run_command(step.argv, limit, env)
                status = "ok" if code == 0 else ("timed out" if code is None else "failed")
            seconds = time.perf_counter() - step_start
            outcomes.append(Outcome(step.name, status, seconds))
            write(f"== {step.name}: {status} in {seconds:.1f} s (limit {limit:.0f} s)")
            if step.argv:
                shown = (part if "\n" not in part else "<script>" for part in step.argv)
                write("$ " + " ".join(shown))
            write(output.rstrip())
            if step.name.startswith("run ") and status == "ok":
                write("seconds per optimiser step by phase:")
                write("\n".join(phase_split(work / step.argv[step.argv.index("--name") + 1])))
    write("== summary")
    for outcome in outcomes:
        write(f"  {outcome.name:<20} {outcome.status:<10} {outcome.seconds:>7.1f} s")
    write(f"  {'total':<20} {'':<10} {time.perf_counter() - started:>7.1f} s")
    return outcomes


@exit_on_usage_error(resumes=False)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="torch device (default cuda)")
    parser.add_argument(
        "--out", type=Path, default=Path("gpu_check.txt"), help="the figures file to write"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="toy sizes: tiny model, 1 step, few episodes"
    )
    parser.add_argument(
        "--budget-s", type=float, default=480.0, help="seconds for the whole check (480)"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every step's time limit and the budget (a slow or loaded machine)",
    )
    args = parse_arguments(parser, argv, prog_of("gpu_check"))
    if args.budget_s <= 0 or args.time_scale <= 0:
        raise UsageError("--budget-s and --time-scale must be > 0")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as report:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        mode = "dry run" if args.dry_run else "check"
        report.write(f"creditgym GPU {mode}, device {args.device}, {stamp}\n")
        outcomes = check(args, report)
    print(f"figures written to {args.out}")
    return 0 if all(o.status in ("ok", "skipped") for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
