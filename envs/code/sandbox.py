"""A process sandbox for untrusted Python: a minimal file tree, namespaces, rlimits, a kill switch.

Every execution runs as its own process tree, isolated by Linux primitives (the same
ones container runtimes use), set up between `fork` and `exec`:

    harness ──request + pipes──> fork server (small, single-threaded, started once)
                                   jailed at start-up: its own mount namespace whose
                                     root is a tmpfs holding only the interpreter, its
                                     shared libraries and standard library (read-only),
                                     /dev/null-like nodes, and an empty network namespace
                                   │ unshare(NEWPID) for the next child only
                                   └─fork──> pid 1 of a fresh pid namespace, own session
                                               unshare(NEWNS): a copy of that tree,
                                                 /tmp a private size-capped tmpfs (cwd),
                                                 no /proc
                                               rlimits: CPU, memory, file size,
                                                 processes, open files
                                               uid/gid: random, owns nothing
                                               exec python -S -B -c <program>

- Nothing of the host's files: the tree holds the interpreter binary, the libraries
  `ldd` lists for it and its extension modules, the standard library with
  site-packages hidden, /etc/ld.so.cache, and /dev/{null,zero,random,urandom} (made
  afresh, world-writable, as root; the host's bound in user-namespace mode) -- no
  /etc, no home, no checkout, no task files; tests read for them.
- No network: the network namespace has only a downed loopback, so every connect fails
  (ENETUNREACH); tests check it.
- No writes outside the working directory: the tree is read-only; the only writable
  place is a size-capped tmpfs that vanishes with the execution.
- No inherited secrets: the environment is rebuilt from scratch (`MINIMAL_ENV`), and
  there is no /proc (Python needs none; a fresh one per execution would cost a mount
  and still show kernel and host details).
- The whole tree dies together: at a limit the harness closes the execution's control
  pipe, the fork server kills pid 1, and the kernel kills every process of a pid
  namespace whose init exits, including any that called `setsid` to leave the process
  group; pid 1 can be reaped only once its namespace is empty, and the server reports
  the exit on the status pipe only then, so an execution never returns with a process
  left. `PR_SET_PDEATHSIG` ties pid 1 to the server; the server exits when the harness's
  end of its channel closes (the harness died). Not PR_SET_PDEATHSIG there: it fires
  when the *thread* that started the server ends, which may be any harness thread.
- A fresh uid per execution, owning nothing, with RLIMIT_NPROC counting only this
  sandbox's processes (so a fork bomb is capped without touching other users'), and
  no process of the host in sight (own pid namespace) to signal or trace.

Two ways to get the privileges this takes, chosen by `isolation_mode()`:
- "root" (root in the initial user namespace): the child drops to a random uid with
  `setresuid`; RLIMIT_NPROC is per uid.
- "user-namespace" (any other user, where the kernel allows unprivileged user
  namespaces): the fork server first enters a user namespace in which it is root (and
  becomes pid 1 of a pid namespace it owns, so that it may create more), and each child
  drops to a random uid of a nested user namespace of its own, whose capabilities
  reach nothing it did not create; RLIMIT_NPROC is then counted per user namespace
  (Linux >= 5.14). Neither available: `Sandbox()` raises SandboxUnavailableError with
  one line naming the missing kernel feature.

Why a fork server: forking the harness itself (which may hold a model and threads) costs
time proportional to its memory and is unsafe with threads between fork and exec; the
server is a small single-threaded Python that only forks. Building the file tree once,
in the server, keeps a child's set-up to copying a dozen mounts.

The program runs as pid 1 of its namespace: signals it sends to itself without a
handler are ignored (kernel rule for namespace inits), and `os.getppid()` is 0. Only
the interpreter exists inside: `execute` takes other programs only if they need no
other file. This module imports only the standard library: the fork server runs this
very file.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import glob
import json
import os
import random
import resource
import selectors
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

# Linux constants (include/uapi/linux/sched.h, mount.h, fcntl.h, prctl.h).
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
SYS_MOUNT_SETATTR = 442  # same number on every architecture (unified syscall table)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}  # glibc has no wrapper
PR_SET_PDEATHSIG = 1
# How long the fork server may take to empty a namespace after being told to.
SERVER_GRACE_SECONDS = 5.0
# How long the fork server may take to build its file tree and say it is ready.
SERVER_START_SECONDS = 30.0
# The report pipe's descriptor in the program; requests above this size are refused
# (execve caps one argument at 128 KiB anyway).
REPORT_FD = 3
MAX_REQUEST_BYTES = 200_000
# Descriptors one request may pass (`pass_fds`), beyond stdio, control, status, report.
MAX_PASS_FDS = 8

# Sandbox uids come from a range no host account uses, fresh per execution (see module doc).
SANDBOX_UID_BASE = 1_000_000
SANDBOX_UID_SPAN = 1_000_000

# The harness's own interpreter, by its real path (a venv symlink would need the venv).
INTERPRETER = os.path.realpath(sys.executable)
# Device nodes a program may expect. As real root the fork server makes its own, mode
# 0666 whatever the host's are (a container's /dev/null can be 0644, which the sandbox's
# uids could not write); in user-namespace mode, where mknod is refused, it binds the
# host's.
DEVICE_NODES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
# Where the fork server builds its tree before pivoting into it (inside its own mount
# namespace, so the host's /tmp is untouched).
JAIL_BUILD_DIR = "/tmp"

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
            when the harness killed the tree (or lost it: the fork server died).
        stdout, stderr: the captured text (UTF-8, undecodable bytes replaced), at most
            `max_output_bytes` together with `report`.
        report: what the program wrote to its report pipe (descriptor `REPORT_FD`, see
            `Sandbox.run_python`), decoded with "surrogateescape" so that
            `report.encode("utf-8", "surrogateescape")` gives back its exact bytes; ""
            without one.
        timed_out: the wall-time limit was hit and the tree killed.
        output_limit_exceeded: the output cap was hit and the tree killed.
        wall_seconds: wall time from spawn to the end of reading.
        cancelled: the caller's cancel descriptor turned readable and the tree was killed.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    report: str
    timed_out: bool
    output_limit_exceeded: bool
    wall_seconds: float
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not (
            self.timed_out or self.output_limit_exceeded or self.cancelled
        )

    def failure_reason(self) -> str:
        """One line saying why the run failed ("" when it did not), for the agent."""
        if self.timed_out:
            return "killed: wall-time limit exceeded (infinite loop or blocking call?)"
        if self.output_limit_exceeded:
            return "killed: output limit exceeded (printing too much)"
        if self.cancelled:
            return "killed: cancelled by the harness"
        if self.exit_code is None:
            return "killed: the sandbox lost the program (its fork server died)"
        if self.exit_code == 0:
            return ""
        if self.exit_code > 128:
            number = self.exit_code - 128
            name = signal.Signals(number).name if number in signal.valid_signals() else number
            hint = " (CPU-time limit or out of memory)" if number == signal.SIGKILL else ""
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


class _Launch:
    """What the fork server's child, pid 1 of a fresh pid namespace, does; never returns.

    Gets the request's descriptors: stdin, stdout, stderr, then the report pipe's write
    end and any passed ones when asked for (the server keeps control and status). Setup
    failures go to the status pipe as an `error <text>` line, which the harness raises.
    """

    def __init__(
        self,
        request: dict[str, Any],
        fds: list[int],
        status_fd: int,
        proc_fd: int,
        user_namespace: bool,
    ) -> None:
        self.argv: list[str] = request["argv"]
        self.env: dict[str, str] = request["env"]
        self.limits = SandboxLimits(**request["limits"])
        self.uid: int = request["uid"]
        self.fds = fds
        self.status_fd = status_fd
        self.proc_fd = proc_fd  # the host's /proc, outside the tree: for our id maps
        self.user_namespace = user_namespace
        self.libc = _libc()

    def __call__(self) -> None:
        status_fd = self.status_fd
        try:
            _check(self.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
            # Park every descriptor we need high, then place stdio at 0, 1, 2 (report at 3):
            # any of them may sit where another must go.
            # (16: above the 4 + MAX_PASS_FDS targets, below RLIMIT_NOFILE, so that the
            # closerange before exec closes these too.)
            status_fd = fcntl.fcntl(self.status_fd, fcntl.F_DUPFD_CLOEXEC, 16)
            self.proc_fd = fcntl.fcntl(self.proc_fd, fcntl.F_DUPFD_CLOEXEC, 16)
            parked = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 16) for fd in self.fds]
            for target, fd in enumerate(parked):
                os.dup2(fd, target)  # dup2 targets are inheritable: they survive exec
            first_free = len(parked)
            # Nothing of the server's (its channel, other executions' pipes) may leak in.
            _close_descriptors_from(first_free, keep=(status_fd, self.proc_fd))
            os.setsid()
            # A private copy of the server's read-only tree (and its network namespace,
            # inherited), then this execution's own /tmp on top.
            _check(self.libc.unshare(CLONE_NEWNS), "unshare mount namespace")
            self._enter_namespace()
            os.closerange(first_free, os.sysconf("SC_OPEN_MAX"))
            os.execve(self.argv[0], self.argv, self.env)
        except BaseException as error:
            # Before exec: the harness raises it. A failed exec: the program's stderr.
            message = f"{type(error).__name__}: {error}\n"
            with contextlib.suppress(OSError):
                os.write(status_fd, b"error " + message.encode())
            with contextlib.suppress(OSError):
                os.write(2, f"sandbox: cannot run {self.argv[0]}: {message}".encode())
        finally:
            os._exit(127)

    def _enter_namespace(self) -> None:
        limits = self.limits
        for name in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):  # Python's, not ours
            signal.signal(name, signal.SIG_DFL)
        # The uid that owns /tmp, as the server's user namespace sees it: in a user
        # namespace the program's uid maps to the server's own (0 there).
        owner = 0 if self.user_namespace else self.uid
        _mount(
            "tmpfs",
            "/tmp",
            "tmpfs",
            MS_NOSUID | MS_NODEV,
            f"size={limits.tmpfs_bytes},nr_inodes=4096,mode=0700,uid={owner},gid={owner}",
        )
        os.chdir("/tmp")
        for name, value in (
            (resource.RLIMIT_CPU, limits.cpu_seconds),
            (resource.RLIMIT_AS, limits.memory_bytes),
            (resource.RLIMIT_FSIZE, limits.file_size_bytes),
            (resource.RLIMIT_NOFILE, limits.max_open_files),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(name, (value, value))
        nproc = (limits.max_processes, limits.max_processes)
        if self.user_namespace:
            # A nested user namespace of our own: its capabilities cover only what it
            # creates, never the mounts, pid or network namespace made above, and exec
            # as a non-zero uid drops them anyway. Created before RLIMIT_NPROC is
            # lowered, so the limit counts this namespace's processes only.
            _check(self.libc.unshare(CLONE_NEWUSER), "unshare user namespace")
            _write_id_maps(self.proc_fd, f"{self.uid} 0 1", f"{self.uid} 0 1")
            resource.setrlimit(resource.RLIMIT_NPROC, nproc)
        else:
            resource.setrlimit(resource.RLIMIT_NPROC, nproc)  # as root, before dropping it
            os.setgroups([])
            os.setresgid(self.uid, self.uid, self.uid)
            os.setresuid(self.uid, self.uid, self.uid)


def _write_id_maps(proc_fd: int, uid_map: str, gid_map: str) -> None:
    """Map ids in the user namespace just entered ("inside outside count" lines), through
    `proc_fd`, a descriptor of a /proc (opened now, each file belongs to that namespace).

    Unprivileged, a process may map only its own ids, and gids only once setgroups(2)
    is denied.
    """
    for name, text in (("setgroups", "deny"), ("uid_map", uid_map), ("gid_map", gid_map)):
        fd = os.open(f"self/{name}", os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc_fd)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _close_descriptors_from(first: int, keep: Sequence[int]) -> None:
    """Close every descriptor from `first` on, except those in `keep`."""
    start = first
    for fd in sorted(fd for fd in keep if fd >= first):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


@dataclass(frozen=True)
class _Running:
    """One execution the fork server watches: pid 1 (in the server's pid namespace) and
    the harness's pipes."""

    pid: int
    pid_fd: int
    control_fd: int
    status_fd: int


def _serve_forks(socket_fd: int, plan: dict[str, list[str]], user_namespace: bool) -> None:
    """The fork server: jail itself, then start executions on request, kill them on
    command, report exits.

    Says `ready` (or `error <text>`) on the channel once jailed. Each request (JSON +
    descriptors: stdin, stdout, stderr, control, status, [report], [passed...]) gets a
    child that is pid 1 of a new pid namespace (`_Launch`); the reply is its pid. Any byte
    or EOF on an execution's control pipe (the harness hit a limit, or died) kills its
    pid 1. Its exit is written to the status pipe, as `exit <code>`, once pid 1 is
    reaped -- which the kernel allows only after every process of its namespace is gone.
    """
    libc = _libc()
    channel = socket.socket(fileno=socket_fd)
    try:
        # The host's /proc, kept by descriptor: the tree has none.
        proc_fd = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        if user_namespace:
            _become_namespace_root(channel, proc_fd)
        _enter_jail(plan, own_device_nodes=not user_namespace)
        own_pid_namespace = os.open("self/ns/pid", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except BaseException as error:
        channel.send(f"error {type(error).__name__}: {error}".encode())
        return
    channel.send(b"ready")
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    by_pid_fd: dict[int, _Running] = {}
    by_control_fd: dict[int, _Running] = {}
    while True:
        for key, _ in selector.select():
            if selector.get_map().get(key.fd) is not key:
                # Handled earlier in this batch: an execution's exit closes its control
                # pipe too (and a request may since have reused the number).
                continue
            if key.fileobj is channel:
                try:
                    message, fds, _, _ = socket.recv_fds(
                        channel, MAX_REQUEST_BYTES, 6 + MAX_PASS_FDS
                    )
                except OSError:
                    return
                if not message:
                    return  # the harness closed its end
                *child_fds, control_fd, status_fd = fds[:3] + fds[5:] + fds[3:5]
                # A fresh pid namespace for the next child only; then back to our own.
                _check(libc.setns(own_pid_namespace, CLONE_NEWPID), "setns pid")
                _check(libc.unshare(CLONE_NEWPID), "unshare pid namespace")
                pid = os.fork()
                if pid == 0:
                    request = json.loads(message)
                    _Launch(request, child_fds, status_fd, proc_fd, user_namespace)()
                _check(libc.setns(own_pid_namespace, CLONE_NEWPID), "setns pid")
                for fd in child_fds:
                    os.close(fd)
                running = _Running(pid, os.pidfd_open(pid), control_fd, status_fd)
                by_pid_fd[running.pid_fd] = by_control_fd[control_fd] = running
                selector.register(running.pid_fd, selectors.EVENT_READ)
                selector.register(control_fd, selectors.EVENT_READ)
                channel.send(str(pid).encode())
            elif key.fd in by_control_fd:
                running = by_control_fd.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                with contextlib.suppress(ProcessLookupError):  # unreaped: the pid is still ours
                    os.kill(running.pid, signal.SIGKILL)
            else:
                running = by_pid_fd.pop(key.fd)
                _, status = os.waitpid(running.pid, 0)
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
                with contextlib.suppress(OSError):
                    os.write(running.status_fd, f"exit {code}\n".encode())
                selector.unregister(running.pid_fd)
                os.close(running.pid_fd)
                os.close(running.status_fd)
                if by_control_fd.pop(running.control_fd, None) is not None:
                    selector.unregister(running.control_fd)
                    os.close(running.control_fd)


def _become_namespace_root(channel: socket.socket, proc_fd: int) -> None:
    """Enter a user namespace as its root and continue as pid 1 of a pid namespace it owns.

    Creating a pid namespace per execution needs CAP_SYS_ADMIN over the current one (to
    `setns` back into it between children): true only of a pid namespace our user
    namespace owns. The process that unshares stays outside it, waits for the server
    (its only child) and exits with its status, so the harness's handle still tells when
    the server is gone; it lets go of the channel, whose EOF tells the harness the same.
    """
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWPID), "unshare user and pid namespaces")
    _write_id_maps(proc_fd, f"0 {uid} 1", f"0 {gid} 1")
    server = os.fork()
    if server == 0:  # the parent is single-threaded: its death is this process's cue
        _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        return
    channel.close()
    _, status = os.waitpid(server, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _enter_jail(plan: dict[str, list[str]], own_device_nodes: bool) -> None:
    """Make this process's root a read-only tmpfs holding only `plan`'s paths.

    `plan` (from `_jail_plan`): "dirs" and "files" to bind at their own paths, "hidden"
    directories inside those to cover with an empty tmpfs. Also unshares the network
    namespace, leaving only a downed loopback. The tree gets an empty /tmp, on which
    each execution mounts its own. With `own_device_nodes` (real root only) the
    `DEVICE_NODES` among the files are made afresh, mode 0666, on a /dev tmpfs of their
    own instead of bound (see `DEVICE_NODES`).
    """
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare mount and network namespaces")
    # Private propagation first, so nothing below leaks back to the host's mounts.
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    # By descriptor, opened before the build directory is covered (a source may lie
    # under it); a bind's source must be a mount of this namespace, hence only now.
    sources = {
        path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in plan["dirs"] + plan["files"]
    }
    devices = {}  # path -> device number, for the nodes made instead of bound
    for path in plan["files"]:
        if own_device_nodes and path in DEVICE_NODES:
            host = os.stat(sources[path])
            if stat.S_ISCHR(host.st_mode):
                devices[path] = host.st_rdev
    root = JAIL_BUILD_DIR
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    if devices:
        # Not MS_NODEV: the nodes must work; nothing else is ever placed here.
        os.makedirs(root + "/dev")
        _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=4k,mode=0755")
        for path, device in devices.items():
            os.mknod(root + path, stat.S_IFCHR | 0o666, device)
            os.chmod(root + path, 0o666)  # mknod's mode passes through the umask
    for path in [p for p in plan["dirs"] + plan["files"] if p not in devices]:
        target = root + path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if path in plan["dirs"]:
            os.makedirs(target, exist_ok=True)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        _mount(f"/proc/self/fd/{sources[path]}", target, None, MS_BIND, None)
    for path in plan["hidden"]:
        _mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    os.makedirs(root + "/tmp", exist_ok=True)
    os.chdir(root)
    machine = os.uname().machine
    if machine not in SYS_PIVOT_ROOT:
        raise SandboxUnavailableError(f"no pivot_root syscall number known for {machine}")
    _check(libc.syscall(SYS_PIVOT_ROOT[machine], b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "detach the host's root")
    os.chdir("/")
    attr = _MountAttr(attr_set=MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)
    _check(
        libc.syscall(
            SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)
        ),
        "mount_setattr read-only",
    )
    for fd in sources.values():
        os.close(fd)


class _ForkServer:
    """The harness's handle on its fork server (one per harness process, started lazily)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.channel = ours
        self.lock = threading.Lock()
        argv = [
            INTERPRETER,
            "-S",
            "-B",
            os.path.abspath(__file__),
            str(theirs.fileno()),
            json.dumps(_jail_plan()),
            isolation_mode(),
        ]
        self.process = subprocess.Popen(
            argv,
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            env={"PATH": MINIMAL_ENV["PATH"], "PYTHONSAFEPATH": "1"},
        )
        theirs.close()
        ours.settimeout(SERVER_START_SECONDS)
        try:
            hello = ours.recv(4096).decode("utf-8", "replace")
        except OSError as error:
            hello = f"error no answer ({error})"
        finally:
            ours.settimeout(None)
        if hello != "ready":
            self.process.kill()
            self.process.wait()
            reason = hello.removeprefix("error ") or f"exited with status {self.process.returncode}"
            raise SandboxUnavailableError(f"the sandbox fork server could not start: {reason}")

    def launch(self, request: dict[str, Any], fds: list[int]) -> int:
        """Start one execution; returns its pid 1's pid in the server's pid namespace."""
        message = json.dumps(request).encode()
        if len(message) > MAX_REQUEST_BYTES:
            raise ValueError(
                f"program too large for the sandbox ({len(message)} bytes of arguments and "
                f"environment > {MAX_REQUEST_BYTES}); pass data through stdin"
            )
        with self.lock:
            try:
                socket.send_fds(self.channel, [message], fds)
                reply = self.channel.recv(64)
            except OSError as error:
                raise SandboxUnavailableError(
                    f"the sandbox fork server is gone ({error})"
                ) from error
        if not reply:
            raise SandboxUnavailableError(
                f"the sandbox fork server exited with status {self.process.wait()}"
            )
        return int(reply)


_fork_servers: dict[int, _ForkServer] = {}
_fork_servers_lock = threading.Lock()


def _fork_server() -> _ForkServer:
    """This process's fork server; a forked child of the harness starts its own."""
    with _fork_servers_lock:
        server = _fork_servers.get(os.getpid())
        if server is None or server.process.poll() is not None:
            server = _fork_servers[os.getpid()] = _ForkServer()
        return server


class Sandbox:
    """Runs programs under `SandboxLimits` with the isolation described in the module doc."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits if limits is not None else SandboxLimits()
        isolation_mode()

    def run_python(
        self,
        source: str,
        stdin: bytes = b"",
        report_channel: bool = False,
        pass_fds: Sequence[int] = (),
        cancel_fd: int | None = None,
    ) -> ExecutionResult:
        """Run `source` with `python -S -B` (standard library only, no bytecode files).

        Not `-I`: it would also drop `PYTHONHASHSEED`, and the environment is ours anyway.
        With `report_channel`, the program gets a pipe for structured results on
        descriptor `REPORT_FD` (also in the environment variable `SANDBOX_REPORT_FD`),
        apart from stdout so that the program's prints cannot mix into it.
        """
        return self.execute(
            [INTERPRETER, "-S", "-B", "-c", source], stdin, report_channel, pass_fds, cancel_fd
        )

    def execute(
        self,
        argv: Sequence[str],
        stdin: bytes = b"",
        report_channel: bool = False,
        pass_fds: Sequence[int] = (),
        cancel_fd: int | None = None,
    ) -> ExecutionResult:
        """Run `argv` (an absolute program path first) in the sandbox, feeding `stdin`.

        `pass_fds` appear in the program at descriptors `REPORT_FD + report_channel`
        onwards, in order (a pipe to another sandbox, say); the sandbox owns them from
        the call on and closes its copies once the program has them. When `cancel_fd`
        becomes readable (a byte or EOF), the tree is killed and the result is marked
        `cancelled`.
        """
        if len(pass_fds) > MAX_PASS_FDS:
            for fd in pass_fds:  # ours from the call on, refused or not
                os.close(fd)
            raise ValueError(f"at most {MAX_PASS_FDS} pass_fds, got {len(pass_fds)}")
        env = dict(MINIMAL_ENV)
        if report_channel:
            env["SANDBOX_REPORT_FD"] = str(REPORT_FD)
        request = {
            "argv": list(argv),
            "env": env,
            "limits": dataclasses.asdict(self.limits),
            "uid": SANDBOX_UID_BASE + random.randrange(SANDBOX_UID_SPAN),
        }
        names = ["stdin", "stdout", "stderr", "control", "status"] + (
            ["report"] if report_channel else []
        )
        pipes = {name: os.pipe() for name in names}
        # The child gets the read end of stdin and control, the write end of the others.
        child_ends = [pipes[n][0] if n in ("stdin", "control") else pipes[n][1] for n in names]
        child_ends += pass_fds
        ours = {n: pipes[n][1] if n in ("stdin", "control") else pipes[n][0] for n in names}
        try:
            server = _fork_server()
            # The clock starts once the fork server is up: its first start (an interpreter
            # start, seconds on a loaded machine) is the harness's cost, not the program's;
            # counted, it timed out the first program of a process at a 2 s wall limit.
            started = time.monotonic()
            server.launch(request, child_ends)
        except BaseException:
            for fd in ours.values():
                os.close(fd)
            raise
        finally:
            for fd in child_ends:
                os.close(fd)
        streams = {ours[n]: bytearray() for n in ("stdout", "stderr", "report") if n in ours}
        status_buffer = bytearray()
        timed_out, overflowed, cancelled = _collect(
            ours, stdin, streams, status_buffer, started, self.limits, cancel_fd
        )
        status = _finish(ours, server, status_buffer)
        errors = [line[6:] for line in status.splitlines() if line.startswith("error ")]
        if errors:
            raise SandboxUnavailableError(f"sandbox setup failed: {errors[0]}")
        exits = [line[5:] for line in status.splitlines() if line.startswith("exit ")]
        killed = timed_out or overflowed or cancelled
        exit_code = int(exits[0]) if exits and not killed else None
        stdout, stderr, *report = [bytes(buffer) for buffer in streams.values()]
        return ExecutionResult(
            exit_code=exit_code,
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            # Exact bytes recoverable with .encode("utf-8", "surrogateescape").
            report=report[0].decode("utf-8", "surrogateescape") if report else "",
            timed_out=timed_out,
            output_limit_exceeded=overflowed,
            wall_seconds=time.monotonic() - started,
            cancelled=cancelled,
        )


def _collect(
    ours: dict[str, int],
    stdin: bytes,
    streams: dict[int, bytearray],
    status_buffer: bytearray,
    started: float,
    limits: SandboxLimits,
    cancel_fd: int | None,
) -> tuple[bool, bool, bool]:
    """Feed stdin, read the output streams and the status pipe until EOF, within wall
    time and output cap, unless `cancel_fd` turns readable first.

    Returns (timed_out, output_limit_exceeded, cancelled). EOF on the status pipe means
    pid 1 was reaped (the sandbox is empty); a program that closes its output still runs
    until then.
    """
    deadline = started + limits.wall_seconds
    timed_out = overflowed = cancelled = False
    selector = selectors.DefaultSelector()
    status_fd = ours["status"]
    for fd in [*streams, status_fd]:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    if cancel_fd is not None:
        selector.register(cancel_fd, selectors.EVENT_READ)
    pending_input = memoryview(stdin)
    stdin_fd = ours.pop("stdin")
    if pending_input:
        os.set_blocking(stdin_fd, False)
        selector.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        os.close(stdin_fd)
    total = 0
    try:
        # The cancel pipe alone keeps nothing open: the program is done without it.
        while set(selector.get_map()) - {cancel_fd} and not (overflowed or cancelled):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(remaining):
                if key.fd == cancel_fd:
                    cancelled = True
                    break
                if key.fd == status_fd:
                    data = os.read(status_fd, 4096)
                    status_buffer += data
                    if not data:
                        selector.unregister(status_fd)
                    continue
                if key.fd != stdin_fd:
                    data = os.read(key.fd, 65536)
                    if not data:
                        selector.unregister(key.fd)
                        continue
                    keep = max(0, min(len(data), limits.max_output_bytes - total))
                    streams[key.fd] += data[:keep]
                    total += len(data)
                    overflowed = total > limits.max_output_bytes
                    if overflowed:
                        break
                    continue
                try:
                    written = os.write(stdin_fd, pending_input[:65536])
                except BrokenPipeError:  # the program stopped reading: drop the rest
                    written = len(pending_input)
                pending_input = pending_input[written:]
                if not pending_input:
                    selector.unregister(stdin_fd)
                    os.close(stdin_fd)
    finally:
        if stdin_fd in selector.get_map():
            os.close(stdin_fd)
        selector.close()
    return timed_out, overflowed, cancelled


def _finish(ours: dict[str, int], server: _ForkServer, status: bytearray) -> str:
    """Make sure the sandbox is empty; return the status pipe's text. Closes our pipes.

    Closing the control pipe tells the fork server to kill pid 1 if it still runs; the
    status pipe's EOF means the server reaped it, possible only once the namespace is empty.
    """
    os.close(ours.pop("control"))
    status_fd = ours.pop("status")
    deadline = time.monotonic() + SERVER_GRACE_SECONDS
    with selectors.DefaultSelector() as selector:
        selector.register(status_fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(deadline - time.monotonic()):
                data = os.read(status_fd, 4096)
                if not data:
                    break
                status += data
        else:
            # Never seen: the server is stuck. Every pid 1 dies with it (PR_SET_PDEATHSIG),
            # and with a pid 1 its whole namespace; the next execution starts a new server.
            server.process.kill()
    os.close(status_fd)
    for fd in ours.values():
        os.close(fd)
    return status.decode("utf-8", "replace")


@cache
def _jail_plan() -> dict[str, list[str]]:
    """What the sandbox's file tree holds (see `_enter_jail`), by the host's paths.

    The standard library's directory (site-packages inside it hidden), the interpreter,
    the shared libraries `ldd` lists for it and its extension modules (lib-dynload), the
    loader's cache, glibc's libgcc_s (loaded at run time for thread exit), and
    `DEVICE_NODES`.
    """
    stdlib = os.path.dirname(os.path.realpath(os.__file__))
    hidden = [
        path
        for name in ("site-packages", "dist-packages")
        if os.path.isdir(path := os.path.join(stdlib, name))
    ]
    binaries = [INTERPRETER, *sorted(glob.glob(os.path.join(stdlib, "lib-dynload", "*.so")))]
    try:
        listing = subprocess.run(
            ["ldd", *binaries], capture_output=True, text=True, env={"LC_ALL": "C"}
        ).stdout
    except FileNotFoundError:
        raise SandboxUnavailableError(
            "the sandbox needs `ldd` (glibc's libc-bin) to find the interpreter's libraries"
        ) from None
    libraries = set()
    for line in listing.splitlines():
        # "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "\t/lib64/ld-linux...".
        path = line.split("=>")[-1].strip().split(" (")[0]
        if line.startswith("\t") and path.startswith("/") and os.path.isfile(path):
            libraries.add(path)
    extras = {"/etc/ld.so.cache", *DEVICE_NODES}
    extras |= {os.path.join(os.path.dirname(lib), "libgcc_s.so.1") for lib in libraries}
    files = [INTERPRETER, *sorted(libraries | {p for p in extras if os.path.exists(p)})]
    # A file inside the standard library's directory comes with it.
    files = [path for path in dict.fromkeys(files) if not path.startswith(stdlib + os.sep)]
    return {"dirs": [stdlib], "files": files, "hidden": hidden}


# Run by `isolation_mode` in a fresh interpreter: can this user build what the sandbox
# builds (a user namespace with mounts)? Prints the first step that fails.
_USER_NAMESPACE_PROBE = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def step(what, result):
    if result != 0:
        print(what + ": " + os.strerror(ctypes.get_errno()))
        raise SystemExit(1)
step("unshare(CLONE_NEWUSER | CLONE_NEWNS)", libc.unshare({CLONE_NEWUSER | CLONE_NEWNS}))
for name, text in (("setgroups", "deny"), ("uid_map", "0 %d 1" % {os.geteuid()}),
                   ("gid_map", "0 %d 1" % {os.getegid()})):
    with open("/proc/self/" + name, "w") as handle:
        handle.write(text)
step("mount --make-rprivate /", libc.mount(b"none", b"/", None, {MS_REC | MS_PRIVATE}, None))
step("mount tmpfs", libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None))
"""


@cache
def isolation_mode() -> str:
    """ "root" or "user-namespace" (see module doc); SandboxUnavailableError, in one line
    naming what is missing, where neither works."""
    if sys.platform != "linux":
        raise SandboxUnavailableError(f"the sandbox needs Linux namespaces, not {sys.platform}")
    try:
        with open("/proc/self/uid_map") as handle:
            initial_user_namespace = handle.read().split() == ["0", "0", "4294967295"]
    except FileNotFoundError:  # a kernel without user namespaces has only the initial one
        initial_user_namespace = True
    if os.geteuid() == 0 and initial_user_namespace:
        return "root"
    probe = subprocess.run(
        [INTERPRETER, "-S", "-c", _USER_NAMESPACE_PROBE],
        capture_output=True,
        text=True,
        env={"PATH": MINIMAL_ENV["PATH"]},
    )
    if probe.returncode != 0:
        failure = (probe.stdout.strip() or probe.stderr.strip() or "failed").splitlines()[-1]
        raise SandboxUnavailableError(
            f"the sandbox needs root or unprivileged user namespaces, and uid {os.geteuid()} "
            f"cannot create one ({failure}): enable the kernel's user namespaces "
            "(CONFIG_USER_NS; sysctl user.max_user_namespaces > 0, "
            "kernel.unprivileged_userns_clone = 1, or the AppArmor userns policy) or run as root"
        )
    return "user-namespace"


if __name__ == "__main__":
    _serve_forks(int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "user-namespace")
