"""A healthy randomised host: system daemons, application services, files and noise.

`build_host(rng, app)` returns a working machine; a fault family then breaks one thing
in it. Everything a fault does not touch is noise the agent has to read past: other
services, kernel threads, unrelated log lines, ordinary files.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta

from creditgym.envs.sysdiag.host import GIB, KIB, File, Host, Mount, Proc, Service

HOSTNAMES = ("web", "app", "api", "edge", "prod-app", "svc", "node", "backend")
APP_NAMES = (
    "orders-api",
    "billing-svc",
    "inventory-api",
    "auth-gateway",
    "search-indexer",
    "payments-api",
    "catalog-svc",
    "notify-worker",
)
USERS = ("deploy", "alice", "bob", "ops", "jenkins", "dev")

# (unit, description, user, command): the daemons every Ubuntu server runs.
SYSTEM_UNITS = (
    ("systemd-journald", "Journal Service", "root", "/lib/systemd/systemd-journald"),
    ("systemd-udevd", "Rule-based Manager for Device Events", "root", "/lib/systemd/systemd-udevd"),
    (
        "systemd-resolved",
        "Network Name Resolution",
        "systemd-resolve",
        "/lib/systemd/systemd-resolved",
    ),
    (
        "systemd-timesyncd",
        "Network Time Synchronization",
        "systemd-timesync",
        "/lib/systemd/systemd-timesyncd",
    ),
    (
        "dbus",
        "D-Bus System Message Bus",
        "messagebus",
        "@dbus-daemon --system --address=systemd: --nofork --nopidfile --systemd-activation",
    ),
    ("cron", "Regular background program processing daemon", "root", "/usr/sbin/cron -f -P"),
    ("rsyslog", "System Logging Service", "syslog", "/usr/sbin/rsyslogd -n -iNONE"),
    ("systemd-logind", "User Login Management", "root", "/lib/systemd/systemd-logind"),
    (
        "ssh",
        "OpenBSD Secure Shell server",
        "root",
        "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups",
    ),
)
KERNEL_THREADS = (
    "[rcu_gp]",
    "[rcu_par_gp]",
    "[kworker/0:0H-events_highpri]",
    "[mm_percpu_wq]",
    "[ksoftirqd/0]",
    "[rcu_sched]",
    "[migration/0]",
    "[kworker/1:1-events]",
    "[kcompactd0]",
    "[khugepaged]",
    "[kswapd0]",
    "[jbd2/sda1-8]",
    "[ext4-rsv-conver]",
)
# Journal identifiers that differ from the unit name.
DAEMON_IDENTS = {"ssh": "sshd", "cron": "CRON", "rsyslog": "rsyslogd", "dbus": "dbus-daemon"}
# Routine journal lines per system daemon (by journal identifier).
NOISE_JOURNAL: dict[str, tuple[str, ...]] = {
    "sshd": (
        "pam_unix(sshd:session): session opened for user {user}(uid=1001) by (uid=0)",
        "Accepted publickey for {user} from 10.{a}.{b}.{c} port {port} ssh2: ED25519 SHA256:q8Zx",
        "Received disconnect from 10.{a}.{b}.{c} port {port}:11: disconnected by user",
    ),
    "CRON": ("(root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)",),
    "rsyslogd": ('[origin software="rsyslogd"] rsyslogd was HUPed',),
    "systemd-logind": ("New session {c} of user {user}.", "Session {c} logged out."),
    "systemd-timesyncd": (
        "Initial synchronization to time server 185.125.190.{c}:123 (ntp.ubuntu.com).",
    ),
    "systemd-resolved": (
        "Using degraded feature set UDP instead of UDP+EDNS0 for DNS server 10.0.0.{c}.",
    ),
    "systemd-journald": (
        "Data hash table of /var/log/journal/system.journal has a fill level at 75.0, "
        "suggesting rotation.",
    ),
    "dbus-daemon": ("[system] Successfully activated service 'org.freedesktop.hostname1'",),
    "systemd-udevd": ("Using default interface naming scheme 'v249'.",),
}
APP_JOURNAL = (
    '10.{a}.{b}.{c} - - "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.27"',
    '10.{a}.{b}.{c} - - "GET /api/v1/items?page={c} HTTP/1.1" 200 {port} "-" "python-requests"',
    '10.{a}.{b}.{c} - - "POST /api/v1/orders HTTP/1.1" 201 {b} "-" "okhttp/4.10.0"',
    "INFO worker {c} booted, handling requests",
    "INFO cache warmup finished in {c}ms",
    "WARNING slow query took {port}ms: SELECT * FROM items WHERE sku = $1",
)


def fill(template: str, rng: random.Random, user: str) -> str:
    return template.format(
        user=user,
        a=rng.randint(0, 40),
        b=rng.randint(0, 255),
        c=rng.randint(2, 254),
        port=rng.randint(1025, 65000),
    )


def nginx_service(rng: random.Random, host: Host) -> Service:
    cert = f"/etc/letsencrypt/live/{host.hostname}.example.com/fullchain.pem"
    site = (
        "server {\n    listen 80;\n    listen 443 ssl;\n"
        f"    server_name {host.hostname}.example.com;\n"
        f"    ssl_certificate {cert};\n"
        f"    ssl_certificate_key /etc/letsencrypt/live/{host.hostname}.example.com/privkey.pem;\n"
        "    location / { proxy_pass http://127.0.0.1:8000; }\n}\n"
    )
    pem = "-----BEGIN CERTIFICATE-----\nMIIFKzCCBBOgAwIBAgISA3xq...\n-----END CERTIFICATE-----\n"
    host.add_file(
        cert, File(len(pem) * 3, 0o644, "root", "root", host.now - timedelta(days=40), pem)
    )
    host.certs[cert] = host.now + timedelta(days=rng.randint(20, 80), hours=rng.randint(0, 23))
    host.add_file(
        "/etc/nginx/sites-enabled/default",
        File(len(site), 0o644, "root", "root", host.now - timedelta(days=90), site),
    )
    config = (
        "user www-data;\nworker_processes auto;\npid /run/nginx.pid;\n"
        "events { worker_connections 768; }\nhttp {\n    sendfile on;\n"
        "    access_log /var/log/nginx/access.log;\n    error_log /var/log/nginx/error.log;\n"
        "    include /etc/nginx/sites-enabled/*;\n}\n"
    )
    host.add_file(
        "/etc/nginx/nginx.conf",
        File(len(config), 0o644, "root", "root", host.now - timedelta(days=200), config),
    )
    return Service(
        unit="nginx.service",
        description="A high performance web server and a reverse proxy server",
        user="www-data",
        command="nginx: master process /usr/sbin/nginx -g daemon on; master_process on;",
        worker_command="nginx: worker process",
        workers=rng.randint(2, 4),
        ports=(80, 443),
        config_path="/etc/nginx/nginx.conf",
        rss_kb=rng.randint(5_000, 12_000),
        ident="nginx",
        permission_error='[emerg] open() "{path}" failed (13: Permission denied)',
        bind_error="[emerg] bind() to 0.0.0.0:{port} failed (98: Address already in use)",
        pid_file="/run/nginx.pid",
        log_path="/var/log/nginx/access.log",
        cert_path=cert,
    )


def _python_app(rng: random.Random, host: Host, name: str) -> Service:
    port = rng.choice((8000, 8080, 5000, 8081, 9000))
    config = (
        f"service: {name}\nlisten: 0.0.0.0:{port}\nworkers: 4\n"
        f"log_file: /var/log/{name}/{name}.log\n"
        f"database_url: postgresql://{name.replace('-', '_')}@db.internal:5432/"
        f"{name.split('-')[0]}\n"
        "log_level: info\n"
    )
    host.add_file(
        f"/etc/{name}/config.yaml",
        File(len(config), 0o640, "root", "app", host.now - timedelta(days=60), config),
    )
    return Service(
        unit=f"{name}.service",
        description=f"{name} (gunicorn)",
        user="app",
        command=f"/opt/{name}/venv/bin/python3 /opt/{name}/venv/bin/gunicorn -c "
        f"/etc/{name}/gunicorn.conf.py {name.replace('-', '_')}.wsgi:app",
        worker_command=f"/opt/{name}/venv/bin/python3 /opt/{name}/venv/bin/gunicorn -c "
        f"/etc/{name}/gunicorn.conf.py {name.replace('-', '_')}.wsgi:app",
        workers=rng.randint(2, 4),
        ports=(port,),
        config_path=f"/etc/{name}/config.yaml",
        rss_kb=rng.randint(60_000, 140_000),
        ident="gunicorn",
        permission_error="PermissionError: [Errno 13] Permission denied: '{path}'",
        bind_error="[ERROR] Connection in use: ('0.0.0.0', {port})",
        restart_policy="always",
        pid_file=f"/run/{name}/{name}.pid",
        log_path=f"/var/log/{name}/{name}.log",
    )


def _node_app(rng: random.Random, host: Host, name: str) -> Service:
    port = rng.choice((3000, 3001, 4000, 8088))
    config = (
        f'{{\n  "name": "{name}",\n  "port": {port},\n  "logFile": "/var/log/{name}/{name}.log",\n'
        f'  "redis": "redis://127.0.0.1:6379/0",\n  "upstream": "https://partner.example.net"\n}}\n'
    )
    host.add_file(
        f"/etc/{name}/config.json",
        File(len(config), 0o640, "root", "node", host.now - timedelta(days=45), config),
    )
    return Service(
        unit=f"{name}.service",
        description=f"{name} Node.js service",
        user="node",
        command=f"/usr/bin/node /srv/{name}/dist/server.js",
        worker_command=None,
        workers=0,
        ports=(port,),
        config_path=f"/etc/{name}/config.json",
        rss_kb=rng.randint(90_000, 220_000),
        ident="node",
        permission_error="Error: EACCES: permission denied, open '{path}'",
        bind_error="Error: listen EADDRINUSE: address already in use :::{port}",
        restart_policy="always",
        pid_file=f"/run/{name}.pid",
        log_path=f"/var/log/{name}/{name}.log",
    )


def redis_service(rng: random.Random, host: Host) -> Service:
    config = "bind 127.0.0.1 ::1\nport 6379\ndaemonize no\nsupervised systemd\n"
    config += "logfile /var/log/redis/redis-server.log\ndir /var/lib/redis\nmaxmemory 512mb\n"
    host.add_file(
        "/etc/redis/redis.conf",
        File(len(config), 0o640, "redis", "redis", host.now - timedelta(days=300), config),
    )
    return Service(
        unit="redis-server.service",
        description="Advanced key-value store",
        user="redis",
        command="/usr/bin/redis-server 127.0.0.1:6379",
        worker_command=None,
        workers=0,
        ports=(6379,),
        config_path="/etc/redis/redis.conf",
        rss_kb=rng.randint(8_000, 40_000),
        ident="redis-server",
        permission_error="Fatal error, can't open config file '{path}': Permission denied",
        bind_error="Warning: Could not create server TCP listening socket 127.0.0.1:{port}: "
        "bind: Address already in use",
        restart_policy="always",
        pid_file="/run/redis/redis-server.pid",
        log_path="/var/log/redis/redis-server.log",
    )


def python_app(name: str) -> Callable[[random.Random, Host], Service]:
    return lambda rng, host: _python_app(rng, host, name)


def node_app(name: str) -> Callable[[random.Random, Host], Service]:
    return lambda rng, host: _node_app(rng, host, name)


def build_host(
    rng: random.Random, app_builder: Callable[[random.Random, Host], Service]
) -> tuple[Host, Service]:
    """A healthy host running `app_builder`'s service plus system daemons and noise.

    Returns the host and the application service (the one the task is about).
    """
    now = datetime(
        2025,
        rng.randint(1, 12),
        rng.randint(1, 28),
        rng.randint(0, 23),
        rng.randint(0, 59),
        rng.randint(0, 59),
    )
    boot = now - timedelta(days=rng.randint(2, 140), minutes=rng.randint(0, 1439))
    host = Host(
        hostname=f"{rng.choice(HOSTNAMES)}-{rng.randint(1, 24):02d}",
        now=now,
        boot=boot,
        mem_total_kb=rng.choice((4, 8, 16, 32)) * 1024 * 1024 - rng.randint(100_000, 300_000),
    )
    host.rng = random.Random(rng.getrandbits(64))
    host.cores = rng.choice((2, 4, 8))
    host.kernel = rng.choice(
        ("5.15.0-91-generic", "5.15.0-105-generic", "6.5.0-35-generic", "6.8.0-45-generic")
    )
    host.next_pid = rng.randint(380, 900)
    root_size = rng.choice((40, 50, 80, 100)) * GIB
    var_size = rng.choice((20, 30, 50)) * GIB
    host.mounts = [
        Mount(
            "/dev/sda1",
            "ext4",
            "/",
            root_size,
            int(root_size * rng.uniform(0.2, 0.5)),
            root_size // (16 * KIB),
            rng.randint(150_000, 400_000),
        ),
        Mount(
            "/dev/sdb1",
            "ext4",
            "/var",
            var_size,
            int(var_size * rng.uniform(0.1, 0.4)),
            var_size // (16 * KIB),
            rng.randint(20_000, 90_000),
        ),
        Mount(
            "tmpfs",
            "tmpfs",
            "/run",
            800 * 1024 * KIB,
            rng.randint(1, 4) * 1024 * KIB,
            200_000,
            rng.randint(700, 1200),
        ),
        Mount("/dev/sda15", "vfat", "/boot/efi", 105 * 1024 * KIB, 6 * 1024 * KIB, 0, 0),
    ]
    boot_clock = boot.strftime("%b%d")
    host.procs[1] = Proc(1, 0, "root", 0.0, 11_000, 167_000, "Ss", boot_clock, "0:42", "/sbin/init")
    host.procs[2] = Proc(2, 0, "root", 0.0, 0, 0, "S", boot_clock, "0:00", "[kthreadd]")
    pid = 3
    for name in rng.sample(KERNEL_THREADS, rng.randint(6, 10)):
        pid += rng.randint(1, 9)
        host.procs[pid] = Proc(
            pid, 2, "root", 0.0, 0, 0, rng.choice(("I<", "S", "I")), boot_clock, "0:00", name
        )
    host.next_pid = max(host.next_pid, pid + 50)
    user = rng.choice(USERS)
    services = [
        Service(
            unit=f"{unit}.service",
            description=description,
            user=svc_user,
            command=command,
            worker_command=None,
            workers=0,
            ports=(22,) if unit == "ssh" else (),
            config_path=None,
            rss_kb=rng.randint(3_000, 30_000),
            ident=DAEMON_IDENTS.get(unit, unit),
            permission_error="{path}: Permission denied",
            bind_error="bind {port}: in use",
            restart_policy="on-failure",
        )
        for unit, description, svc_user, command in SYSTEM_UNITS
    ]
    app = app_builder(rng, host)
    extra_builders = [redis_service] if "redis" not in app.unit else []
    if app.unit != "nginx.service" and rng.random() < 0.6:
        extra_builders.append(nginx_service)
    services += [builder(rng, host) for builder in extra_builders]
    services.append(app)
    for service in services:
        service.since = boot + timedelta(seconds=rng.randint(3, 40))
        host.services[service.unit] = service
        host.start(service)
        service.journal.clear()  # boot-time start messages are older than the journal window
        service.since = boot + timedelta(seconds=rng.randint(3, 40))
        for proc in host.procs.values():
            if proc.unit == service.unit:
                proc.start = boot_clock
                proc.cpu_time = f"{rng.randint(0, 90)}:{rng.randint(0, 59):02d}"
                proc.cpu = round(rng.uniform(0.0, 2.5), 1)
    # A logged-in admin and a few periodic jobs: ordinary non-unit processes.
    sshd = host.spawn(
        ppid=host.services["ssh.service"].main_pid,
        user="root",
        cpu=0.0,
        rss_kb=9_000,
        vsz_kb=17_000,
        stat="Ss",
        start=now.strftime("%H:%M"),
        cpu_time="0:00",
        command=f"sshd: {user} [priv]",
    )
    shell = host.spawn(
        ppid=sshd.pid,
        user=user,
        cpu=0.0,
        rss_kb=5_200,
        vsz_kb=8_900,
        stat="Ss",
        start=now.strftime("%H:%M"),
        cpu_time="0:00",
        command="-bash",
        tty="pts/0",
    )
    host.spawn(
        ppid=shell.pid,
        user="root",
        cpu=0.0,
        rss_kb=4_100,
        vsz_kb=11_000,
        stat="S+",
        start=now.strftime("%H:%M"),
        cpu_time="0:00",
        command="sudo -i",
        tty="pts/0",
    )
    if rng.random() < 0.5:
        host.spawn(
            ppid=1,
            user="root",
            cpu=round(rng.uniform(0.1, 3.0), 1),
            rss_kb=28_000,
            vsz_kb=110_000,
            stat="Ssl",
            start=boot_clock,
            cpu_time="3:12",
            command="/usr/bin/python3 /usr/share/unattended-upgrades/"
            "unattended-upgrade-shutdown --wait-for-signal",
        )
    if rng.random() < 0.5:
        host.spawn(
            ppid=1,
            user="root",
            cpu=round(rng.uniform(0.5, 6.0), 1),
            rss_kb=210_000,
            vsz_kb=1_900_000,
            stat="Ssl",
            start=boot_clock,
            cpu_time="58:10",
            command="/usr/bin/containerd",
        )
    _add_files(rng, host, services, user)
    _add_noise_journal(rng, host, services, user)
    host.dmesg = [
        (0.0, f"Linux version {host.kernel} (buildd@lcy02-amd64-031) (gcc 11.4.0) #101-Ubuntu SMP"),
        (0.0, "Command line: BOOT_IMAGE=/boot/vmlinuz root=UUID=7c1e-91aa ro console=ttyS0"),
        (0.41, "ACPI: PM-Timer IO Port: 0x608"),
        (1.93, "EXT4-fs (sda1): mounted filesystem with ordered data mode. Quota mode: none."),
        (2.07, "EXT4-fs (sdb1): mounted filesystem with ordered data mode. Quota mode: none."),
        (3.55, "systemd[1]: Detected virtualization kvm."),
        (5.12, "virtio_net virtio1 ens3: renamed from eth0"),
        (rng.uniform(3000, 90000), 'audit: type=1400 apparmor="STATUS" operation="profile_load"'),
    ]
    resolver_ip = f"10.{rng.randint(0, 40)}.0.{rng.randint(2, 20)}"
    host.working_nameservers = frozenset({"127.0.0.53", resolver_ip})
    resolv = (
        "# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).\n"
        "# Do not edit.\n#\n"
        '# Run "resolvectl status" to see details about the actual nameservers.\n\n'
        "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch internal\n"
    )
    host.add_file("/etc/resolv.conf", File(len(resolv), 0o644, "root", "root", boot, resolv))
    host.resolver_ip = resolver_ip
    return host, app


def _add_files(rng: random.Random, host: Host, services: list[Service], user: str) -> None:
    old = host.now - timedelta(days=rng.randint(20, 400))
    hostname_text = host.hostname + "\n"
    hosts_text = f"127.0.0.1 localhost\n127.0.1.1 {host.hostname}\n::1 ip6-localhost ip6-loopback\n"
    os_release = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n'
    fstab = "UUID=7c1e-91aa / ext4 defaults 0 1\nUUID=2b9f-03cd /var ext4 defaults 0 2\n"
    for path, text in (
        ("/etc/hostname", hostname_text),
        ("/etc/hosts", hosts_text),
        ("/etc/os-release", os_release),
        ("/etc/fstab", fstab),
    ):
        host.add_file(path, File(len(text), 0o644, "root", "root", old, text))
    syslog_lines = (
        "\n".join(
            f"{(host.now - timedelta(minutes=m)).strftime('%b %d %H:%M:%S')} {host.hostname} "
            f"CRON[{rng.randint(1000, 60000)}]: (root) CMD (command -v debian-sa1 > /dev/null)"
            for m in range(30, 0, -10)
        )
        + "\n"
    )
    for path, owner, group, size in (
        ("/var/log/syslog", "syslog", "adm", rng.randint(200_000, 9_000_000)),
        ("/var/log/auth.log", "syslog", "adm", rng.randint(20_000, 900_000)),
        ("/var/log/kern.log", "syslog", "adm", rng.randint(10_000, 300_000)),
        ("/var/log/syslog.1", "syslog", "adm", rng.randint(2_000_000, 40_000_000)),
        ("/var/log/dpkg.log", "root", "root", rng.randint(10_000, 400_000)),
        (f"/home/{user}/.bash_history", user, user, rng.randint(500, 20_000)),
        (f"/home/{user}/notes.txt", user, user, rng.randint(100, 4_000)),
        ("/tmp/systemd-private-3f1c/tmp/.keep", "root", "root", 0),
        ("/root/.bashrc", "root", "root", 3_106),
    ):
        host.add_file(
            path,
            File(
                size,
                0o640 if "/var/log" in path else 0o600,
                owner,
                group,
                host.now - timedelta(minutes=rng.randint(1, 600)),
                syslog_lines if path == "/var/log/syslog" else None,
            ),
        )
    for service in services:
        if service.log_path is None:
            continue
        lines = "\n".join(fill(rng.choice(APP_JOURNAL), rng, user) for _ in range(4)) + "\n"
        log_dir = service.log_path.rsplit("/", 1)[0]
        host.add_dir(log_dir, service.user, "adm")
        host.add_file(
            service.log_path,
            File(
                rng.randint(50_000, 80_000_000),
                0o640,
                service.user,
                "adm",
                host.now - timedelta(seconds=rng.randint(1, 90)),
                lines,
                holder_unit=service.unit,
            ),
        )
        host.add_file(
            service.log_path + ".1",
            File(
                rng.randint(1_000_000, 90_000_000),
                0o640,
                service.user,
                "adm",
                host.now - timedelta(days=1),
                None,
            ),
        )


def _add_noise_journal(rng: random.Random, host: Host, services: list[Service], user: str) -> None:
    for service in services:
        count = rng.randint(2, 5)
        for index in range(count):
            when = host.now - timedelta(minutes=(count - index) * rng.randint(3, 40))
            if service.log_path is not None:
                message = fill(rng.choice(APP_JOURNAL), rng, user)
            else:
                message = fill(rng.choice(NOISE_JOURNAL[service.ident]), rng, user)
            service.journal.append((when, service.ident, service.main_pid or 1, message))
        service.journal.sort(key=lambda record: record[0])
