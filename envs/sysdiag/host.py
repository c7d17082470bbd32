"""The simulated Linux host: processes, systemd units, a file system, mounts, DNS.

Pure Python state; nothing here touches the real machine. The state is mutable on
purpose (it is a simulation that commands change); every mutation bumps `version`, so
callers can cache outputs of read-only commands until the state changes.

Sizes are bytes, memory is KiB (as `ps` reports RSS), times are `datetime`s on a
frozen simulated clock (the clock does not tick between steps, so the same state
always prints the same text: GiGPO's anchor states rely on exact observation matches).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

KIB = 1024
GIB = 1024**3


@dataclass(slots=True)
class Proc:
    """One process as `ps` shows it. `rss_kb`/`vsz_kb` in KiB, `cpu` in percent."""

    pid: int
    ppid: int
    user: str
    cpu: float
    rss_kb: int
    vsz_kb: int
    stat: str
    start: str
    cpu_time: str
    command: str
    unit: str | None = None
    ports: tuple[int, ...] = ()
    respawns_children: bool = False
    tty: str = "?"


@dataclass(slots=True)
class Service:
    """A systemd unit and how to (re)spawn its processes.

    `state` is "active", "failed" or "inactive". `journal` holds (time, identifier,
    pid, message) records. `leaking` marks a main process whose memory has grown
    without bound (cleared by a restart). `cert_path`/`loaded_cert_expiry`: the TLS
    certificate the running process loaded (it only re-reads it on start or reload).
    """

    unit: str
    description: str
    user: str
    command: str
    worker_command: str | None
    workers: int
    ports: tuple[int, ...]
    config_path: str | None
    rss_kb: int
    ident: str
    permission_error: str
    bind_error: str
    restart_policy: str = "on-failure"
    pid_file: str | None = None
    log_path: str | None = None
    cert_path: str | None = None
    state: str = "active"
    main_pid: int | None = None
    since: datetime = datetime(2025, 1, 1)
    journal: list[tuple[datetime, str, int, str]] = field(default_factory=list)
    leaking: bool = False
    loaded_cert_expiry: datetime | None = None


@dataclass(slots=True)
class File:
    """A regular file. `content` is what `cat` prints (None: binary). `holder_unit`
    is the unit whose process keeps it open (rm of an open file frees no space)."""

    size: int
    mode: int
    owner: str
    group: str
    mtime: datetime
    content: str | None = None
    holder_unit: str | None = None


@dataclass(slots=True)
class Directory:
    """A directory. `bulk_files` small files named `bulk_prefix*` stand for huge
    directories (a session store with a million files) without a million records."""

    mode: int
    owner: str
    group: str
    mtime: datetime
    bulk_files: int = 0
    bulk_bytes: int = 0
    bulk_prefix: str = ""


@dataclass(slots=True)
class Mount:
    """A mounted file system; `base_*` is what the files we do not model occupy."""

    device: str
    fstype: str
    mountpoint: str
    size: int
    base_used: int
    inodes: int
    base_inodes_used: int


@dataclass(frozen=True)
class Usage:
    """Computed usage of one mount."""

    used: int
    inodes_used: int


class Host:
    """The whole simulated machine. Build one with `build_host`."""

    def __init__(self, hostname: str, now: datetime, boot: datetime, mem_total_kb: int) -> None:
        self.hostname = hostname
        self.now = now
        self.boot = boot
        self.mem_total_kb = mem_total_kb
        self.cores = 4
        self.procs: dict[int, Proc] = {}
        self.services: dict[str, Service] = {}
        self.files: dict[str, File] = {}
        self.dirs: dict[str, Directory] = {}
        self.mounts: list[Mount] = []
        self.deleted_open: list[tuple[str, str, int]] = []  # (unit, path, size)
        self.dmesg: list[tuple[float, str]] = []
        self.working_nameservers: frozenset[str] = frozenset()
        self.resolver_ip = ""
        self.certs: dict[str, datetime] = {}  # certificate path -> notAfter
        self.next_pid = 1000
        self.version = 0
        self._usage: dict[str, Usage] = {}
        self._usage_version = -1
        # Rendered `ps`/`top` rows by (format, pid). Pids are never reused and a process
        # record only changes when it is reparented (see `kill`), so rows stay valid.
        self.rows: dict[tuple[str, int], str] = {}
        self.kernel = "5.15.0-91-generic"
        self.rng = random.Random(0)

    # ----------------------------------------------------------------- bookkeeping
    def touch(self) -> None:
        """Record a state change (invalidates cached command outputs)."""
        self.version += 1

    def forget_rows(self, pid: int) -> None:
        for kind in ("aux", "ef", "top"):
            self.rows.pop((kind, pid), None)

    def alloc_pid(self) -> int:
        # Gaps of 1-32, as other short-lived processes take pids in between
        # (getrandbits: several times cheaper than randint on this hot path).
        self.next_pid += self.rng.getrandbits(5) + 1
        return self.next_pid

    def unit_of(self, name: str) -> Service | None:
        """Look a unit up by `nginx` or `nginx.service`."""
        return self.services.get(name if name.endswith(".service") else name + ".service")

    # ------------------------------------------------------------------ file system
    def add_dir(self, path: str, owner: str = "root", group: str = "root", mode: int = 0o755):
        while path not in self.dirs:
            self.dirs[path] = Directory(mode, owner, group, self.now - timedelta(days=30))
            if path == "/":
                break
            path = parent_of(path)
        self.touch()

    def add_file(self, path: str, file: File) -> None:
        self.add_dir(parent_of(path))
        self.files[path] = file
        self.touch()

    def mount_of(self, path: str) -> Mount:
        """The mount holding `path` (longest mountpoint prefix)."""
        points = tuple(m.mountpoint for m in self.mounts)
        point = mountpoint_of(path, points)
        return next(m for m in self.mounts if m.mountpoint == point)

    def usage(self, mount: Mount) -> Usage:
        """Used bytes and inodes of `mount`, recomputed only after a state change."""
        if self._usage_version != self.version:
            self._usage = self._compute_usage()
            self._usage_version = self.version
        return self._usage[mount.mountpoint]

    def _compute_usage(self) -> dict[str, Usage]:
        points = tuple(m.mountpoint for m in self.mounts)
        used = {m.mountpoint: m.base_used for m in self.mounts}
        inodes = {m.mountpoint: m.base_inodes_used for m in self.mounts}
        for path, file in self.files.items():
            point = mountpoint_of(path, points)
            used[point] += file.size
            inodes[point] += 1
        for path, directory in self.dirs.items():
            point = mountpoint_of(path, points)
            used[point] += directory.bulk_bytes
            inodes[point] += directory.bulk_files + 1
        for _unit, path, size in self.deleted_open:
            used[mountpoint_of(path, points)] += size
        return {
            m.mountpoint: Usage(min(used[point], m.size), min(inodes[point], m.inodes))
            for m in self.mounts
            for point in (m.mountpoint,)
        }

    def children(self, directory: str) -> list[str]:
        """Names directly inside `directory` (files and subdirectories), sorted."""
        prefix = directory.rstrip("/") + "/"
        names = {
            path[len(prefix) :].split("/", 1)[0]
            for path in (*self.files, *self.dirs)
            if path.startswith(prefix) and path != prefix
        }
        return sorted(names)

    def subtree_size(self, path: str) -> tuple[int, int]:
        """(bytes, inodes) below and including `path`."""
        if path in self.files:
            return self.files[path].size, 1
        prefix = path.rstrip("/") + "/"
        size, inodes = 0, 0
        for file_path, file in self.files.items():
            if file_path.startswith(prefix):
                size += file.size
                inodes += 1
        for dir_path, directory in self.dirs.items():
            if dir_path == path or dir_path.startswith(prefix):
                size += directory.bulk_bytes + 4096
                inodes += directory.bulk_files + 1
        return size, inodes

    def remove_file(self, path: str) -> None:
        """Unlink a file; an open file keeps its blocks until its holder restarts."""
        file = self.files.pop(path)
        holder = self.services.get(file.holder_unit or "")
        if holder is not None and holder.state == "active":
            self.deleted_open.append((holder.unit, path, file.size))
        self.touch()

    def remove_tree(self, path: str) -> None:
        prefix = path.rstrip("/") + "/"
        for file_path in [p for p in self.files if p.startswith(prefix)]:
            self.remove_file(file_path)
        for dir_path in [p for p in self.dirs if p.startswith(prefix)]:
            del self.dirs[dir_path]
        self.dirs.pop(path, None)
        self.touch()

    def clear_bulk(self, path: str) -> None:
        directory = self.dirs[path]
        directory.bulk_files = 0
        directory.bulk_bytes = 0
        self.touch()

    # -------------------------------------------------------------------- processes
    def spawn(self, **fields) -> Proc:
        proc = Proc(pid=self.alloc_pid(), **fields)
        self.procs[proc.pid] = proc
        self.touch()
        return proc

    def kill(self, pid: int, signal: str = "TERM") -> None:
        """Deliver a terminating signal: the process exits, with its consequences.

        Zombies ignore signals (they are already dead; only their parent can reap
        them). A parent that respawns workers replaces a killed worker at once, which
        is why killing fork-storm children never helps.
        """
        proc = self.procs[pid]
        if proc.stat.startswith("Z") or pid == 1:
            return
        del self.procs[pid]
        parent = self.procs.get(proc.ppid)
        for child in [c for c in self.procs.values() if c.ppid == pid]:
            if child.stat.startswith("Z"):
                del self.procs[child.pid]  # reparented to init, which reaps it at once
            elif proc.unit is not None and child.unit == proc.unit:
                del self.procs[child.pid]  # service workers exit with their master
            else:
                child.ppid = 1
                self.forget_rows(child.pid)
        self.touch()
        if parent is not None and parent.respawns_children:
            self.spawn(
                ppid=parent.pid,
                user=proc.user,
                cpu=proc.cpu,
                rss_kb=proc.rss_kb,
                vsz_kb=proc.vsz_kb,
                stat=proc.stat,
                start=self.now.strftime("%H:%M"),
                cpu_time="0:00",
                command=proc.command,
            )
        service = self.services.get(proc.unit or "")
        if service is not None and service.main_pid == pid:
            self._main_process_exited(service, signal)

    def _main_process_exited(self, service: Service, signal: str) -> None:
        code = "9/KILL" if signal == "KILL" else "15/TERM"
        self.log(
            service,
            "systemd",
            1,
            f"{service.unit}: Main process exited, code=killed, status={code}",
        )
        # SIGTERM lets the daemon remove its own pid file; SIGKILL leaves it stale.
        if signal != "KILL" and service.pid_file:
            self.files.pop(service.pid_file, None)
        self._release_deleted(service.unit)
        service.main_pid = None
        service.leaking = False
        if service.restart_policy == "always":
            self.log(service, "systemd", 1, f"{service.unit}: Scheduled restart job.")
            self.start(service)
        else:
            service.state = "failed" if signal == "KILL" else "inactive"
            self.log(service, "systemd", 1, f"{service.unit}: Failed with result 'signal'.")
        self.touch()

    # --------------------------------------------------------------------- services
    def log(self, service: Service, ident: str, pid: int, message: str) -> None:
        service.journal.append((self.now, ident, pid, message))

    def readable_by(self, path: str, user: str) -> bool:
        file = self.files[path]
        if user == "root" or file.owner == user:
            return bool(file.mode & 0o400) or user == "root"
        if file.group == user:
            return bool(file.mode & 0o040)
        return bool(file.mode & 0o004)

    def start_failure(self, service: Service) -> str | None:
        """Why `service` cannot start now (the daemon's own error line), or None."""
        config = service.config_path
        if (
            config is not None
            and config in self.files
            and not self.readable_by(config, service.user)
        ):
            return service.permission_error.format(path=config)
        if service.pid_file and service.pid_file in self.files:
            return (
                f"pid file {service.pid_file} already exists; is another instance running? "
                "Refusing to start"
            )
        for port in service.ports:
            for proc in self.procs.values():
                if port in proc.ports and proc.unit != service.unit:
                    return service.bind_error.format(port=port)
        return None

    def start(self, service: Service) -> bool:
        """Start a stopped unit; on failure log the daemon's error and mark it failed."""
        self.log(service, "systemd", 1, f"Starting {service.description}...")
        error = self.start_failure(service)
        pid = self.alloc_pid()
        if error is not None:
            self.log(service, service.ident, pid, error)
            self.log(
                service,
                "systemd",
                1,
                f"{service.unit}: Control process exited, code=exited, status=1/FAILURE",
            )
            self.log(service, "systemd", 1, f"{service.unit}: Failed with result 'exit-code'.")
            self.log(service, "systemd", 1, f"Failed to start {service.description}.")
            service.state = "failed"
            service.main_pid = None
            service.since = self.now
            self.touch()
            return False
        self.next_pid -= 1  # the pid reserved for the error line goes to the daemon
        self.spawn_service_processes(service)
        if service.pid_file:
            self.files[service.pid_file] = File(
                8, 0o644, "root", "root", self.now, f"{service.main_pid}\n"
            )
        service.loaded_cert_expiry = self.certs.get(service.cert_path or "")
        service.leaking = False
        service.state = "active"
        service.since = self.now
        self.log(service, "systemd", 1, f"Started {service.description}.")
        self.touch()
        return True

    def spawn_service_processes(self, service: Service) -> None:
        clock = self.now.strftime("%H:%M")
        master = self.spawn(
            ppid=1,
            user="root" if service.worker_command else service.user,
            cpu=0.0,
            rss_kb=service.rss_kb // 4 if service.worker_command else service.rss_kb,
            vsz_kb=service.rss_kb * 3,
            stat="Ss",
            start=clock,
            cpu_time="0:00",
            command=service.command,
            unit=service.unit,
            ports=service.ports,
        )
        service.main_pid = master.pid
        for _ in range(service.workers if service.worker_command else 0):
            self.spawn(
                ppid=master.pid,
                user=service.user,
                cpu=round(self.rng.uniform(0.0, 1.5), 1),
                rss_kb=service.rss_kb,
                vsz_kb=service.rss_kb * 3,
                stat="S",
                start=clock,
                cpu_time="0:00",
                command=service.worker_command or "",
                unit=service.unit,
            )

    def stop(self, service: Service) -> None:
        for pid in [p.pid for p in self.procs.values() if p.unit == service.unit]:
            del self.procs[pid]
        # A running daemon removes its pid file on a clean stop; a crashed one is not
        # there to do it, so a stale pid file survives `systemctl stop/restart`.
        if service.pid_file and service.state == "active":
            self.files.pop(service.pid_file, None)
        self._release_deleted(service.unit)
        if service.state == "active":
            self.log(service, "systemd", 1, f"Stopping {service.description}...")
            self.log(service, "systemd", 1, f"Stopped {service.description}.")
        service.state = "inactive"
        service.main_pid = None
        self.touch()

    def restart(self, service: Service) -> bool:
        self.stop(service)
        return self.start(service)

    def _release_deleted(self, unit: str) -> None:
        self.deleted_open = [entry for entry in self.deleted_open if entry[0] != unit]

    # ----------------------------------------------------------------------- reboot
    def reboot(self) -> None:
        """Power-cycle: every process dies, /run is emptied, enabled units start."""
        # Only init and kernel threads survive; every daemon is a unit and restarts below.
        self.procs = {pid: p for pid, p in self.procs.items() if pid in (1, 2) or p.ppid == 2}
        for path in [p for p in self.files if p.startswith("/run/")]:
            del self.files[path]
        self.deleted_open = []
        self.boot = self.now
        for service in self.services.values():
            service.main_pid = None
            service.state = "inactive"
            self.start(service)
        self.touch()


@lru_cache(maxsize=1 << 16)
def mountpoint_of(path: str, mountpoints: tuple[str, ...]) -> str:
    """The longest of `mountpoints` containing `path`. Cached across hosts: every host
    has the same mount layout and mostly the same paths, so episodes share the work."""
    probe = path + "/"
    best = "/"
    for point in mountpoints:
        if probe.startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best = point
    return best


def parent_of(path: str) -> str:
    head = path.rstrip("/").rsplit("/", 1)[0]
    return head or "/"
