"""Fault families: each breaks one thing in a healthy host, knows how it is diagnosed,
what fixes its root cause, and what a scripted expert types.

A family is a class constructed from `(rng, host, app)`: it mutates the host, then
exposes
- `task`: the instruction (symptoms only, as a user would report them);
- `clues`: strings that appear in a command's output exactly when that output shows the
  root cause (the culprit's `ps` row, the daemon's error line, ...) - `key_step` labels;
- `diagnosis`: the expert's read-only commands, then `fix_action(host)`: its next fix;
- `progress(host)`: how many of the fix's sub-goals hold (a rise marks a key step);
- `is_fixed(host)`: the root cause is gone and the application serves again;
- `candidates(host)`: fault-specific admissible commands as (command, gate), where the
  command is offered only once the gate string has appeared in some output (the agent
  could have seen that PID or path) - right fixes and plausible wrong ones alike.

`REBOOT_CLEARS`: whether a reboot makes the symptoms go away (processes die, /run is
emptied); a persistent fault (a file on disk) survives it.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import timedelta
from typing import ClassVar

from creditgym.envs.sysdiag.catalog import (
    APP_NAMES,
    USERS,
    nginx_service,
    node_app,
    python_app,
    redis_service,
)
from creditgym.envs.sysdiag.host import File, Host, Service
from creditgym.envs.sysdiag.render import (
    comm_of,
    du_row,
    human,
    ls_row,
    ps_aux_row,
    ps_ef_row,
    top_row,
)

AppBuilder = Callable[[random.Random, Host], Service]
Candidate = tuple[str, str | None]


def short(service: Service) -> str:
    return service.unit.removesuffix(".service")


def python_apps() -> tuple[AppBuilder, ...]:
    return tuple(python_app(name) for name in APP_NAMES)


def node_apps() -> tuple[AppBuilder, ...]:
    return tuple(node_app(name) for name in APP_NAMES)


class Fault(ABC):
    """One injected fault (see the module docstring for the contract)."""

    family: ClassVar[str]
    REBOOT_CLEARS: ClassVar[bool]
    apps: ClassVar[Callable[[], tuple[AppBuilder, ...]]]

    def __init__(self, rng: random.Random, host: Host, app: Service) -> None:
        self.app = app
        self.unit = short(app)
        self.task = ""
        self.root_cause = ""
        self.clues: tuple[str, ...] = ()
        self.diagnosis: tuple[str, ...] = ()
        self.inject(rng, host)

    @abstractmethod
    def inject(self, rng: random.Random, host: Host) -> None: ...

    @abstractmethod
    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        """Each sub-goal of the fix, in the order the expert reaches them."""

    @abstractmethod
    def fix_action(self, host: Host) -> str: ...

    def candidates(self, host: Host) -> list[Candidate]:
        return []

    def progress(self, host: Host) -> int:
        return sum(self.fix_goals(host))

    def is_fixed(self, host: Host) -> bool:
        return all(self.fix_goals(host)) and self.app.state == "active"

    def reveals(self, output: str) -> bool:
        return any(clue in output for clue in self.clues)

    def restart_command(self) -> str:
        return f"systemctl restart {self.unit}"


# How each runtime reports ENOSPC when writing `{path}`.
NO_SPACE_ERRORS = {
    "gunicorn": "OSError: [Errno 28] No space left on device: '{path}'",
    "node": "Error: ENOSPC: no space left on device, write '{path}'",
    "nginx": '[crit] write() to "{path}" failed (28: No space left on device)',
}


def no_space_error(service: Service, path: str) -> str:
    return NO_SPACE_ERRORS[service.ident].format(path=path)


def _journal(host: Host, service: Service, minutes_ago: float, message: str) -> None:
    service.journal.append(
        (host.now - timedelta(minutes=minutes_ago), service.ident, service.main_pid or 1, message)
    )
    service.journal.sort(key=lambda record: record[0])


def _fail_unit(host: Host, service: Service, minutes_ago: float, error: str) -> None:
    """Leave `service` failed, as if it was stopped cleanly (its pid file removed) and
    systemd's next start attempt logged `error`."""
    for pid in [p.pid for p in host.procs.values() if p.unit == service.unit]:
        del host.procs[pid]
    if service.pid_file:
        host.files.pop(service.pid_file, None)
    when = host.now - timedelta(minutes=minutes_ago)
    pid = host.alloc_pid()
    for ident, message in (
        ("systemd", f"Starting {service.description}..."),
        (service.ident, error),
        ("systemd", f"{service.unit}: Control process exited, code=exited, status=1/FAILURE"),
        ("systemd", f"{service.unit}: Failed with result 'exit-code'."),
        ("systemd", f"Failed to start {service.description}."),
    ):
        service.journal.append((when, ident, 1 if ident == "systemd" else pid, message))
    service.state = "failed"
    service.main_pid = None
    service.since = when


class CpuHog(Fault):
    """A runaway batch job or a cryptominer pins every core; the app starves."""

    family = "cpu_hog"
    REBOOT_CLEARS = True
    apps = staticmethod(lambda: (nginx_service, *python_apps(), *node_apps()))

    def inject(self, rng: random.Random, host: Host) -> None:
        user = rng.choice(USERS)
        day = (host.now - timedelta(days=rng.randint(0, 3))).strftime("%Y%m%d")
        command = rng.choice(
            (
                f"/usr/bin/python3 /home/{user}/scripts/reindex_{rng.randint(1, 99)}.py --all",
                f"/usr/bin/xz -9e -T0 /var/backups/db-{day}.sql",
                f"/tmp/.X11-unix/.{rng.choice(('kdevtmpfsi', 'kinsing', 'xmrig'))} -o "
                f"pool.{rng.choice(('minexmr', 'supportxmr'))}.com:443",
                f"/usr/bin/ffmpeg -i /srv/media/upload_{rng.randint(1000, 9999)}.mov -c:v libx265 "
                "-preset veryslow out.mp4",
                f"stress-ng --cpu {rng.choice((2, 4, 8))} --timeout 0",
                f"/usr/bin/gzip -9 /var/backups/archive-{day}.tar",
            )
        )
        self.hog = host.spawn(
            ppid=1,
            user=user,
            cpu=round(rng.uniform(180.0, 396.0), 1),
            rss_kb=rng.randint(20_000, 600_000),
            vsz_kb=rng.randint(600_000, 2_000_000),
            stat="R",
            start=(host.now - timedelta(minutes=rng.randint(20, 600))).strftime("%H:%M"),
            cpu_time=f"{rng.randint(60, 900)}:{rng.randint(0, 59):02d}",
            command=command,
        )
        _journal(host, self.app, 3, "WARNING worker timeout (pid:1) - request took 30.1s")
        self.task = (
            f"Users report that {self.unit} on this host has become extremely slow. "
            "Find and fix the root cause."
        )
        self.root_cause = f"process {self.hog.pid} ({command.split(' ')[0]}) was pinning the CPUs"
        self.clues = (
            ps_aux_row(host, self.hog),
            top_row(host, self.hog),
            ps_ef_row(host, self.hog),
        )
        self.diagnosis = ("uptime", "top -bn1")

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        return (self.hog.pid not in host.procs,)

    def fix_action(self, host: Host) -> str:
        return f"kill {self.hog.pid}" if self.hog.pid in host.procs else self.restart_command()

    def candidates(self, host: Host) -> list[Candidate]:
        gate = str(self.hog.pid)
        return [(f"kill {self.hog.pid}", gate), (f"kill -9 {self.hog.pid}", gate)]


class MemoryLeak(Fault):
    """The app's process has leaked most of RAM; the OOM killer has started firing."""

    family = "memory_leak"
    REBOOT_CLEARS = True
    apps = staticmethod(node_apps)

    def inject(self, rng: random.Random, host: Host) -> None:
        leaker = host.procs[self.app.main_pid or 0]
        leaker.rss_kb = int(host.mem_total_kb * rng.uniform(0.72, 0.9))
        leaker.vsz_kb = leaker.rss_kb + rng.randint(900_000, 3_000_000)
        leaker.cpu = round(rng.uniform(8.0, 45.0), 1)
        self.app.leaking = True
        victim = rng.choice(("redis-server", "containerd", "python3", "node"))
        uptime_s = (host.now - host.boot).total_seconds()
        oom = (
            f"Out of memory: Killed process {host.alloc_pid()} ({victim}) total-vm:"
            f"{rng.randint(300_000, 900_000)}kB, anon-rss:{rng.randint(100_000, 400_000)}kB"
        )
        host.dmesg += [
            (
                uptime_s - 300,
                f"{victim} invoked oom-killer: gfp_mask=0x1100cca(GFP_HIGHUSER_MOVABLE)",
            ),
            (uptime_s - 299, oom),
        ]
        _journal(
            host,
            self.app,
            2,
            f"warn: response cache holds {rng.randint(1_200_000, 4_000_000)} entries; "
            "heapUsed still climbing",
        )
        self.task = (
            f"{self.unit} on this host keeps getting slower and other processes are being "
            "killed. Find and fix the root cause."
        )
        self.root_cause = (
            f"{self.unit} (pid {leaker.pid}) had leaked {human(leaker.rss_kb * 1024)} of memory"
        )
        self.clues = (ps_aux_row(host, leaker), top_row(host, leaker))
        self.diagnosis = ("free -h", "ps aux --sort=-%mem")

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        return (not self.app.leaking and self.app.state == "active",)

    def fix_action(self, host: Host) -> str:
        return f"systemctl restart {self.unit}"


class DiskFullLog(Fault):
    """The app logs at debug level into one file that has filled /var."""

    family = "disk_full_log"
    REBOOT_CLEARS = False
    apps = staticmethod(lambda: (nginx_service, *python_apps(), *node_apps()))

    def inject(self, rng: random.Random, host: Host) -> None:
        self.log_path = self.app.log_path or ""
        var = host.mount_of(self.log_path)
        log = host.files[self.log_path]
        free = var.size - host.usage(var).used
        log.size += free - rng.randint(0, 40) * 1024 * 1024
        log.content = (log.content or "") + "".join(
            f"DEBUG request {rng.getrandbits(48):012x} headers={{...}} "
            f"body=<{rng.randint(200, 9000)} bytes>\n"
            for _ in range(4)
        )
        _journal(host, self.app, 1, no_space_error(self.app, self.log_path))
        self.task = (
            f"{self.unit} on this host has started returning errors on every write. "
            "Find and fix the root cause."
        )
        self.root_cause = f"the log file {self.log_path} ({human(log.size)}) had filled /var"
        log_dir = self.log_path.rsplit("/", 1)[0]
        dir_size = host.subtree_size(log_dir)[0]
        self.clues = (
            du_row(dir_size, log_dir, True),
            du_row(log.size, self.log_path, True),
            ls_row(self.log_path.rsplit("/", 1)[1], log, host.now, False),
            ls_row(self.log_path.rsplit("/", 1)[1], log, host.now, True),
        )
        self.diagnosis = ("df -h", "du -sh /var/log/*")

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        var = host.mount_of(self.log_path)
        return (host.usage(var).used < 0.9 * var.size,)

    def fix_action(self, host: Host) -> str:
        if self.log_path in host.files:
            return f"truncate -s 0 {self.log_path}"
        return self.restart_command()

    def candidates(self, host: Host) -> list[Candidate]:
        log_dir = self.log_path.rsplit("/", 1)[0]
        return [
            (f"truncate -s 0 {self.log_path}", log_dir),
            (f"rm {self.log_path}", log_dir),
            ("truncate -s 0 /var/log/syslog", None),
            ("rm /var/log/syslog.1", None),
        ]


class CrashedService(Fault):
    """The app crashed (SIGSEGV) and left a stale pid file that blocks every restart."""

    family = "crashed_service"
    REBOOT_CLEARS = True
    apps = staticmethod(lambda: (nginx_service, redis_service, *python_apps(), *node_apps()))

    def inject(self, rng: random.Random, host: Host) -> None:
        self.pid_file = self.app.pid_file or ""
        crashed_pid = self.app.main_pid or 0
        minutes = rng.uniform(5, 50)
        _journal(
            host,
            self.app,
            minutes + 0.1,
            f"{self.app.unit}: Main process exited, code=killed, status=11/SEGV",
        )
        _fail_unit(
            host,
            self.app,
            minutes,
            f"pid file {self.pid_file} already exists; is another "
            "instance running? Refusing to start",
        )
        # The crash skipped the daemon's cleanup: its pid file outlives it.
        host.files[self.pid_file] = File(
            8, 0o644, "root", "root", host.now - timedelta(minutes=minutes), f"{crashed_pid}\n"
        )
        host.dmesg.append(
            (
                (host.now - host.boot).total_seconds() - minutes * 60,
                f"{self.app.ident}[{crashed_pid}]: segfault at 0 ip 00007f3a2c1b4e10 "
                "sp 00007ffd5e2a8f30 error 4 in libc.so.6",
            )
        )
        self.task = f"{self.unit} on this host is down. Find and fix the root cause."
        self.root_cause = f"a stale pid file {self.pid_file} left by a crash blocked every start"
        self.clues = (f"pid file {self.pid_file} already exists",)
        self.diagnosis = (f"systemctl status {self.unit}",)

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        return (
            self.pid_file not in host.files or self.app.state == "active",
            self.app.state == "active",
        )

    def fix_action(self, host: Host) -> str:
        if self.app.state != "active" and self.pid_file in host.files:
            return f"rm {self.pid_file}"
        return self.restart_command()

    def candidates(self, host: Host) -> list[Candidate]:
        return [(f"rm {self.pid_file}", self.pid_file), (f"cat {self.pid_file}", self.pid_file)]


class PortConflict(Fault):
    """A stray process took the app's port; the app cannot bind after a restart."""

    family = "port_conflict"
    REBOOT_CLEARS = True
    apps = staticmethod(lambda: (*python_apps(), *node_apps()))

    def inject(self, rng: random.Random, host: Host) -> None:
        port = self.app.ports[0]
        user = rng.choice(USERS)
        command = rng.choice(
            (
                f"python3 -m http.server {port}",
                f"/usr/bin/socat TCP-LISTEN:{port},fork,reuseaddr "
                f"TCP:10.0.3.{rng.randint(2, 250)}:{port}",
                f"node /home/{user}/scratch/mock-server.js --port {port}",
                f"/usr/bin/ssh -N -L 0.0.0.0:{port}:localhost:{port} {user}@bastion",
            )
        )
        _fail_unit(host, self.app, rng.uniform(2, 30), self.app.bind_error.format(port=port))
        self.rogue = host.spawn(
            ppid=1,
            user=user,
            cpu=0.0,
            rss_kb=rng.randint(9_000, 40_000),
            vsz_kb=rng.randint(30_000, 300_000),
            stat="S",
            start=(host.now - timedelta(minutes=rng.randint(31, 200))).strftime("%H:%M"),
            cpu_time="0:01",
            command=command,
            ports=(port,),
        )
        self.task = (
            f"{self.unit} on this host went down after a deploy and will not come back. "
            "Find and fix the root cause."
        )
        self.root_cause = f"process {self.rogue.pid} ({command.split(' ')[0]}) held port {port}"
        self.clues = (
            f'users:(("{comm_of(self.rogue)}",pid={self.rogue.pid},',
            ps_aux_row(host, self.rogue),
        )
        self.diagnosis = (f"systemctl status {self.unit}", "ss -tlnp")

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        return (self.rogue.pid not in host.procs, self.app.state == "active")

    def fix_action(self, host: Host) -> str:
        if self.rogue.pid in host.procs:
            return f"kill {self.rogue.pid}"
        return self.restart_command()

    def candidates(self, host: Host) -> list[Candidate]:
        return [(f"kill {self.rogue.pid}", str(self.rogue.pid))]


class DnsMisconfig(Fault):
    """/etc/resolv.conf was overwritten with a decommissioned name server."""

    family = "dns_misconfig"
    REBOOT_CLEARS = False
    apps = staticmethod(lambda: (*python_apps(), *node_apps()))

    def inject(self, rng: random.Random, host: Host) -> None:
        good = host.files["/etc/resolv.conf"]
        host.files["/etc/resolv.conf.bak"] = File(
            good.size, good.mode, "root", "root", good.mtime, good.content
        )
        self.bad_ip = f"10.{rng.randint(41, 99)}.{rng.randint(0, 255)}.{rng.randint(2, 250)}"
        text = f"# generated by dhclient-script\nnameserver {self.bad_ip}\nsearch internal\n"
        host.files["/etc/resolv.conf"] = File(
            len(text),
            0o644,
            "root",
            "root",
            host.now - timedelta(minutes=rng.randint(20, 300)),
            text,
        )
        for minutes in (9, 5, 1):
            _journal(
                host,
                self.app,
                minutes,
                'could not translate host name "db.internal" to '
                "address: Temporary failure in name resolution",
            )
        self.task = (
            f"{self.unit} on this host cannot reach its database any more. "
            "Find and fix the root cause."
        )
        self.root_cause = f"/etc/resolv.conf pointed at a dead name server ({self.bad_ip})"
        self.clues = (f"nameserver {self.bad_ip}", f"{self.bad_ip}#53")
        self.diagnosis = (f"journalctl -u {self.unit}", "cat /etc/resolv.conf", "ls /etc")

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        return (nameserver_works(host),)

    def fix_action(self, host: Host) -> str:
        return "cp /etc/resolv.conf.bak /etc/resolv.conf"

    def candidates(self, host: Host) -> list[Candidate]:
        return [
            ("cp /etc/resolv.conf.bak /etc/resolv.conf", "resolv.conf.bak"),
            ("nslookup db.internal", None),
            ("resolvectl status", None),
        ]


def nameserver_works(host: Host) -> bool:
    """Resolution works when the first `nameserver` line names a live server."""
    resolv = host.files.get("/etc/resolv.conf")
    for line in ((resolv.content or "") if resolv else "").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            return fields[1] in host.working_nameservers
    return False


class ConfigPermissions(Fault):
    """The app's config file became unreadable by the app's user (chmod 600 root)."""

    family = "config_permissions"
    REBOOT_CLEARS = False
    apps = staticmethod(lambda: (redis_service, *python_apps(), *node_apps()))

    def inject(self, rng: random.Random, host: Host) -> None:
        self.config = self.app.config_path or ""
        file = host.files[self.config]
        file.mode, file.owner, file.group = 0o600, "root", "root"
        file.mtime = host.now - timedelta(minutes=rng.randint(10, 120))
        error = self.app.permission_error.format(path=self.config)
        _fail_unit(host, self.app, rng.uniform(1, 9), error)
        self.task = (
            f"{self.unit} on this host failed after a configuration change. "
            "Find and fix the root cause."
        )
        self.root_cause = f"{self.config} was not readable by the {self.app.user} user"
        name = self.config.rsplit("/", 1)[1]
        self.clues = (
            error,
            ls_row(name, file, host.now, False),
            ls_row(name, file, host.now, True),
        )
        self.diagnosis = (f"systemctl status {self.unit}", f"ls -l {self.config.rsplit('/', 1)[0]}")

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        readable = self.config in host.files and host.readable_by(self.config, self.app.user)
        return (readable, self.app.state == "active")

    def fix_action(self, host: Host) -> str:
        if not self.fix_goals(host)[0]:
            return f"chmod 644 {self.config}"
        return self.restart_command()

    def candidates(self, host: Host) -> list[Candidate]:
        return [
            (f"chmod 644 {self.config}", self.config),
            (f"chmod 600 {self.config}", self.config),
            (f"cat {self.config}", self.config),
        ]


class InodeExhaustion(Fault):
    """Millions of tiny files exhausted the inode table of /var; bytes are still free."""

    family = "inode_exhaustion"
    REBOOT_CLEARS = False
    apps = staticmethod(lambda: (*python_apps(), *node_apps()))

    def inject(self, rng: random.Random, host: Host) -> None:
        top = rng.choice(("cache", "spool", "lib"))
        kind = rng.choice(("sessions", "thumbs", "queue", "tmp"))
        self.directory = f"/var/{top}/{self.unit}-{kind}"
        host.add_dir(self.directory, self.app.user, self.app.user, 0o750)
        var = host.mount_of(self.directory)
        directory = host.dirs[self.directory]
        directory.bulk_files = var.inodes - host.usage(var).inodes_used
        directory.bulk_bytes = directory.bulk_files * rng.randint(90, 400)
        directory.bulk_prefix = {
            "sessions": "sess_",
            "thumbs": "thumb_",
            "queue": "msg_",
            "tmp": "tmp",
        }[kind]
        self.bulk_files = directory.bulk_files
        _journal(
            host,
            self.app,
            1,
            no_space_error(
                self.app, f"{self.directory}/{directory.bulk_prefix}{rng.getrandbits(40):010x}"
            ),
        )
        self.task = (
            f"{self.unit} on this host fails to write new files although the disk has "
            "plenty of free space. Find and fix the root cause."
        )
        self.root_cause = (
            f"{self.bulk_files} small files in {self.directory} exhausted the inodes of /var"
        )
        self.clues = (
            f"{self.bulk_files + 1}\t{self.directory}",
            f"{var.inodes:>9} {var.inodes:>9} {0:>9} 100% /var",
        )
        self.diagnosis = ("df -i", f"du --inodes -s /var/{top}/*")

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        var = host.mount_of(self.directory)
        return (host.usage(var).inodes_used < 0.9 * var.inodes,)

    def fix_action(self, host: Host) -> str:
        return f"find {self.directory} -type f -delete"

    def candidates(self, host: Host) -> list[Candidate]:
        return [
            (f"find {self.directory} -type f -delete", self.directory),
            (f"ls -l {self.directory}", self.directory),
        ]


class ExpiredTlsCert(Fault):
    """The site's certificate expired because auto-renewal had silently stopped."""

    family = "expired_tls_cert"
    REBOOT_CLEARS = False
    apps = staticmethod(lambda: (nginx_service,))

    def inject(self, rng: random.Random, host: Host) -> None:
        self.cert = self.app.cert_path or ""
        expired = host.now - timedelta(
            days=rng.randint(1, 20), hours=rng.randint(0, 23), minutes=rng.randint(0, 59)
        )
        host.certs[self.cert] = expired
        self.app.loaded_cert_expiry = expired
        _journal(
            host,
            self.app,
            2,
            "*1 SSL_do_handshake() failed (SSL: error:0A000416:SSL "
            "routines::sslv3 alert certificate unknown) while SSL handshaking",
        )
        self.task = (
            "Browsers show a security warning for the website served by this host. "
            "Find and fix the root cause."
        )
        self.root_cause = f"the certificate {self.cert} had expired on {expired:%b %d %Y}"
        self.clues = (
            f"notAfter={expired:%b %e %H:%M:%S %Y} GMT",
            "SSL certificate problem: certificate has expired",
            "(INVALID: EXPIRED)",
        )
        self.diagnosis = (
            "curl -I https://localhost",
            f"openssl x509 -enddate -noout -in {self.cert}",
        )

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        renewed = host.certs[self.cert] > host.now
        loaded = self.app.loaded_cert_expiry is not None and self.app.loaded_cert_expiry > host.now
        return (renewed, loaded)

    def fix_action(self, host: Host) -> str:
        if host.certs[self.cert] <= host.now:
            return "certbot renew"
        return f"systemctl reload {self.unit}"

    def candidates(self, host: Host) -> list[Candidate]:
        return [
            ("certbot renew", None),
            (f"openssl x509 -enddate -noout -in {self.cert}", self.cert),
            ("cat /etc/nginx/sites-enabled/default", None),
            (f"systemctl reload {self.unit}", None),
        ]


class ForkStorm(Fault):
    """A job dispatcher forks workers and never reaps them: zombies fill the pid table."""

    family = "fork_storm"
    REBOOT_CLEARS = True
    apps = staticmethod(lambda: (nginx_service, *python_apps(), *node_apps()))

    def inject(self, rng: random.Random, host: Host) -> None:
        job = rng.choice(("report-dispatcher", "etl-runner", "mailer", "thumbnailer", "sync-agent"))
        start = (host.now - timedelta(hours=rng.randint(1, 20))).strftime("%H:%M")
        self.parent = host.spawn(
            ppid=1,
            user="jobs",
            cpu=round(rng.uniform(5, 30), 1),
            rss_kb=rng.randint(30_000, 90_000),
            vsz_kb=rng.randint(200_000, 400_000),
            stat="S",
            start=start,
            cpu_time=f"{rng.randint(10, 90)}:{rng.randint(0, 59):02d}",
            command=f"/usr/bin/python3 /opt/jobs/{job}/{job.split('-')[0]}.py --daemon",
            respawns_children=True,
        )
        worker = f"/usr/bin/python3 /opt/jobs/{job}/worker.py --queue default"
        zombies = []
        for index in range(rng.randint(25, 45)):
            zombies.append(
                host.spawn(
                    ppid=self.parent.pid,
                    user="jobs",
                    cpu=0.0,
                    rss_kb=0,
                    vsz_kb=0,
                    stat="Z",
                    start=start,
                    cpu_time="0:00",
                    command=worker,
                )
            )
            if index % 9 == 0:
                host.spawn(
                    ppid=self.parent.pid,
                    user="jobs",
                    cpu=round(rng.uniform(1, 9), 1),
                    rss_kb=rng.randint(20_000, 50_000),
                    vsz_kb=200_000,
                    stat="R",
                    start=start,
                    cpu_time="0:02",
                    command=worker,
                )
        for minutes in (4, 2):
            _journal(host, self.app, minutes, "fork: retry: Resource temporarily unavailable")
        self.task = (
            f"{self.unit} on this host intermittently fails with 'Resource temporarily "
            "unavailable'. Find and fix the root cause."
        )
        self.root_cause = (
            f"process {self.parent.pid} ({job}) kept forking workers without reaping them "
            f"({len(zombies)} zombies)"
        )
        self.clues = (ps_ef_row(host, zombies[0]), f"({self.parent.pid})")
        self.diagnosis = ("top -bn1", "ps -ef")

    def fix_goals(self, host: Host) -> tuple[bool, ...]:
        zombies = any(p.stat.startswith("Z") for p in host.procs.values())
        return (self.parent.pid not in host.procs and not zombies,)

    def fix_action(self, host: Host) -> str:
        return (
            f"kill {self.parent.pid}" if self.parent.pid in host.procs else self.restart_command()
        )

    def candidates(self, host: Host) -> list[Candidate]:
        workers = [p.pid for p in host.procs.values() if p.ppid == self.parent.pid]
        return [
            (f"kill {self.parent.pid}", str(self.parent.pid)),
            *((f"kill {pid}", str(pid)) for pid in workers[:2]),
        ]


FAULT_FAMILIES: dict[str, type[Fault]] = {
    cls.family: cls
    for cls in (
        CpuHog,
        MemoryLeak,
        DiskFullLog,
        CrashedService,
        PortConflict,
        DnsMisconfig,
        ConfigPermissions,
        InodeExhaustion,
        ExpiredTlsCert,
        ForkStorm,
    )
}
