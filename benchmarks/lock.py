"""One writer per output: the lock a second invocation of the same command meets.

Two invocations of one run (two terminals, two sweep processes on one grid) would both
append to its episodes.jsonl and both believe they played it. So every entry point that
writes a run folder or an output file takes `hold` on its lock file before any work (before
loading a model or playing an episode); a second invocation is refused in one line naming
the holder's pid and host (a `UsageError`: exit status 2).

The lock is `fcntl.flock` on the lock file: the kernel releases it when the holder's last
descriptor closes, however the process ends (SIGKILL, out of memory), so a killed run never
leaves a stale lock behind; the pid and host written in the file only serve the message.
The descriptor is opened close-on-exec, and env workers start from a forkserver, so no
child process keeps the lock alive. A clean release deletes the file; a file left by a
killed holder is simply locked again by the next invocation.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from creditgym.benchmarks.cli import UsageError

# Inside a run folder; hidden, so globs and `records.run_dirs` never take it for output.
RUN_LOCK_FILE = ".lock"
# How long a refused invocation waits for the holder to finish writing its pid and host
# (the holder writes them right after taking the lock; this only covers that instant).
HOLDER_READ_SECONDS = 1.0


class LockHeldError(UsageError):
    """Another live process holds the lock of this output (one line, exit status 2)."""


def run_folder_lock(run_dir: Path) -> Path:
    """The lock file of a run folder (`<run_dir>/.lock`)."""
    return run_dir / RUN_LOCK_FILE


def output_lock(stem: Path) -> Path:
    """The lock file of the output files `stem.*` (`.<stem name>.lock` beside them)."""
    return stem.with_name(f".{stem.name}.lock")


def holder_text(lock_file: Path) -> str:
    """`pid 1234 on host node7 since 2026-12-02T22:10:00+0000`, read from the lock file."""
    deadline = time.monotonic() + HOLDER_READ_SECONDS
    while True:
        try:
            holder: dict[str, Any] = json.loads(lock_file.read_text(encoding="utf-8"))
            return f"pid {holder['pid']} on host {holder['host']} since {holder['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return "a process that has not recorded its pid and host"
            time.sleep(0.05)


@contextmanager
def hold(lock_file: Path, what: str) -> Iterator[None]:
    """Hold the exclusive lock `lock_file` for the `with` block (its folder is created).

    Args:
        lock_file: the lock file (`run_folder_lock` / `output_lock`).
        what: what the lock protects, as the refusal names it (a folder or a file stem).

    Raises:
        LockHeldError: another process holds it; names that process's pid and host.
        UsageError: the lock file cannot be created (one line).
    """
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise LockHeldError(
                    f"{what} is being written by {holder_text(lock_file)}; run the command "
                    "again once that one has ended (or stop it: its work so far is kept)"
                ) from None
            # A holder that released between our open and our flock deleted the file we
            # locked: a third process may already hold a new one under the same name.
            if same_file(fd, lock_file):
                break
            os.close(fd)
    except OSError as error:
        raise UsageError(f"cannot create the lock file {lock_file}: {error.strerror}") from error
    try:
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder) + "\n").encode())
        yield
    finally:
        # Deleted before unlocking, so nobody takes a lock on a file about to vanish.
        lock_file.unlink(missing_ok=True)
        os.close(fd)


def same_file(fd: int, path: Path) -> bool:
    """`path` still names the file open as `fd`."""
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (opened.st_dev, opened.st_ino)
