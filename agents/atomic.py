"""Atomic writes: a reader sees the old file (or folder) or the complete new one, never part.

Both helpers write next to the target (same filesystem, so `os.replace` is a rename) and
remove what they wrote if the write fails. Used for run-folder files (`report.records`),
the leaderboard and checkpoints (`trainers.checkpoint`).

Reading back: `jsonl_records` reads the append-only JSON-lines files (run records, the
trainer's metrics and curve) and tells the incomplete last line a kill can leave (reported,
not read) from a damaged line (`DamagedFileError`, naming file and line);
`counted_records` also checks that a file numbered line by line (the metrics) lost none.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# mkstemp / mkdtemp create files and folders readable by their owner only; results are
# meant to be shared.
SHARED_FILE_MODE = 0o644
SHARED_FOLDER_MODE = 0o755


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a fsynced temporary file and `os.replace`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` through a fsynced temporary file and `os.replace`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, SHARED_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """An empty staging folder next to `path` to fill in the `with` block; when the block
    ends without error it replaces `path` (an older folder there is removed first),
    otherwise it is removed. Its name starts with a dot, so globs for `path`'s siblings
    do not see it. Staging folders of `path` that a killed writer left behind are removed
    first: the callers write `path` as its one writer (a run folder's lock,
    `benchmarks/lock.py`), so none of them is still being filled."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.partial_*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.partial_"))
    try:
        yield staging
        os.chmod(staging, SHARED_FOLDER_MODE)
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


class DamagedFileError(ValueError):
    """A file creditgym wrote reads back as something it never writes (a corrupt line, an
    unreadable checkpoint); the message names the file (and line) and what to do."""


def jsonl_records(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of every complete line of a JSON-lines file, in order.

    Every writer appends a record as one line in one `write`, so the only damage a kill can
    leave is an incomplete last line (no newline): it is reported (one logged line naming
    the file and line) and not read; whoever appends next cuts it off (`cut_torn_tail`).

    Raises:
        DamagedFileError: a complete line is not a JSON object (names file and line).
    """
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as handle:  # bytes: invalid UTF-8 is damage, reported as such
        for line_number, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                logger.warning(
                    "%s:%d: incomplete last line (a write cut short), not read; resuming "
                    "the run drops it",
                    path,
                    line_number,
                )
                return
            try:
                text = line[:-1].decode("utf-8")
            except UnicodeDecodeError as error:
                raise DamagedFileError(damaged_line(path, line_number, "not UTF-8")) from error
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                raise DamagedFileError(damaged_line(path, line_number, error.msg)) from error
            if not isinstance(record, dict):
                raise DamagedFileError(damaged_line(path, line_number, "not a JSON object"))
            yield line_number, record


def counted_records(path: str | os.PathLike, key: str) -> list[dict[str, Any]]:
    """The records of a JSON-lines file whose `key` counts 1, 2, 3, ... line by line (the
    trainer's metrics, one record per optimiser step), read as `jsonl_records` reads them.

    Raises:
        DamagedFileError: a record whose `key` is not the next count (a line lost, repeated
            or out of order), or that has none; names the file and line.
    """
    counted = []
    for line_number, record in jsonl_records(path):
        expected = len(counted) + 1
        value = record.get(key)
        if type(value) is not int or value != expected:
            what = f"{key} {value!r} where {key} {expected} belongs"
            if type(value) is int and value > expected:
                what += f" (records {expected}-{value - 1} are missing)"
            raise DamagedFileError(damaged_line(Path(path), line_number, what))
        counted.append(record)
    return counted


def damaged_line(path: Path, line_number: int, what: str) -> str:
    """The one-line report of a corrupt line of a results file."""
    return (
        f"{path}:{line_number}: damaged record ({what}); this is not the incomplete last "
        "line a kill leaves: fix or delete that line, or delete the run folder to run it afresh"
    )


def cut_torn_tail(path: str | os.PathLike) -> int:
    """Cut an incomplete last line (a write killed half-way) off `path`, saying so in one
    logged line; returns the bytes removed."""
    path = Path(path)
    if not path.exists():
        return 0
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1  # 0 when there is no complete line at all
    if keep == len(data):
        return 0
    with open(path, "r+b") as handle:
        handle.truncate(keep)
    logger.warning(
        "%s:%d: dropped an incomplete last line (%d bytes of a write cut short); its record "
        "is written again",
        path,
        data.count(b"\n") + 1,
        len(data) - keep,
    )
    return len(data) - keep
