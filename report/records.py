"""Run-folder I/O: the only files a benchmark run writes and the leaderboard reads.

A run folder `<set>/<run-name>/` (sets: `results/runs/`, the committed reference runs;
`results/local/runs/`, git-ignored, where a run goes unless told otherwise) holds:

    config.json      the full resolved `RunConfig`, its `identity` (the fields the run
                     name hashes) and `method_config` (its leaderboard row), atomically
    provenance.json  Python / package versions, git commit, host (atomically)
    episodes.jsonl   one `EpisodeRecord` per evaluation episode (append-only)
    metrics.jsonl    one record per optimiser step from the trainer (append-only)
    samples.jsonl    sample trajectories with per-step credit of every module
    training.json    training summary, written when training finished
    done.json        run summary, written last: its presence means "finished"
    checkpoints/     trainer checkpoints (git-ignored)

Append-only files survive a SIGKILL: every record is one line written with a single
`write` and flushed to disk before the next episode starts. The one damage a kill can leave
is an incomplete last line (no trailing newline): a reader reports it in one line and does
not count it, and the resumed run cuts it off, saying so, before it appends. So a killed
run, started again with the same command, keeps every complete episode and repeats none
(BALROG resumes the same way: per-episode records, summaries derived from them). Any
other damage (a line in the middle that is not a record or lacks a field a reader needs,
a metrics step missing or out of order, a samples file cut short, a JSON file that does
not parse) is a `DamagedFileError` naming the file and line; a run checks every record
file before it resumes (`check_run_records`), and so does every report before it counts
a run (`load_runs`): the commands print it in one line and
exit with status 2, never counting or skipping the record silently.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

from creditgym.agents.atomic import (
    DamagedFileError,
    atomic_write_text,
    counted_records,
    cut_torn_tail,
    damaged_line,
    jsonl_records,
)

CONFIG_FILE = "config.json"
PROVENANCE_FILE = "provenance.json"
EPISODES_FILE = "episodes.jsonl"
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
TRAINING_FILE = "training.json"
DONE_FILE = "done.json"
EVAL_TRAJECTORIES_FILE = "eval_trajectories.jsonl"
COMMANDS_FILE = "commands.txt"
CURVE_FILE = "curve.jsonl"  # trainers/curve.py writes it (learning-curve points)

# Packages whose versions decide a result; recorded in provenance.json.
TRACKED_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "peft",
    "gymnasium",
    "alfworld",
    "textworld",
    "numpy",
    "tyro",
)


@dataclass(frozen=True)
class EpisodeRecord:
    """One evaluation episode, as a line of `episodes.jsonl`.

    Attributes:
        index: episode number within its split (0-based); with `split` the resume key.
        env: registered env id.
        split: evaluation split name (e.g. `test`, `in_distribution`).
        task_id: the env's task id.
        task_type: ALFWorld task type / SysDiag fault family / "" when the env has none.
        seed: seed passed to `env.reset`.
        method: leaderboard row label (trainer + credit + model + group size).
        success: the env's verdict.
        episode_return: sum of step rewards (field `return` in the file).
        steps: number of agent steps.
        truncated: cut by the step limit rather than ended by the agent.
        tokens: policy-generated tokens in the episode (0 for scripted agents).
        train_step: optimiser steps taken before this evaluation (0 without training).
    """

    index: int
    env: str
    split: str
    task_id: str
    task_type: str
    seed: int
    method: str
    success: bool
    episode_return: float
    steps: int
    truncated: bool
    tokens: int
    train_step: int = 0

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["return"] = record.pop("episode_return")
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> EpisodeRecord:
        values = dict(record)
        values["episode_return"] = values.pop("return")
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in names})


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    """A JSON file of a run folder.

    Raises:
        DamagedFileError: it does not parse (names the file and line).
    """
    try:
        with open(path, "rb") as handle:
            return json.load(handle)
    except UnicodeDecodeError as error:
        raise DamagedFileError(f"{path}: damaged JSON file (not UTF-8)") from error
    except json.JSONDecodeError as error:
        raise DamagedFileError(
            f"{path}:{error.lineno}: damaged JSON file ({error.msg}); delete the run folder to "
            "run it afresh"
        ) from error


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the complete records of a JSON-lines file (`agents.atomic.jsonl_records`: an
    incomplete last line is reported and not read, a damaged line raises
    `DamagedFileError` naming the file and line)."""
    for _, record in jsonl_records(path):
        yield record


class JsonlAppender:
    """Append JSON records one line at a time, each flushed and fsynced before returning."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        cut_torn_tail(path)
        self.path = path
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def append(self, record: Mapping[str, Any]) -> None:
        # One write per record: a kill leaves at most one torn line, never a mixed one.
        self._handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_episodes(run_dir: Path) -> list[EpisodeRecord]:
    """The episode records of a run folder, in file order.

    Raises:
        DamagedFileError: a line is not an episode record (names the file and line).
    """
    path = run_dir / EPISODES_FILE
    episodes = []
    for line_number, record in jsonl_records(path):
        try:
            episodes.append(EpisodeRecord.from_dict(record))
        except (KeyError, TypeError) as error:  # a field missing (`return`, or another)
            raise DamagedFileError(
                f"{path}:{line_number}: not an episode record ({type(error).__name__}: "
                f"{error}); fix or delete that line, or delete the run folder to run it afresh"
            ) from error
    return episodes


def eval_trajectory_record(trajectory: Any, index: int, split: str) -> dict[str, Any]:
    """What the policy did in one evaluation episode, readable: per step the observation,
    the full response, the action played, reward and key-step label (no token ids)."""
    return {
        "split": split,
        "index": index,
        "task_id": trajectory.task_id,
        "task": trajectory.task,
        "success": trajectory.success,
        "feedback": trajectory.feedback,
        "initial_observation": trajectory.initial_observation,
        "steps": [
            {
                "observation": step.observation,
                "response": step.response_text,
                "action": step.action,
                "reward": step.reward,
                "key_step": step.key_step,
            }
            for step in trajectory.steps
        ],
    }


def typed_records(
    path: Path, fields: Mapping[str, type | tuple[type, ...]], what: str
) -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines file (`iter_jsonl`), each checked to hold `fields` with
    values of their types.

    Raises:
        DamagedFileError: a line that does not parse, or a record lacking a field or
            holding one of another type (names the file, line and field).
    """
    for line_number, record in jsonl_records(path):
        for name, kind in fields.items():
            kinds = kind if isinstance(kind, tuple) else (kind,)
            value = record.get(name)
            # A bool is an int to isinstance; no field here takes a bool for a number.
            if not isinstance(value, kinds) or (type(value) is bool and bool not in kinds):
                problem = "missing" if name not in record else f"a {type(value).__name__}"
                raise DamagedFileError(
                    f"{path}:{line_number}: not {what} (field {name!r} is {problem}); fix or "
                    "delete that line, or delete the run folder to run it afresh"
                )
        yield record


# The fields of a line of eval_trajectories.jsonl and of samples.jsonl that readers use.
EVAL_TRAJECTORY_FIELDS = {"split": str, "index": int, "steps": list, "success": bool}
SAMPLE_FIELDS = {"trajectory": dict, "credit": dict, "credit_model": str}


def read_eval_trajectories(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(split, index) -> the episode's trajectory record; an episode replayed after a kill
    between its trajectory and its episode record keeps the later line.

    Raises:
        DamagedFileError: a line that is not such a record (names the file and line).
    """
    path = run_dir / EVAL_TRAJECTORIES_FILE
    return {
        (r["split"], r["index"]): r
        for r in typed_records(path, EVAL_TRAJECTORY_FIELDS, "an evaluation trajectory")
    }


def read_samples(run_dir: Path) -> list[dict[str, Any]]:
    """The sample trajectories of a run (`benchmarks/run/samples.py`), empty without them.

    Raises:
        DamagedFileError: a line that is not a sample, or an incomplete last line: the
            file is written whole (atomically), so a cut one is damage, not a kill's trace.
    """
    path = run_dir / SAMPLES_FILE
    if path.exists() and not path.read_bytes().endswith(b"\n") and path.stat().st_size:
        lines = path.read_bytes().count(b"\n") + 1
        raise DamagedFileError(damaged_line(path, lines, "a sample cut short"))
    samples = list(typed_records(path, SAMPLE_FIELDS, "a sample trajectory"))
    for number, sample in enumerate(samples, start=1):
        if not isinstance(sample["trajectory"].get("steps"), list):
            raise DamagedFileError(damaged_line(path, number, "a trajectory without steps"))
    return samples


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The trainer's records, one per optimiser step, steps 1, 2, ... (a step missing or
    out of order is a `DamagedFileError` naming its line: `agents.atomic.counted_records`)."""
    return counted_records(run_dir / METRICS_FILE, "step")


def read_curve(run_dir: Path) -> list[dict[str, Any]]:
    """The learning-curve points of a run (empty without `--eval-every`)."""
    return list(
        typed_records(
            run_dir / CURVE_FILE,
            {"iteration": int, "optimizer_step": int, "success_rate": (int, float)},
            "a learning-curve point",
        )
    )


def read_summary_file(path: Path) -> dict[str, Any] | None:
    """training.json or done.json: a JSON object, or None when the file is absent.

    Raises:
        DamagedFileError: it does not parse or is not an object (names the file).
    """
    if not path.exists():
        return None
    value = read_json(path)
    if not isinstance(value, dict):
        raise DamagedFileError(f"{path}: damaged JSON file (not an object); delete it to redo it")
    return value


def check_run_records(run_dir: Path) -> None:
    """Read every record file of a run folder as its readers do, so that damage is named
    (file and line) before a run resumes over it or a report counts it.

    Raises:
        DamagedFileError: the first damaged file, line and what is wrong there.
    """
    read_episodes(run_dir)
    read_eval_trajectories(run_dir)
    read_metrics(run_dir)
    read_curve(run_dir)
    read_samples(run_dir)
    read_summary_file(run_dir / TRAINING_FILE)
    read_summary_file(run_dir / DONE_FILE)


def run_dirs(root: Path) -> list[Path]:
    """Every run folder under `root` (a folder holding config.json), sorted by name."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / CONFIG_FILE).is_file())


def git_commit(repo: Path) -> dict[str, Any]:
    """The repository's HEAD commit and whether the work tree had local changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(status.strip())}


def provenance(repo: Path) -> dict[str, Any]:
    """Versions and commit that produced a run (what a reader needs to reproduce it)."""
    versions = {}
    for package in TRACKED_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "packages": versions,
        "git": git_commit(repo),
    }


@dataclass(frozen=True)
class RunData:
    """What the leaderboard needs from one run folder."""

    run_dir: Path
    config: Mapping[str, Any]
    episodes: tuple[EpisodeRecord, ...]
    metrics: tuple[Mapping[str, Any], ...]
    training: Mapping[str, Any] | None
    curve: tuple[Mapping[str, Any], ...] = ()

    @property
    def method_config(self) -> Mapping[str, Any]:
        """Every setting of the run that decides results, less the seed and the task."""
        return self.config["method_config"]

    @property
    def method(self) -> str:
        """The leaderboard row of the run: its `method_config` as canonical JSON."""
        return json.dumps(self.method_config, sort_keys=True)

    @property
    def seed(self) -> int:
        return int(self.config["seed"])

    @property
    def env(self) -> str:
        """Task label: the env name plus what changes the task, so runs on different
        task variants never share a table, e.g. `SysDiag-v0[memory_leak, T=1]` (fault
        families, env options such as `delay=16`, episode step limit T)."""
        name = str(self.config["env_id"]).split("/")[-1]
        variant = [*self.config.get("faults", ()), *self.config.get("env_options", ())]
        if self.config.get("max_episode_steps") is not None:
            variant.append(f"T={self.config['max_episode_steps']}")
        return f"{name}[{', '.join(variant)}]" if variant else name


# The settings a leaderboard row shows first, in this order (every other setting of its
# `method_config` follows).
METHOD_FIELDS = ("model", "trainer", "credit", "group_size", "steps")


def training_clock(metrics: Sequence[Mapping[str, Any]]) -> list[float]:
    """Cumulative training seconds at each metrics record (one record per optimiser step).

    Trainers log `time/rollout_s` and `time/credit_s` once per iteration, repeated on each
    of its optimiser steps, and `time/train_s` per step; count the first once per iteration.
    """
    clock, seen, elapsed = [], set(), 0.0
    for record in metrics:
        iteration = record.get("iteration")
        if iteration not in seen:
            seen.add(iteration)
            elapsed += record.get("time/rollout_s", 0.0) + record.get("time/credit_s", 0.0)
        elapsed += record.get("time/train_s", 0.0)
        clock.append(elapsed)
    return clock


def rollouts_used(metrics: Sequence[Mapping[str, Any]]) -> int:
    """Training trajectories collected: `rollout/num_trajectories` once per iteration."""
    per_iteration = {r.get("iteration"): r.get("rollout/num_trajectories", 0.0) for r in metrics}
    return int(sum(per_iteration.values()))


class CurvePoint(NamedTuple):
    """One learning-curve point with the training it had cost by then."""

    iteration: int
    rollouts: int  # training trajectories collected before the point
    train_seconds: float  # training clock (rollout + credit + update), evaluation excluded
    success_rate: float
    episodes: int


def curve_points(run: RunData) -> list[CurvePoint]:
    """The run's curve against rollouts used and training seconds (from metrics.jsonl)."""
    clock = training_clock(run.metrics)
    points = []
    for point in run.curve:
        steps = int(point["optimizer_step"])
        points.append(
            CurvePoint(
                iteration=int(point["iteration"]),
                rollouts=rollouts_used(run.metrics[:steps]),
                train_seconds=clock[steps - 1] if steps else 0.0,
                success_rate=float(point["success_rate"]),
                episodes=int(point["episodes"]),
            )
        )
    return points


def unfinished_runs(root: Path) -> list[Path]:
    """Run folders under `root` without done.json (in progress, or killed before the end)."""
    return [run_dir for run_dir in run_dirs(root) if not (run_dir / DONE_FILE).exists()]


def load_runs(root: Path) -> list[RunData]:
    """Every finished run folder under `root` (done.json written) with at least one
    evaluation episode. A folder without done.json is a run in progress or killed: its
    evaluation may be partial, so it is left out (`unfinished_runs` names them).

    Raises:
        ValueError: a run folder's config.json has no `method_config` (names the folder).
    """
    runs = []
    for run_dir in run_dirs(root):
        if not (run_dir / DONE_FILE).exists():
            continue
        # Every record file, not only those the leaderboard reads: a report built over a
        # damaged run would count what its damage hid.
        check_run_records(run_dir)
        episodes = tuple(read_episodes(run_dir))
        if not episodes:
            continue
        config = read_json(run_dir / CONFIG_FILE)
        if "method_config" not in config:
            raise ValueError(
                f"{run_dir}/{CONFIG_FILE} has no method_config (written by an older "
                "creditgym); rerun that run's command once to rewrite it"
            )
        training_path = run_dir / TRAINING_FILE
        runs.append(
            RunData(
                run_dir=run_dir,
                config=config,
                episodes=episodes,
                metrics=tuple(read_metrics(run_dir)),
                training=read_summary_file(training_path),
                curve=tuple(read_curve(run_dir)),
            )
        )
    return runs


def setting_text(settings: Mapping[str, Any], key: str) -> str:
    """One setting of a `method_config` as text: `–` where it does not apply (absent from
    an evaluation-only run, or its G and steps), `default` for an option left unset."""
    if key not in settings:
        return "–"
    value = settings[key]
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):  # credit options, faults: `none` named
        return " ".join(map(str, value)) or "none"
    if isinstance(value, dict):  # a game set's description
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if key in ("group_size", "steps") and settings["trainer"] == "eval-only":
        return "–"
    return f"{value:g}" if isinstance(value, float) else str(value)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def method_label(settings: Mapping[str, Any]) -> str:
    """Short row name from the `METHOD_FIELDS` of a `method_config`."""
    if settings["trainer"] == "eval-only":
        return f"{settings['model']} (eval-only)"
    return (
        f"{settings['model']} {settings['trainer']}+{settings['credit']} "
        f"G={settings['group_size']} {settings['steps']} steps"
    )
