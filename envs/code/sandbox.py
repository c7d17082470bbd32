"""A process sandbox for untrusted Python: namespaces, a throwaway uid, rlimits, a kill switch.

Every execution runs as its own process tree, isolated by Linux primitives (the same
ones container runtimes use), all set up between `fork` and `exec`:

    harness ──fork──> keeper (host pid namespace, new session = new process group)
                        │  unshare(NEWNS | NEWNET | NEWPID); whole mount tree read-only
                        └─fork──> pid 1 of a fresh pid namespace
                                    mounts: private tmpfs on /tmp (the working dir), fresh /proc
                                    rlimits: CPU, address space, file size, processes, files
                                    uid/gid: a random unprivileged id owning nothing on the host
                                    exec python -I -S <program>

- No network: the new network namespace has only a downed loopback, so every connect
  fails (ENETUNREACH); tests check it.
- No writes outside the working directory: every mount is read-only in the sandbox's
  mount namespace, the only writable place is a size-capped tmpfs that disappears with it.
- No inherited secrets: the environment is rebuilt from scratch (`MINIMAL_ENV`), the
  fresh /proc shows only the sandbox's own processes, and the uid cannot read other
  users' /proc entries anyway.
- The whole tree dies together: at a limit the harness closes the keeper's control
  pipe, the keeper kills pid 1, and the kernel kills every process of a pid namespace
  whose init exits, including any that called `setsid` to leave the process group; pid
  1's exit reaches the keeper only once the namespace is empty, so an execution never
  returns with a process left behind. `PR_SET_PDEATHSIG` ties pid 1 to the keeper and
  the keeper to the harness.
- A fresh random uid per execution makes RLIMIT_NPROC (a per-uid count) count only this
  sandbox's processes, so a fork bomb is capped without touching other users' processes,
  and the sandbox cannot signal any process of the host (different uid: EPERM).
- Output is read incrementally and the tree is killed once it passes `max_output_bytes`:
  the harness never buffers more than that.

The program runs as pid 1 of its namespace: signals it sends to itself without a
handler are ignored (kernel rule for namespace inits), and `os.getppid()` is 0.
Requires root (CAP_SYS_ADMIN, CAP_SETUID) on Linux; `Sandbox()` raises
`SandboxUnavailableError` with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import resource
import select
import selectors
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

# Linux constants (include/uapi/linux/sched.h, mount.h, fcntl.h, prctl.h).
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
SYS_MOUNT_SETATTR = 442  # same number on every architecture (unified syscall table)
PR_SET_PDEATHSIG = 1
# How long the keeper may take to empty the namespace after being told to.
KEEPER_GRACE_SECONDS = 5.0

# Sandbox uids come from a range no host account uses, fresh per execution (see module doc).
SANDBOX_UID_BASE = 1_000_000
SANDBOX_UID_SPAN = 1_000_000

# The harness's own interpreter, by its real path (a venv symlink would need the venv).
INTERPRETER = os.path.realpath(sys.executable)

MINIMAL_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONHASHSEED": "0",  # set and dict-of-str orders repeat, so observations do
    "PYTHONSAFEPATH": "1",
}


class SandboxUnavailableError(RuntimeError):
    """The host cannot provide the isolation the sandbox promises (not root, no namespaces)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-execution resource limits.

    Attributes:
        cpu_seconds: CPU time of each process (RLIMIT_CPU, soft = hard, so the kernel
            sends SIGKILL: pid 1 of a namespace ignores SIGXCPU).
        wall_seconds: wall-clock limit for the whole tree, enforced by the harness.
        memory_bytes: address space of each process (RLIMIT_AS).
        file_size_bytes: largest file a process may write (RLIMIT_FSIZE).
        max_processes: processes of the sandbox uid (RLIMIT_NPROC), pid 1 included.
        max_open_files: open file descriptors per process (RLIMIT_NOFILE).
        max_output_bytes: stdout + stderr + report bytes kept before the tree is killed.
        tmpfs_bytes: size of the writable working directory (/tmp).
    """

    cpu_seconds: int = 5
    wall_seconds: float = 10.0
    memory_bytes: int = 512 * 2**20
    file_size_bytes: int = 4 * 2**20
    max_processes: int = 16
    max_open_files: int = 64
    max_output_bytes: int = 2**20
    tmpfs_bytes: int = 16 * 2**20

    def __post_init__(self) -> None:
        for name in (
            "cpu_seconds",
            "wall_seconds",
            "memory_bytes",
            "file_size_bytes",
            "max_processes",
            "max_open_files",
            "max_output_bytes",
            "tmpfs_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"SandboxLimits.{name} must be positive, got {getattr(self, name)}"
                )


@dataclass(frozen=True)
class ExecutionResult:
    """What one sandboxed execution did.

    Attributes:
        exit_code: the program's exit status (128 + n when killed by signal n), None
            when the harness killed the tree.
        stdout, stderr: the captured text (UTF-8, undecodable bytes replaced), at most
            `max_output_bytes` together with `report`.
        report: what the program wrote to its report pipe (fd `REPORT_FD` style channel,
            see `Sandbox.run_python`).
        timed_out: the wall-time limit was hit and the tree killed.
        output_limit_exceeded: the output cap was hit and the tree killed.
        wall_seconds: wall time from spawn to the end of reading.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    report: str
    timed_out: bool
    output_limit_exceeded: bool
    wall_seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_limit_exceeded

    def failure_reason(self) -> str:
        """One line saying why the run failed ("" when it did not), for the agent."""
        if self.timed_out:
            return "killed: wall-time limit exceeded (infinite loop or blocking call?)"
        if self.output_limit_exceeded:
            return "killed: output limit exceeded (printing too much)"
        if self.exit_code is None or self.exit_code == 0:
            return ""
        if self.exit_code > 128:
            number = self.exit_code - 128
            name = signal.Signals(number).name if number in signal.valid_signals() else number
            hint = " (CPU-time limit)" if number == signal.SIGKILL else ""
            return f"killed by signal {name}{hint}"
        return f"exited with status {self.exit_code}"


@cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.syscall.restype = ctypes.c_long
    return libc


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    result = _libc().mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    _check(result, f"mount {target}")


class _ChildSetup:
    """The code that runs between fork and exec (Popen's `preexec_fn`), see module doc.

    Runs in the keeper; forks pid 1 of the new pid namespace, which returns to Popen and
    execs the program, while the keeper closes every descriptor (so Popen sees the exec
    through its error pipe) and mirrors pid 1's exit status.
    """

    def __init__(self, limits: SandboxLimits, uid: int, control_fd: int) -> None:
        self.limits = limits
        self.uid = uid
        self.control_fd = control_fd
        self.libc = _libc()
        self.interpreter_prefix, self.hidden_ancestor = _interpreter_exposure()
        self.network_namespace = _shared_network_namespace()

    def __call__(self) -> None:
        _check(self.libc.setns(self.network_namespace, CLONE_NEWNET), "setns network")
        _check(self.libc.unshare(CLONE_NEWNS | CLONE_NEWPID), "unshare")
        # Private propagation first, so nothing below leaks back to the host's mounts.
        _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
        if self.hidden_ancestor:
            self._expose_interpreter()
        attr = _MountAttr(attr_set=MOUNT_ATTR_RDONLY)
        _check(
            self.libc.syscall(
                SYS_MOUNT_SETATTR,
                AT_FDCWD,
                b"/",
                AT_RECURSIVE,
                ctypes.byref(attr),
                ctypes.sizeof(attr),
            ),
            "mount_setattr read-only",
        )
        pid = os.fork()
        if pid:
            self._keep(pid)
        self._enter_namespace()

    def _expose_interpreter(self) -> None:
        """Make the interpreter reachable under a directory the sandbox uid cannot enter.

        Covers that directory (e.g. a 0700 /root holding a pyenv Python) with an empty
        tmpfs, which also hides the rest of it, and bind-mounts only the interpreter's
        prefix back at its own path, reached through a descriptor opened beforehand.
        """
        prefix_fd = os.open(self.interpreter_prefix, os.O_PATH | os.O_DIRECTORY)
        _mount("tmpfs", self.hidden_ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=65536,mode=0755")
        os.makedirs(self.interpreter_prefix, exist_ok=True)
        _mount(f"/proc/self/fd/{prefix_fd}", self.interpreter_prefix, None, MS_BIND | MS_REC, None)
        os.close(prefix_fd)

    def _keep(self, pid: int) -> None:
        """Keeper: wait for pid 1, or kill it when the harness says so; exit as it did.

        Holds no descriptor but the control pipe (so Popen sees the exec through its
        error pipe). Any byte or EOF on the control pipe (the harness hit a limit, or
        died) kills pid 1; its exit is reported only once every process of the namespace
        is gone, so when the keeper exits the sandbox is empty. Never returns.
        """
        try:
            self.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.closerange(0, self.control_fd)
            os.closerange(self.control_fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
            pid_fd = os.pidfd_open(pid)
            ready, _, _ = select.select([pid_fd, self.control_fd], [], [])
            if self.control_fd in ready:
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            os._exit(
                os.waitstatus_to_exitcode(status) % 256
                if os.WIFEXITED(status)
                else 128 + os.WTERMSIG(status)
            )
        finally:
            os._exit(127)

    def _enter_namespace(self) -> None:
        limits = self.limits
        _check(self.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        _mount(
            "tmpfs",
            "/tmp",
            "tmpfs",
            MS_NOSUID | MS_NODEV,
            f"size={limits.tmpfs_bytes},nr_inodes=4096,mode=0700,uid={self.uid},gid={self.uid}",
        )
        os.chdir("/tmp")
        for name, value in (
            (resource.RLIMIT_CPU, limits.cpu_seconds),
            (resource.RLIMIT_AS, limits.memory_bytes),
            (resource.RLIMIT_FSIZE, limits.file_size_bytes),
            (resource.RLIMIT_NPROC, limits.max_processes),
            (resource.RLIMIT_NOFILE, limits.max_open_files),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(name, (value, value))
        os.setgroups([])
        os.setresgid(self.uid, self.uid, self.uid)
        os.setresuid(self.uid, self.uid, self.uid)


class Sandbox:
    """Runs programs under `SandboxLimits` with the isolation described in the module doc."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits if limits is not None else SandboxLimits()
        _require_support()

    def run_python(
        self, source: str, stdin: bytes = b"", report_channel: bool = False
    ) -> ExecutionResult:
        """Run `source` with `python -S -B` (standard library only, no bytecode files).

        Not `-I`: it would also drop `PYTHONHASHSEED`, and the environment is ours anyway.

        With `report_channel`, the program gets a pipe for structured results whose write
        end's descriptor number is in the environment variable `SANDBOX_REPORT_FD`; it
        is kept apart from stdout so that the program's prints cannot mix into it.
        """
        return self.execute([INTERPRETER, "-S", "-B", "-c", source], stdin, report_channel)

    def execute(
        self, argv: Sequence[str], stdin: bytes = b"", report_channel: bool = False
    ) -> ExecutionResult:
        """Run `argv` in the sandbox, feeding `stdin`, and collect its output."""
        env = dict(MINIMAL_ENV)
        pass_fds: tuple[int, ...] = ()
        report_read = report_write = -1
        if report_channel:
            report_read, report_write = os.pipe()
            env["SANDBOX_REPORT_FD"] = str(report_write)
            pass_fds = (report_write,)
        uid = SANDBOX_UID_BASE + random.randrange(SANDBOX_UID_SPAN)
        # The keeper inherits the read end (close-on-exec: the program does not).
        control_read, control_write = os.pipe()
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                pass_fds=pass_fds,
                start_new_session=True,
                preexec_fn=_ChildSetup(self.limits, uid, control_read),
            )
        except BaseException:
            os.close(control_write)
            raise
        finally:
            os.close(control_read)
            if report_write >= 0:
                os.close(report_write)
        streams = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
        if report_read >= 0:
            streams[report_read] = bytearray()
        timed_out, overflowed = _collect(
            process, stdin, streams, started, self.limits, control_write
        )
        if report_read >= 0:
            os.close(report_read)
        exit_code = None if timed_out or overflowed else process.returncode
        if exit_code is not None and exit_code < 0:
            exit_code = 128 - exit_code
        chunks = [bytes(buffer).decode("utf-8", "replace") for buffer in streams.values()]
        return ExecutionResult(
            exit_code=exit_code,
            stdout=chunks[0],
            stderr=chunks[1],
            report=chunks[2] if report_read >= 0 else "",
            timed_out=timed_out,
            output_limit_exceeded=overflowed,
            wall_seconds=time.monotonic() - started,
        )


def _collect(
    process: subprocess.Popen,
    stdin: bytes,
    streams: dict[int, bytearray],
    started: float,
    limits: SandboxLimits,
    control_write: int,
) -> tuple[bool, bool]:
    """Feed stdin, read every stream until EOF, enforcing wall time and output cap.

    Returns (timed_out, output_limit_exceeded). Either way the keeper is reaped, which
    (see `_ChildSetup._keep`) means no process of the sandbox is left; `control_write`
    is closed.
    """
    deadline = started + limits.wall_seconds
    timed_out = overflowed = False
    selector = selectors.DefaultSelector()
    for fd in streams:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    assert process.stdin is not None
    pending_input = memoryview(stdin)
    if pending_input:
        os.set_blocking(process.stdin.fileno(), False)
        selector.register(process.stdin.fileno(), selectors.EVENT_WRITE)
    else:
        process.stdin.close()
    total = 0
    try:
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(remaining):
                if key.fd in streams:
                    try:
                        data = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    if not data:
                        selector.unregister(key.fd)
                        continue
                    keep = max(0, min(len(data), limits.max_output_bytes - total))
                    streams[key.fd] += data[:keep]
                    total += len(data)
                    if total > limits.max_output_bytes:
                        overflowed = True
                        break
                else:
                    try:
                        written = os.write(key.fd, pending_input[:65536])
                    except (BrokenPipeError, BlockingIOError) as error:
                        written = 0 if isinstance(error, BlockingIOError) else len(pending_input)
                    pending_input = pending_input[written:]
                    if not pending_input:
                        selector.unregister(key.fd)
                        process.stdin.close()
            if overflowed:
                break
        if not (timed_out or overflowed):
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        selector.close()
        os.close(control_write)  # tells the keeper to kill pid 1, if it still runs
        try:
            process.wait(timeout=KEEPER_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            # Never seen; the keeper's group holds pid 1 too, whose death empties the namespace.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()
    return timed_out, overflowed


@cache
def _interpreter_exposure() -> tuple[str, str]:
    """(interpreter prefix, its first ancestor others cannot enter, or "" when none)."""
    prefix = os.path.realpath(sys.base_prefix)
    path = "/"
    for part in prefix.strip("/").split("/"):
        path = os.path.join(path, part)
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return prefix, path
    return prefix, ""


@cache
def _require_support() -> None:
    """Fail early, with the reason, where the kernel or our privileges cannot isolate."""
    if sys.platform != "linux":
        raise SandboxUnavailableError(f"the sandbox needs Linux namespaces, not {sys.platform}")
    if os.geteuid() != 0:
        raise SandboxUnavailableError(
            "the sandbox needs root (CAP_SYS_ADMIN to create namespaces, CAP_SETUID to drop "
            f"to a throwaway uid); running as uid {os.geteuid()}"
        )


@cache
def _shared_network_namespace() -> int:
    """A descriptor of one empty network namespace (downed loopback) every sandbox joins.

    Creating a network namespace per execution costs several milliseconds (the kernel
    sets up and later tears down its devices), a third of a small program's run time;
    joining a prepared one with `setns` costs microseconds. Nothing in it can be
    reached: there is no interface but `lo`, which stays down (raising it needs
    CAP_NET_ADMIN, which the sandbox uid lacks).
    """
    holder = os.fork()
    if holder == 0:
        try:
            _check(_libc().unshare(CLONE_NEWNET), "unshare network namespace")
            signal.pause()
        finally:
            os._exit(1)
    try:
        # Opening the holder's namespace before it has unshared would capture the host's.
        for _ in range(1000):
            host = os.stat("/proc/self/ns/net").st_ino
            if os.stat(f"/proc/{holder}/ns/net").st_ino != host:
                break
            time.sleep(0.001)
        else:
            raise SandboxUnavailableError("could not create a network namespace")
        return os.open(f"/proc/{holder}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.kill(holder, signal.SIGKILL)
        os.waitpid(holder, 0)
