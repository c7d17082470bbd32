"""A bash-like shell over the simulated host: parsing, pipes, redirection, ~50 commands.

Nothing is executed on the real machine: every command is a Python function over
`Host`. Any input string yields text (an error message shaped like bash's or the
tool's), never an exception: that is the contract `SysDiagEnv.step` relies on.

Commands live in the `COMMANDS` registry (name -> handler). A handler gets the shell,
its argument list and the piped-in text (None when not in a pipe) and returns
(output, exit status).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable
from datetime import timedelta

from creditgym.envs.sysdiag.catalog import USERS
from creditgym.envs.sysdiag.faults import nameserver_works
from creditgym.envs.sysdiag.host import Directory, File, Host, Proc
from creditgym.envs.sysdiag.render import (
    comm_of,
    df_row,
    du_row,
    human,
    journal_row,
    ls_row,
    ps_aux_row,
    ps_ef_row,
    top_row,
)

Result = tuple[str, int]
Handler = Callable[["Shell", list[str], str | None], Result]

MAX_COMMAND_CHARS = 4096
MAX_LISTED = 40  # entries printed for huge directories before eliding the rest
OPERATORS = ("&&", "||", ";", "|", ">>", ">", "&", "\n")
# Characters the observation space accepts (see envs.spaces.WIDE_CHARSET); anything
# else typed by the agent is echoed back as "?".
OUTSIDE_CHARSET = re.compile("[^\t\n\x20-\x7e\xa0-\ud7ff\ue000-\ufffd]")
SPECIAL = re.compile(r"[\"'\\;&|<>\n]")
INTERACTIVE = ("vi", "vim", "nano", "emacs", "htop", "watch", "less", "more", "man", "ssh")


def sanitize(text: str) -> str:
    """Replace characters an observation cannot carry (controls, lone surrogates)."""
    return OUTSIDE_CHARSET.sub("?", text)


def tokenize(line: str) -> list[str] | str:
    """Split a command line into words and operator tokens; a str return is a syntax error.

    Quotes and backslashes follow POSIX rules (via shlex); operators are recognised
    outside quotes. `$(...)`, backticks and variables are kept literally: this shell has
    no expansion besides `*` globs in paths.
    """
    if not SPECIAL.search(line):
        return line.split()
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace = " \t\r"
    lexer.wordchars += "~-./*?[]{}:=,+%@^!#$()`"
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        return "bash: unexpected EOF while looking for matching quote"
    return ["\n" if token == "\n" else token for token in tokens]


class Shell:
    """Executes command lines against one `Host`; `rebooted` is set by `reboot`."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.cwd = "/root"
        self.rebooted = False

    # ------------------------------------------------------------------ top level
    def run(self, line: str) -> Result:
        """Run one command line: `a | b > f && c; d` with bash's short-circuit rules."""
        if len(line) > MAX_COMMAND_CHARS:
            return (
                f"bash: command line too long ({len(line)} characters; limit {MAX_COMMAND_CHARS})",
                2,
            )
        tokens = tokenize(sanitize(line))
        if isinstance(tokens, str):
            return tokens, 2
        outputs: list[str] = []
        status = 0
        pipeline: list[str] = []
        skip = False
        for token in [*tokens, ";"]:
            if token not in ("&&", "||", ";", "&", "\n"):
                pipeline.append(token)
                continue
            if pipeline and not skip:
                text, status = self.run_pipeline(pipeline)
                if text:
                    outputs.append(text)
                if self.rebooted:
                    break
            elif not pipeline and token in ("&&", "||") and not skip:
                return f"bash: syntax error near unexpected token `{token}'", 2
            pipeline = []
            skip = (token == "&&" and status != 0) or (token == "||" and status == 0)
        return "\n".join(outputs), status

    def run_pipeline(self, words: list[str]) -> Result:
        stages: list[list[str]] = [[]]
        for word in words:
            if word == "|":
                stages.append([])
            else:
                stages[-1].append(word)
        if any(not stage for stage in stages):
            return "bash: syntax error near unexpected token `|'", 2
        text: str | None = None
        status = 0
        for stage in stages:
            argv, target, append = self.split_redirect(stage)
            if isinstance(argv, str):
                return argv, 2
            text, status = self.run_argv(argv, text) if argv else ("", 0)
            if target is not None:
                text, status = self.write_redirect(target, text, append)
        return text or "", status

    @staticmethod
    def split_redirect(stage: list[str]) -> tuple[list[str] | str, str | None, bool]:
        argv: list[str] = []
        target, append = None, False
        words = iter(stage)
        for word in words:
            if word in (">", ">>"):
                target = next(words, None)
                if target is None or target in OPERATORS:
                    return "bash: syntax error near unexpected token `newline'", None, False
                append = word == ">>"
            elif word == "<":
                next(words, None)  # input redirection: no command here reads stdin files
            else:
                argv.append(word)
        return argv, target, append

    def write_redirect(self, target: str, text: str, append: bool) -> Result:
        path = self.resolve(target)
        if path in self.host.dirs:
            return f"bash: {target}: Is a directory", 1
        if not path.startswith("/") or self.parent_missing(path):
            return f"bash: {target}: No such file or directory", 1
        data = text + "\n" if text else ""
        existing = self.host.files.get(path)
        if existing is not None:
            existing.content = (existing.content or "") + data if append else data
            existing.size = len(existing.content)
            existing.mtime = self.host.now
        else:
            self.host.add_file(path, File(len(data), 0o644, "root", "root", self.host.now, data))
        self.host.touch()
        return "", 0

    def run_argv(self, argv: list[str], stdin: str | None) -> Result:
        while argv and argv[0] == "sudo":
            argv = argv[1:]
        if not argv:
            return "", 0
        name = argv[0]
        handler = COMMANDS.get(name)
        if handler is None:
            if name in INTERACTIVE:
                return (
                    f"{name}: interactive programs need a terminal, which this session does not "
                    "have; use cat, grep, sed -i, echo ... > FILE instead",
                    1,
                )
            return f"bash: {name[:200]}: command not found", 127
        return handler(self, argv[1:], stdin)

    # -------------------------------------------------------------------- helpers
    def resolve(self, path: str) -> str:
        """Absolute, normalised path (`~` is /root)."""
        if path.startswith("~"):
            path = "/root" + path[1:]
        if not path.startswith("/"):
            path = self.cwd.rstrip("/") + "/" + path
        parts: list[str] = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def parent_missing(self, path: str) -> bool:
        return path.rsplit("/", 1)[0] not in self.host.dirs and path.count("/") > 1

    def exists(self, path: str) -> bool:
        return path in self.host.files or path in self.host.dirs

    def expand(self, pattern: str) -> list[str]:
        """Glob `*`/`?` against the simulated tree; no match leaves the word as typed."""
        if "*" not in pattern and "?" not in pattern:
            return [self.resolve(pattern)]
        absolute = self.resolve(pattern)
        directory, _, leaf = absolute.rpartition("/")
        directory = directory or "/"
        if any(c in directory for c in "*?"):
            return [absolute]
        matches = [
            (directory.rstrip("/") + "/" + name)
            for name in self.host.children(directory)
            if fnmatch.fnmatchcase(name, leaf)
        ]
        return matches or [absolute]

    def bulk_match(self, pattern: str) -> Directory | None:
        """The huge directory a `DIR/*`-style glob would expand over, if any."""
        absolute = self.resolve(pattern)
        directory, _, leaf = absolute.rpartition("/")
        bulk = self.host.dirs.get(directory)
        if bulk is not None and bulk.bulk_files and ("*" in leaf or "?" in leaf):
            return bulk if fnmatch.fnmatchcase(bulk.bulk_prefix + "0a1b", leaf) else None
        return None

    def proc(self, pid_text: str) -> Proc | None:
        return self.host.procs.get(int(pid_text)) if pid_text.isdigit() else None


def split_flags(args: list[str]) -> tuple[set[str], list[str]]:
    """Short flags (`-lah` -> l, a, h) and long flags (`--inodes`) apart from operands."""
    flags: set[str] = set()
    operands: list[str] = []
    for arg in args:
        if arg.startswith("--"):
            flags.add(arg)
        elif arg.startswith("-") and len(arg) > 1:
            flags.update(arg[1:])
        else:
            operands.append(arg)
    return flags, operands


def uptime_text(host: Host) -> str:
    up = host.now - host.boot
    days, hours, minutes = up.days, up.seconds // 3600, up.seconds % 3600 // 60
    span = (
        f"{days} day{'s' if days != 1 else ''}, {hours:2d}:{minutes:02d}"
        if days
        else (f"{hours:2d}:{minutes:02d}")
    )
    load = load_average(host)
    return (
        f" {host.now:%H:%M:%S} up {span},  1 user,  load average: "
        f"{load:.2f}, {load * 0.93:.2f}, {load * 0.81:.2f}"
    )


def load_average(host: Host) -> float:
    running = sum(p.cpu for p in host.procs.values() if not p.stat.startswith("Z")) / 100
    return round(running + 0.08, 2)


def memory(host: Host) -> tuple[int, int, int, int, int]:
    """(total, used, free, buff/cache, available) in KiB."""
    total = host.mem_total_kb
    used = min(total - 60_000, 290_000 + sum(p.rss_kb for p in host.procs.values()))
    cache = max(40_000, min((total - used) // 2, 1_400_000))
    free = max(0, total - used - cache)
    return total, used, free, cache, free + cache * 2 // 3


# ----------------------------------------------------------------------------- ps/top
def cmd_ps(sh: Shell, args: list[str], stdin: str | None) -> Result:
    host = sh.host
    sort_key = next((a.split("=", 1)[1] for a in args if a.startswith("--sort=")), None)
    plain = [a for a in args if not a.startswith("--sort=")]
    procs = sorted(host.procs.values(), key=lambda p: p.pid)
    if sort_key is not None:
        field = sort_key.lstrip("-+")
        keys = {
            "%cpu": lambda p: p.cpu,
            "pcpu": lambda p: p.cpu,
            "%mem": lambda p: p.rss_kb,
            "pmem": lambda p: p.rss_kb,
            "rss": lambda p: p.rss_kb,
            "pid": lambda p: p.pid,
        }
        if field not in keys:
            return "error: unknown sort specifier\n\nUsage:\n ps [options]", 1
        procs.sort(key=keys[field], reverse=sort_key.startswith("-"))
    if plain in (["aux"], ["-aux"], ["auxf"], ["axu"], ["-eo", "pid,ppid,cmd"]) or plain == [
        "-e",
        "u",
    ]:
        header = "USER           PID %CPU %MEM      VSZ     RSS TTY      STAT START    TIME COMMAND"
        return "\n".join([header, *(ps_aux_row(host, p) for p in procs)]), 0
    if plain in (["-ef"], ["-e", "-f"], ["-fe"], ["-eF"], ["axjf"]):
        header = "UID          PID    PPID  C STIME TTY          TIME CMD"
        return "\n".join([header, *(ps_ef_row(host, p) for p in procs)]), 0
    if len(plain) == 2 and plain[0] == "-p":
        proc = sh.proc(plain[1])
        rows = ["    PID TTY          TIME CMD"]
        if proc is not None:
            rows.append(f"{proc.pid:>7} {proc.tty:<8} 00:{proc.cpu_time:>5} {comm_of(proc)}")
        return "\n".join(rows), 0 if proc is not None else 1
    if not plain:
        shells = [p for p in procs if p.tty != "?"]
        return "\n".join(
            [
                "    PID TTY          TIME CMD",
                *(f"{p.pid:>7} {p.tty:<8} 00:00:00 {comm_of(p)}" for p in shells),
            ]
        ), 0
    return (
        "error: unsupported option (BSD syntax)\n\nUsage:\n ps [options]\n\n Try 'ps aux', "
        "'ps -ef', 'ps -p PID' or 'ps aux --sort=-%cpu'.",
        1,
    )


def cmd_top(sh: Shell, args: list[str], stdin: str | None) -> Result:
    joined = "".join(args).replace(" ", "")
    if "b" not in joined:
        return "top: failed tty get", 1
    host = sh.host
    procs = list(host.procs.values())
    sort_mem = "%MEM" in args
    procs.sort(key=lambda p: (p.rss_kb if sort_mem else p.cpu, -p.pid), reverse=True)
    zombies = sum(p.stat.startswith("Z") for p in procs)
    running = sum(p.stat.startswith("R") for p in procs)
    busy = min(99.9, sum(p.cpu for p in procs) / max(1, host.cores))
    total, used, free, cache, available = memory(host)
    swap_used = max(0, used - total * 3 // 4) // 2
    head = [
        f"top - {uptime_text(host).strip()}",
        f"Tasks: {len(procs):>3} total, {running:>3} running, {len(procs) - running - zombies:>3} "
        f"sleeping,   0 stopped, {zombies:>3} zombie",
        f"%Cpu(s): {busy * 0.9:4.1f} us, {busy * 0.1:4.1f} sy,  0.0 ni, {100 - busy:4.1f} id,  "
        "0.1 wa,  0.0 hi,  0.1 si,  0.0 st",
        f"MiB Mem : {total / 1024:8.1f} total, {free / 1024:8.1f} free, {used / 1024:8.1f} used, "
        f"{cache / 1024:8.1f} buff/cache",
        f"MiB Swap: {2048.0:8.1f} total, {2048 - swap_used / 1024:8.1f} free, "
        f"{swap_used / 1024:8.1f} used. {available / 1024:8.1f} avail Mem",
        "",
        "    PID USER      PR  NI     VIRT     RES    SHR S  %CPU  %MEM     TIME+ COMMAND",
    ]
    return "\n".join([*head, *(top_row(host, p) for p in procs[:18])]), 0


def cmd_free(sh: Shell, args: list[str], stdin: str | None) -> Result:
    total, used, free, cache, available = memory(sh.host)
    swap_used = max(0, used - total * 3 // 4) // 2
    swap_total = 2 * 1024 * 1024

    def fmt(kib: int) -> str:
        if "-h" in args:
            text = human(kib * 1024)
            return text + "i" if text[-1].isalpha() else text + "B"
        return str(kib // 1024) if "-m" in args else str(kib)

    return (
        "               total        used        free      shared  buff/cache   available\n"
        f"Mem:    {fmt(total):>12}{fmt(used):>12}{fmt(free):>12}{fmt(1_800):>12}"
        f"{fmt(cache):>12}{fmt(available):>12}\n"
        f"Swap:   {fmt(swap_total):>12}{fmt(swap_used):>12}{fmt(swap_total - swap_used):>12}",
        0,
    )


def cmd_uptime(sh: Shell, args: list[str], stdin: str | None) -> Result:
    return uptime_text(sh.host), 0


# ------------------------------------------------------------------------ disks
def cmd_df(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, operands = split_flags(args)
    inodes = "i" in flags
    mounts = sh.host.mounts
    if operands:
        paths = [sh.resolve(o) for o in operands]
        missing = [o for o, p in zip(operands, paths, strict=True) if not sh.exists(p)]
        if missing:
            return f"df: {missing[0]}: No such file or directory", 1
        mounts = [m for m in mounts if any(sh.host.mount_of(p) is m for p in paths)]
    if inodes:
        header = "Filesystem         Inodes     IUsed     IFree IUse% Mounted on"
    else:
        header = "Filesystem       Size  Used Avail Use% Mounted on"
    return "\n".join([header, *(df_row(sh.host, m, inodes) for m in mounts)]), 0


def cmd_du(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, operands = split_flags(args)
    inodes = "--inodes" in flags
    human_sizes = "h" in flags and not inodes
    rows, errors = [], []
    for operand in operands or ["."]:
        for path in sh.expand(operand):
            if not sh.exists(path):
                errors.append(f"du: cannot access '{operand}': No such file or directory")
                continue
            targets = [path]
            if "s" not in flags and path in sh.host.dirs:
                targets = [
                    path.rstrip("/") + "/" + c
                    for c in sh.host.children(path)
                    if path.rstrip("/") + "/" + c in sh.host.dirs
                ] + [path]
            for target in targets:
                size, count = sh.host.subtree_size(target)
                rows.append(f"{count}\t{target}" if inodes else du_row(size, target, human_sizes))
    return "\n".join(errors + rows), 1 if errors else 0


# ------------------------------------------------------------------- services
def cmd_systemctl(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, operands = split_flags([a for a in args if a not in ("--no-pager", "-l", "--full")])
    if "--failed" in flags or (operands[:1] == ["list-units"] and "--failed" in flags):
        return list_units(sh, failed_only=True), 0
    if not operands or operands[0] in ("list-units", "list-unit-files"):
        return list_units(sh, failed_only=False), 0
    verb, names = operands[0], operands[1:]
    if verb == "reboot":
        return cmd_reboot(sh, [], stdin)
    if verb == "daemon-reload":
        return "", 0
    handler = SYSTEMCTL_VERBS.get(verb)
    if handler is None:
        return f'Unknown command verb "{verb}".', 1
    if not names:
        return "Too few arguments.", 1
    outputs, status = [], 0
    for name in names:
        service = sh.host.unit_of(name)
        if service is None:
            unit = name if name.endswith(".service") else name + ".service"
            message = (
                f"Unit {unit} could not be found."
                if verb == "status"
                else f"Failed to {verb} {unit}: Unit {unit} not found."
            )
            outputs.append(message)
            status = 4 if verb == "status" else 5
            continue
        text, code = handler(sh, service)
        if text:
            outputs.append(text)
        status = status or code
    return "\n".join(outputs), status


def list_units(sh: Shell, failed_only: bool) -> str:
    rows = ["  UNIT                        LOAD   ACTIVE SUB     DESCRIPTION"]
    shown = 0
    for service in sorted(sh.host.services.values(), key=lambda s: s.unit):
        if failed_only and service.state != "failed":
            continue
        sub = {"active": "running", "failed": "failed", "inactive": "dead"}[service.state]
        mark = "●" if service.state == "failed" else " "
        rows.append(
            f"{mark} {service.unit:<27} loaded {service.state:<6} {sub:<7} {service.description}"
        )
        shown += 1
    rows += ["", f"{shown} loaded units listed."]
    return "\n".join(rows)


def status_text(sh: Shell, service) -> Result:
    host = sh.host
    ago = host.now - service.since
    ago_text = (
        f"{ago.days} days ago"
        if ago.days
        else f"{ago.seconds // 3600}h {ago.seconds % 3600 // 60}min ago"
        if ago.seconds >= 3600
        else f"{ago.seconds // 60}min {ago.seconds % 60}s ago"
    )
    since = f"since {service.since:%a %Y-%m-%d %H:%M:%S} UTC; {ago_text}"
    dot = {"active": "●", "failed": "×", "inactive": "○"}[service.state]
    lines = [
        f"{dot} {service.unit} - {service.description}",
        f"     Loaded: loaded (/lib/systemd/system/{service.unit}; enabled; "
        "vendor preset: enabled)",
    ]
    if service.state == "active":
        procs = sorted(
            (p for p in host.procs.values() if p.unit == service.unit), key=lambda p: p.pid
        )
        memory_kb = sum(p.rss_kb for p in procs)
        lines += [
            f"     Active: active (running) {since}",
            f"   Main PID: {service.main_pid} ({comm_of(host.procs[service.main_pid])})"
            if service.main_pid in host.procs
            else "   Main PID: (unknown)",
            f"      Tasks: {len(procs)} (limit: 9387)",
            f"     Memory: {human(memory_kb * 1024)}",
            f"     CGroup: /system.slice/{service.unit}",
            *(
                f'             {"└" if i == len(procs) - 1 else "├"}─{p.pid} "{p.command}"'
                for i, p in enumerate(procs)
            ),
        ]
    elif service.state == "failed":
        lines += [
            f"     Active: failed (Result: exit-code) {since}",
            f"    Process: {service.command.split(' ')[0]} (code=exited, status=1/FAILURE)",
        ]
    else:
        lines.append(f"     Active: inactive (dead) {since}")
    tail = [journal_row(host, *record) for record in service.journal[-10:]]
    return "\n".join([*lines, "", *tail]), 0 if service.state == "active" else 3


def verb_restart(sh: Shell, service) -> Result:
    if sh.host.restart(service):
        return "", 0
    return (
        f"Job for {service.unit} failed because the control process exited with error code.\n"
        f'See "systemctl status {service.unit}" and "journalctl -xeu {service.unit}" for details.',
        1,
    )


def verb_start(sh: Shell, service) -> Result:
    return ("", 0) if service.state == "active" else verb_restart(sh, service)


def verb_stop(sh: Shell, service) -> Result:
    sh.host.stop(service)
    return "", 0


def verb_reload(sh: Shell, service) -> Result:
    if service.cert_path is None:
        return (
            f"Failed to reload {service.unit}: Job type reload is not applicable for unit "
            f"{service.unit}.",
            1,
        )
    if service.state != "active":
        return f"{service.unit} is not active, cannot reload.", 1
    # nginx re-reads its configuration and certificates on SIGHUP.
    service.loaded_cert_expiry = sh.host.certs.get(service.cert_path)
    sh.host.log(service, "systemd", 1, f"Reloading {service.description}...")
    sh.host.log(service, "systemd", 1, f"Reloaded {service.description}.")
    sh.host.touch()
    return "", 0


def verb_is_active(sh: Shell, service) -> Result:
    return service.state, 0 if service.state == "active" else 3


def verb_enable(sh: Shell, service) -> Result:
    return "", 0


SYSTEMCTL_VERBS: dict[str, Callable[[Shell, object], Result]] = {
    "status": status_text,
    "restart": verb_restart,
    "try-restart": verb_restart,
    "start": verb_start,
    "stop": verb_stop,
    "reload": verb_reload,
    "reload-or-restart": verb_restart,
    "is-active": verb_is_active,
    "enable": verb_enable,
    "disable": verb_enable,
}


def cmd_service(sh: Shell, args: list[str], stdin: str | None) -> Result:
    if len(args) < 2:
        return (
            "Usage: service < option > | --status-all | "
            "[ service_name [ command | --full-restart ] ]",
            1,
        )
    return cmd_systemctl(sh, [args[1], args[0]], stdin)


def cmd_journalctl(sh: Shell, args: list[str], stdin: str | None) -> Result:
    host = sh.host
    units: list[str] = []
    count = 40
    words = iter(args)
    kernel = False
    for word in words:
        if word in ("-u", "--unit"):
            units.append(next(words, ""))
        elif word.startswith("--unit="):
            units.append(word.split("=", 1)[1])
        elif word.startswith("-u") and len(word) > 2 and not word.startswith("-u-"):
            units.append(word[2:])
        elif word.startswith("-") and "u" in word[1:] and not word.startswith("--"):
            units.append(next(words, ""))  # e.g. -xeu UNIT
        elif word in ("-n", "--lines"):
            value = next(words, "")
            count = int(value) if value.isdigit() else count
        elif word.startswith("-n") and word[2:].isdigit():
            count = int(word[2:])
        elif word in ("-k", "--dmesg"):
            kernel = True
    if kernel:
        return cmd_dmesg(sh, [], stdin)
    if units:
        records = []
        for name in units:
            service = host.unit_of(name)
            if service is not None:
                records += service.journal
        if not records:
            return "-- No entries --", 0
    else:
        records = [r for s in host.services.values() for r in s.journal]
    records.sort(key=lambda record: record[0])
    return "\n".join(journal_row(host, *r) for r in records[-count:]), 0


def cmd_dmesg(sh: Shell, args: list[str], stdin: str | None) -> Result:
    host = sh.host
    if "-T" in args:
        rows = [
            f"[{(host.boot + timedelta(seconds=t)):%a %b %d %H:%M:%S %Y}] {m}"
            for t, m in sorted(host.dmesg)
        ]
    else:
        rows = [f"[{t:12.6f}] {m}" for t, m in sorted(host.dmesg)]
    return "\n".join(rows), 0


# --------------------------------------------------------------------- network
def cmd_ss(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, _ = split_flags(args)
    if "l" not in flags:
        return (
            "State  Recv-Q Send-Q  Local Address:Port   Peer Address:Port Process\n"
            "ESTAB  0      0           10.0.2.15:22        10.0.2.2:51544"
        ), 0
    with_process = "p" in flags
    rows = ["State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process"]
    rows.append(
        "LISTEN 0      4096   127.0.0.53%lo:53         0.0.0.0:*"
        + (
            '    users:(("systemd-resolve",pid=' + str(resolved_pid(sh)) + ",fd=14))"
            if with_process
            else ""
        )
    )
    for proc in sorted(sh.host.procs.values(), key=lambda p: min(p.ports or (0,))):
        for port in proc.ports:
            address = "127.0.0.1" if "redis" in proc.command else "0.0.0.0"
            local = f"{address}:{port}"
            process = f'    users:(("{comm_of(proc)}",pid={proc.pid},fd={6 + port % 7}))'
            rows.append(
                f"LISTEN 0      511    {local:>18}      0.0.0.0:*"
                + (process if with_process else "")
            )
    return "\n".join(rows), 0


def resolved_pid(sh: Shell) -> int:
    service = sh.host.services.get("systemd-resolved.service")
    return (service.main_pid or 0) if service else 0


def cmd_netstat(sh: Shell, args: list[str], stdin: str | None) -> Result:
    rows = [
        "Active Internet connections (only servers)",
        "Proto Recv-Q Send-Q Local Address           Foreign Address         State       "
        "PID/Program name",
    ]
    for proc in sorted(sh.host.procs.values(), key=lambda p: min(p.ports or (0,))):
        for port in proc.ports:
            rows.append(
                f"tcp        0      0 {'0.0.0.0:' + str(port):<23} 0.0.0.0:*               "
                f"LISTEN      {proc.pid}/{comm_of(proc)}"
            )
    return "\n".join(rows), 0


def resolve_name(sh: Shell, name: str) -> tuple[str | None, str]:
    """(address or None, the server asked) for `name`."""
    resolv = sh.host.files.get("/etc/resolv.conf")
    servers = [
        line.split()[1]
        for line in ((resolv.content or "") if resolv else "").splitlines()
        if line.startswith("nameserver ") and len(line.split()) > 1
    ]
    server = servers[0] if servers else "127.0.0.1"
    if not nameserver_works(sh.host):
        return None, server
    known = {
        "db.internal": "10.0.0.31",
        "localhost": "127.0.0.1",
        sh.host.hostname: "127.0.1.1",
        "example.com": "93.184.215.14",
    }
    return known.get(name, "0.0.0.0" if name.endswith(".internal") else "203.0.113.7"), server


def cmd_nslookup(sh: Shell, args: list[str], stdin: str | None) -> Result:
    names = [a for a in args if not a.startswith("-") and not a.startswith("+")]
    if not names:
        return "usage: nslookup NAME", 1
    address, server = resolve_name(sh, names[0])
    if address is None:
        return (
            f";; communications error to {server}#53: timed out\n"
            f";; communications error to {server}#53: timed out\n"
            f";; no servers could be reached"
        ), 1
    return (
        f"Server:\t\t{server}\nAddress:\t{server}#53\n\nNon-authoritative answer:\n"
        f"Name:\t{names[0]}\nAddress: {address}"
    ), 0


def cmd_resolvectl(sh: Shell, args: list[str], stdin: str | None) -> Result:
    return (
        "Global\n       Protocols: -LLMNR -mDNS -DNSOverTLS DNSSEC=no/unsupported\n"
        "resolv.conf mode: stub\n\nLink 2 (ens3)\n    Current Scopes: DNS\n"
        f"Current DNS Server: {sh.host.resolver_ip}\n       DNS Servers: {sh.host.resolver_ip}\n"
        "        DNS Domain: internal"
    ), 0


def cmd_curl(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, urls = split_flags(args)
    if not urls:
        return "curl: try 'curl --help' or 'curl --manual' for more information", 2
    url = urls[0]
    scheme = "https" if url.startswith("https://") else "http"
    rest = url.split("://", 1)[-1]
    hostport = rest.split("/", 1)[0]
    hostname, _, port_text = hostport.partition(":")
    port = int(port_text) if port_text.isdigit() else (443 if scheme == "https" else 80)
    if hostname not in ("localhost", "127.0.0.1", sh.host.hostname, "0.0.0.0"):
        address, _server = resolve_name(sh, hostname)
        if address is None:
            return f"curl: (6) Could not resolve host: {hostname}", 6
        return f"curl: (28) Failed to connect to {hostname} port {port} after 3001 ms: Timeout", 28
    listener = next((p for p in sh.host.procs.values() if port in p.ports), None)
    if listener is None:
        return (
            f"curl: (7) Failed to connect to {hostname} port {port} after 0 ms: Connection refused"
        ), 7
    service = sh.host.services.get(listener.unit or "")
    if scheme == "https" and service is not None and service.cert_path:
        expiry = service.loaded_cert_expiry
        if (
            expiry is not None
            and expiry <= sh.host.now
            and "k" not in flags
            and "--insecure" not in flags
        ):
            return (
                "curl: (60) SSL certificate problem: certificate has expired\n"
                "More details here: https://curl.se/docs/sslcerts.html"
            ), 60
    if service is None:
        server = "SimpleHTTP/0.6 Python/3.10.12"
    else:
        server = "nginx/1.18.0 (Ubuntu)" if "nginx" in service.unit else "gunicorn"
    body = "" if "I" in flags or "--head" in flags else '\n\n{"status": "ok"}'
    return (
        f"HTTP/1.1 200 OK\nServer: {server}\nDate: {sh.host.now:%a, %d %b %Y %H:%M:%S} GMT\n"
        f"Content-Type: application/json\nConnection: keep-alive{body}"
    ), 0


def cmd_ping(sh: Shell, args: list[str], stdin: str | None) -> Result:
    names = [a for a in args if not a.startswith("-") and not a.isdigit()]
    if not names:
        return "ping: usage error: Destination address required", 1
    address, _server = resolve_name(sh, names[0])
    if address is None:
        return f"ping: {names[0]}: Temporary failure in name resolution", 2
    return (
        f"PING {names[0]} ({address}) 56(84) bytes of data.\n"
        f"64 bytes from {address}: icmp_seq=1 ttl=63 time=0.412 ms\n\n"
        f"--- {names[0]} ping statistics ---\n"
        "1 packets transmitted, 1 received, 0% packet loss, time 0ms"
    ), 0


# ------------------------------------------------------------------ files
def read_text(sh: Shell, operand: str, tool: str) -> tuple[str | None, str]:
    path = sh.resolve(operand)
    if path in sh.host.dirs:
        return None, f"{tool}: {operand}: Is a directory"
    file = sh.host.files.get(path)
    if file is None:
        return None, f"{tool}: {operand}: No such file or directory"
    return file.content or "", ""


def cmd_cat(sh: Shell, args: list[str], stdin: str | None) -> Result:
    operands = [a for a in args if not a.startswith("-")]
    if not operands:
        return (stdin or ""), 0
    parts, status = [], 0
    for operand in operands:
        for path in sh.expand(operand):
            text, error = read_text(sh, path, "cat")
            if text is None:
                parts.append(error.replace(path, operand))
                status = 1
            else:
                parts.append(text.rstrip("\n"))
    return "\n".join(parts), status


def cmd_head_tail(sh: Shell, args: list[str], stdin: str | None, tail: bool) -> Result:
    count = 10
    operands = []
    words = iter(args)
    for word in words:
        if word == "-n":
            value = next(words, "10").lstrip("+")
            count = int(value) if value.isdigit() else 10
        elif word.startswith("-n") and word[2:].isdigit():
            count = int(word[2:])
        elif word.startswith("-") and word[1:].isdigit():
            count = int(word[1:])
        elif not word.startswith("-"):
            operands.append(word)
    if operands:
        text, error = read_text(sh, operands[0], "tail" if tail else "head")
        if text is None:
            return error, 1
    else:
        text = stdin or ""
    lines = text.rstrip("\n").split("\n") if text else []
    return "\n".join(lines[-count:] if tail else lines[:count]) if count else "", 0


def cmd_grep(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, operands = split_flags(args)
    if not operands:
        return "Usage: grep [OPTION]... PATTERNS [FILE]...", 2
    pattern, files = operands[0], operands[1:]
    # Fixed-string matching (alternation with -E's '|'): no user regex, so no ReDoS.
    needles = pattern.split("|") if ("E" in flags or "\\|" in pattern) else [pattern]
    needles = [n.replace("\\", "") for n in needles]
    if "i" in flags:
        needles = [n.lower() for n in needles]
    sources: list[tuple[str, str]] = []
    if files:
        for operand in files:
            text, error = read_text(sh, operand, "grep")
            if text is None:
                return error, 2
            sources.append((operand, text))
    else:
        sources.append(("", stdin or ""))
    hits = []
    for name, text in sources:
        for line in text.splitlines():
            probe = line.lower() if "i" in flags else line
            matched = any(n in probe for n in needles)
            if matched != ("v" in flags):
                hits.append(f"{name}:{line}" if len(sources) > 1 else line)
    if "c" in flags:
        return str(len(hits)), 0 if hits else 1
    return "\n".join(hits), 0 if hits else 1


def cmd_wc(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, operands = split_flags(args)
    text = stdin or ""
    if operands:
        text, error = read_text(sh, operands[0], "wc")
        if text is None:
            return error, 1
    counts = {
        "l": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        "w": len(text.split()),
        "c": len(text.encode("utf-8", "replace")),
    }
    chosen = [k for k in "lwc" if k in flags] or ["l", "w", "c"]
    return " ".join(str(counts[k]) for k in chosen) + (f" {operands[0]}" if operands else ""), 0


def size_value(text: str) -> float:
    match = re.match(r"\s*([0-9.]+)([KMGTP]?)", text)
    if match is None:
        return 0.0
    try:
        number = float(match.group(1))
    except ValueError:
        return 0.0
    return number * 1024 ** ("KMGTP".find(match.group(2)) + 1 if match.group(2) else 0)


def cmd_sort(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, _ = split_flags(args)
    lines = (stdin or "").splitlines()
    if "h" in flags or "n" in flags:
        lines.sort(key=size_value)
    else:
        lines.sort()
    if "r" in flags:
        lines.reverse()
    return "\n".join(lines), 0


def cmd_ls(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, operands = split_flags(args)
    host = sh.host
    long_format, human_sizes, show_all = "l" in flags, "h" in flags, "a" in flags
    blocks, status = [], 0
    paths = [p for o in (operands or ["."]) for p in sh.expand(o)]
    for path in paths:
        if path in host.files:
            entry = host.files[path]
            blocks.append(ls_row(path, entry, host.now, human_sizes) if long_format else path)
            continue
        directory = host.dirs.get(path)
        if directory is None:
            blocks.append(f"ls: cannot access '{path}': No such file or directory")
            status = 2
            continue
        names = host.children(path)
        if show_all:
            names = [".", "..", *names]
        rows = []
        for name in names:
            full = path.rstrip("/") + "/" + name
            entry = host.files.get(full) or host.dirs.get(full) or directory
            rows.append(ls_row(name, entry, host.now, human_sizes) if long_format else name)
        rows += bulk_listing(directory, long_format, host.now)
        if long_format:
            total = (
                host.subtree_size(path)[0] if not directory.bulk_files else directory.bulk_bytes
            ) // 1024
            rows.insert(0, f"total {total}")
        header = [f"{path}:"] if len(paths) > 1 else []
        blocks.append("\n".join([*header, *rows]))
    return "\n".join(blocks), status


def bulk_listing(directory: Directory, long_format: bool, now) -> list[str]:
    if not directory.bulk_files:
        return []
    rows = []
    for index in range(min(MAX_LISTED, directory.bulk_files)):
        name = f"{directory.bulk_prefix}{(index * 2654435761) % 16**10:010x}"
        entry = File(
            directory.bulk_bytes // directory.bulk_files,
            0o600,
            directory.owner,
            directory.group,
            now - timedelta(minutes=index),
        )
        rows.append(ls_row(name, entry, now, False) if long_format else name)
    if directory.bulk_files > MAX_LISTED:
        rows.append(f"[... {directory.bulk_files - MAX_LISTED} more entries not shown ...]")
    return rows


def cmd_find(sh: Shell, args: list[str], stdin: str | None) -> Result:
    host = sh.host
    roots = []
    words = list(args)
    while words and not words[0].startswith("-"):
        roots.append(sh.resolve(words.pop(0)))
    kind = name_pattern = None
    min_size = None
    delete = False
    index = 0
    while index < len(words):
        word = words[index]
        value = words[index + 1] if index + 1 < len(words) else None
        if word in (
            "-type",
            "-name",
            "-iname",
            "-size",
            "-maxdepth",
            "-mtime",
            "-mmin",
            "-user",
            "-newer",
        ):
            if value is None:
                return f"find: missing argument to `{word}'", 1
            if word == "-type":
                kind = value
            elif word in ("-name", "-iname"):
                name_pattern = value
            elif word == "-size":
                min_size = (
                    size_value(value.lstrip("+").upper().replace("C", ""))
                    if value.startswith("+")
                    else None
                )
            index += 2
        elif word in ("-delete", "-print", "-xdev", "-ls"):
            delete = delete or word == "-delete"
            index += 1
        else:
            return f"find: unknown predicate `{word}'", 1
    rows: list[str] = []
    for root in roots or [sh.cwd]:
        if not sh.exists(root):
            rows.append(f"find: '{root}': No such file or directory")
            continue
        prefix = root.rstrip("/") + "/"
        if kind != "f":
            rows += [
                d
                for d in sorted(host.dirs)
                if (d == root or d.startswith(prefix))
                and (name_pattern is None or fnmatch.fnmatch(d.rsplit("/", 1)[-1], name_pattern))
            ]
        if kind in (None, "f"):
            for path in sorted(p for p in host.files if p == root or p.startswith(prefix)):
                file = host.files[path]
                if name_pattern and not fnmatch.fnmatch(path.rsplit("/", 1)[-1], name_pattern):
                    continue
                if min_size is not None and file.size <= min_size:
                    continue
                rows.append(path)
                if delete:
                    host.remove_file(path)
            for path in sorted(d for d in host.dirs if d == root or d.startswith(prefix)):
                directory = host.dirs[path]
                if not directory.bulk_files or min_size is not None:
                    continue
                if name_pattern and not fnmatch.fnmatch(
                    directory.bulk_prefix + "0a1b", name_pattern
                ):
                    continue
                if delete:
                    host.clear_bulk(path)
                else:
                    rows += [path + "/" + line for line in bulk_listing(directory, False, host.now)]
    if delete:
        rows = [r for r in rows if r.startswith("find:")]
    return "\n".join(rows), 1 if any(r.startswith("find:") for r in rows) else 0


def cmd_rm(sh: Shell, args: list[str], stdin: str | None) -> Result:
    flags, operands = split_flags(args)
    host = sh.host
    recursive, force = bool({"r", "R", "--recursive"} & flags), "f" in flags or "--force" in flags
    if not operands:
        return "rm: missing operand\nTry 'rm --help' for more information.", 1
    errors = []
    for operand in operands:
        bulk = sh.bulk_match(operand)
        if bulk is not None and bulk.bulk_files > 100_000:
            return "bash: /usr/bin/rm: Argument list too long", 126
        if bulk is not None:
            host.clear_bulk(sh.resolve(operand).rsplit("/", 1)[0])
        for path in sh.expand(operand):
            if path == "/" and recursive:
                return (
                    "rm: it is dangerous to operate recursively on '/'\n"
                    "rm: use --no-preserve-root to override this failsafe"
                ), 1
            if path in host.files:
                host.remove_file(path)
            elif path in host.dirs:
                if not recursive:
                    errors.append(f"rm: cannot remove '{operand}': Is a directory")
                else:
                    host.remove_tree(path)
            elif not force and bulk is None:
                errors.append(f"rm: cannot remove '{operand}': No such file or directory")
    return "\n".join(errors), 1 if errors else 0


def cmd_truncate(sh: Shell, args: list[str], stdin: str | None) -> Result:
    size_text, operands = None, []
    words = iter(args)
    for word in words:
        if word in ("-s", "--size"):
            size_text = next(words, None)
        elif word.startswith("--size="):
            size_text = word.split("=", 1)[1]
        elif word.startswith("-s") and len(word) > 2:
            size_text = word[2:]
        else:
            operands.append(word)
    if size_text is None:
        return "truncate: you must specify either '--size' or '--reference'", 1
    if not re.fullmatch(r"[0-9]+[KMG]?", size_text):
        return f"truncate: Invalid number: '{size_text}'", 1
    if not operands:
        return "truncate: missing file operand", 1
    size = int(size_value(size_text))
    for operand in operands:
        path = sh.resolve(operand)
        if path in sh.host.dirs:
            return f"truncate: cannot open '{operand}' for writing: Is a directory", 1
        file = sh.host.files.get(path)
        if file is None:
            if sh.parent_missing(path):
                return (
                    f"truncate: cannot open '{operand}' for writing: No such file or directory",
                    1,
                )
            sh.host.add_file(path, File(size, 0o644, "root", "root", sh.host.now, ""))
        else:
            file.size = size
            file.content = (file.content or "")[:size] if size else ""
            file.mtime = sh.host.now
        sh.host.touch()
    return "", 0


MODE_SYMBOLIC = re.compile(r"([ugoa]*)([+\-=])([rwx]*)")


def new_mode(mode: int, spec: str) -> int | None:
    if re.fullmatch(r"[0-7]{3,4}", spec):
        return int(spec, 8) & 0o7777
    for clause in spec.split(","):
        match = MODE_SYMBOLIC.fullmatch(clause)
        if match is None:
            return None
        who = match.group(1) or "a"
        bits = sum({"r": 4, "w": 2, "x": 1}[c] for c in match.group(3))
        mask = sum(
            bits << shift
            for letter, shift in (("u", 6), ("g", 3), ("o", 0))
            if letter in who or "a" in who
        )
        clear = sum(
            7 << shift
            for letter, shift in (("u", 6), ("g", 3), ("o", 0))
            if letter in who or "a" in who
        )
        op = match.group(2)
        mode = mode | mask if op == "+" else mode & ~mask if op == "-" else (mode & ~clear) | mask
    return mode


def cmd_chmod(sh: Shell, args: list[str], stdin: str | None) -> Result:
    operands = [a for a in args if a not in ("-R", "-v", "-c", "--recursive")]
    if len(operands) < 2:
        return "chmod: missing operand\nTry 'chmod --help' for more information.", 1
    spec, targets = operands[0], operands[1:]
    errors = []
    for target in targets:
        path = sh.resolve(target)
        entry = sh.host.files.get(path) or sh.host.dirs.get(path)
        if entry is None:
            errors.append(f"chmod: cannot access '{target}': No such file or directory")
            continue
        mode = new_mode(entry.mode, spec)
        if mode is None:
            return f"chmod: invalid mode: '{spec}'", 1
        entry.mode = mode
        sh.host.touch()
    return "\n".join(errors), 1 if errors else 0


def cmd_chown(sh: Shell, args: list[str], stdin: str | None) -> Result:
    operands = [a for a in args if a not in ("-R", "-v", "--recursive")]
    if len(operands) < 2:
        return "chown: missing operand", 1
    owner, _, group = operands[0].partition(":")
    known = {"root", "app", "node", "redis", "www-data", "syslog", "adm", "jobs", *USERS}
    if owner and owner not in known:
        return f"chown: invalid user: '{operands[0]}'", 1
    for target in operands[1:]:
        path = sh.resolve(target)
        entry = sh.host.files.get(path) or sh.host.dirs.get(path)
        if entry is None:
            return f"chown: cannot access '{target}': No such file or directory", 1
        entry.owner = owner or entry.owner
        entry.group = group or entry.group
        sh.host.touch()
    return "", 0


def cmd_cp(sh: Shell, args: list[str], stdin: str | None, move: bool = False) -> Result:
    tool = "mv" if move else "cp"
    operands = [a for a in args if not a.startswith("-")]
    if len(operands) != 2:
        return f"{tool}: missing destination file operand", 1
    source, target = sh.resolve(operands[0]), sh.resolve(operands[1])
    file = sh.host.files.get(source)
    if file is None:
        problem = (
            "-r not specified; omitting directory"
            if source in sh.host.dirs
            else "No such file or directory"
        )
        return f"{tool}: cannot stat '{operands[0]}': {problem}", 1
    if target in sh.host.dirs:
        target = target.rstrip("/") + "/" + source.rsplit("/", 1)[1]
    if sh.parent_missing(target):
        return f"{tool}: cannot create regular file '{operands[1]}': No such file or directory", 1
    existing = sh.host.files.get(target)
    copy = File(
        file.size,
        existing.mode if existing else file.mode,
        file.owner,
        file.group,
        sh.host.now,
        file.content,
        existing.holder_unit if existing else None,
    )
    sh.host.add_file(target, copy)
    if move:
        del sh.host.files[source]
    sh.host.touch()
    return "", 0


def cmd_sed(sh: Shell, args: list[str], stdin: str | None) -> Result:
    in_place = "-i" in args
    operands = [a for a in args if a not in ("-i", "-e", "-E", "-r")]
    if not operands:
        return "Usage: sed [OPTION]... {script-only-if-no-other-script} [input-file]...", 1
    script, files = operands[0], operands[1:]
    match = re.fullmatch(r"s(.)(.*?)\1(.*?)\1(g?)", script)
    if match is None:
        return f"sed: -e expression #1, char {len(script)}: unknown command: `{script[:1]}'", 1
    old, new, every = match.group(2), match.group(3), match.group(4) == "g"
    if not old:
        return "sed: -e expression #1, char 0: no previous regular expression", 1

    def substitute(text: str) -> str:
        # Literal substitution, line by line (first occurrence unless /g).
        return "\n".join(
            line.replace(old, new) if every else line.replace(old, new, 1)
            for line in text.split("\n")
        )

    if not files:
        return substitute(stdin or ""), 0
    outputs = []
    for operand in files:
        path = sh.resolve(operand)
        file = sh.host.files.get(path)
        if file is None:
            return f"sed: can't read {operand}: No such file or directory", 2
        text = substitute(file.content or "")
        if in_place:
            file.content, file.size, file.mtime = text, len(text), sh.host.now
            sh.host.touch()
        else:
            outputs.append(text.rstrip("\n"))
    return "\n".join(outputs), 0


def cmd_tee(sh: Shell, args: list[str], stdin: str | None) -> Result:
    operands = [a for a in args if not a.startswith("-")]
    for operand in operands:
        text, status = sh.write_redirect(operand, (stdin or "").rstrip("\n"), "-a" in args)
        if status:
            return text.replace("bash", "tee"), status
    return stdin or "", 0


def cmd_touch(sh: Shell, args: list[str], stdin: str | None) -> Result:
    for operand in (a for a in args if not a.startswith("-")):
        path = sh.resolve(operand)
        if path in sh.host.files:
            sh.host.files[path].mtime = sh.host.now
        elif sh.parent_missing(path):
            return f"touch: cannot touch '{operand}': No such file or directory", 1
        elif path not in sh.host.dirs:
            sh.host.add_file(path, File(0, 0o644, "root", "root", sh.host.now, ""))
        sh.host.touch()
    return "", 0


def cmd_mkdir(sh: Shell, args: list[str], stdin: str | None) -> Result:
    for operand in (a for a in args if not a.startswith("-")):
        path = sh.resolve(operand)
        if sh.exists(path) and "-p" not in args:
            return f"mkdir: cannot create directory '{operand}': File exists", 1
        if sh.parent_missing(path) and "-p" not in args:
            return f"mkdir: cannot create directory '{operand}': No such file or directory", 1
        sh.host.add_dir(path)
        sh.host.touch()
    return "", 0


def cmd_echo(sh: Shell, args: list[str], stdin: str | None) -> Result:
    return " ".join(a for a in args if a not in ("-e", "-n")), 0


def cmd_cd(sh: Shell, args: list[str], stdin: str | None) -> Result:
    target = args[0] if args else "~"
    path = sh.resolve(target)
    if path not in sh.host.dirs:
        return f"bash: cd: {target}: No such file or directory", 1
    sh.cwd = path
    return "", 0


# --------------------------------------------------------------- processes
SIGNALS = {
    "9": "KILL",
    "KILL": "KILL",
    "SIGKILL": "KILL",
    "15": "TERM",
    "TERM": "TERM",
    "SIGTERM": "TERM",
    "2": "TERM",
    "INT": "TERM",
    "SIGINT": "TERM",
    "1": "TERM",
    "HUP": "TERM",
    "SIGHUP": "TERM",
}


def cmd_kill(sh: Shell, args: list[str], stdin: str | None) -> Result:
    signal = "TERM"
    targets = []
    words = iter(args)
    for word in words:
        if word == "-l":
            return " 1) SIGHUP\t 2) SIGINT\t 3) SIGQUIT\t 9) SIGKILL\t15) SIGTERM", 0
        if word == "-s":
            word = "-" + next(words, "")
        if word.startswith("-") and len(word) > 1:
            name = word[1:].upper()
            if name not in SIGNALS:
                return f"bash: kill: {word[1:]}: invalid signal specification", 1
            signal = SIGNALS[name]
        else:
            targets.append(word)
    if not targets:
        return (
            "kill: usage: kill [-s sigspec | -n signum | -sigspec] pid | jobspec ... "
            "or kill -l [sigspec]",
            2,
        )
    errors = []
    for target in targets:
        if not target.isdigit():
            errors.append(f"bash: kill: {target}: arguments must be process or job IDs")
        elif int(target) not in sh.host.procs:
            errors.append(f"bash: kill: ({target}) - No such process")
        else:
            sh.host.kill(int(target), signal)
    return "\n".join(errors), 1 if errors else 0


def cmd_pkill(sh: Shell, args: list[str], stdin: str | None, exact: bool = False) -> Result:
    signal = "KILL" if any(a in ("-9", "-KILL") for a in args) else "TERM"
    names = [a for a in args if not a.startswith("-")]
    if not names:
        return "pkill: no matching criteria specified", 2
    full = "-f" in args
    victims = [
        p.pid
        for p in sh.host.procs.values()
        if p.pid > 2
        and not p.command.startswith("[")
        and (comm_of(p) == names[0] if exact else names[0] in (p.command if full else comm_of(p)))
    ]
    for pid in victims:
        if pid in sh.host.procs:
            sh.host.kill(pid, signal)
    if not victims:
        return (f"{names[0]}: no process found", 1) if exact else ("", 1)
    return "", 0


def cmd_pstree(sh: Shell, args: list[str], stdin: str | None) -> Result:
    procs = sh.host.procs
    children: dict[int, list[Proc]] = {}
    for proc in sorted(procs.values(), key=lambda p: p.pid):
        children.setdefault(proc.ppid, []).append(proc)
    show_pids = "-p" in args
    lines: list[str] = []

    def walk(proc: Proc, depth: int) -> None:
        label = comm_of(proc) + (f"({proc.pid})" if show_pids else "")
        lines.append("  " * depth + ("└─" if depth else "") + label)
        for child in children.get(proc.pid, []):
            if child.ppid != 2 or proc.pid != 2:
                walk(child, depth + 1)

    walk(procs[1], 0)
    return "\n".join(lines), 0


def cmd_lsof(sh: Shell, args: list[str], stdin: str | None) -> Result:
    rows = ["COMMAND     PID     USER   FD   TYPE DEVICE    SIZE/OFF NLINK    NODE NAME"]
    if "+L1" in args:
        for unit, path, size in sh.host.deleted_open:
            service = sh.host.services.get(unit)
            pid = service.main_pid if service else 0
            rows.append(
                f"{unit.split('.')[0][:9]:<9} {pid:>7} {service.user if service else 'root':>8}"
                f"    3w   REG    8,17 {size:>11}     0  131074 {path} (deleted)"
            )
        return "\n".join(rows), 0
    port_args = [a for a in args if a.startswith("-i")]
    if port_args:
        port_text = (
            port_args[0][2:]
            or (
                args[args.index(port_args[0]) + 1]
                if args.index(port_args[0]) + 1 < len(args)
                else ""
            )
        ).lstrip(":")
        for proc in sh.host.procs.values():
            for port in proc.ports:
                if str(port) == port_text or not port_text:
                    rows.append(
                        f"{comm_of(proc)[:9]:<9} {proc.pid:>7} {proc.user:>8}    6u  IPv4 "
                        f"  31337         0t0     TCP *:{port} (LISTEN)"
                    )
        return "\n".join(rows) if len(rows) > 1 else "", 0 if len(rows) > 1 else 1
    return "lsof: this session supports 'lsof +L1' and 'lsof -i :PORT'", 1


# ------------------------------------------------------------------- tls
PEM = "-----BEGIN CERTIFICATE-----\nMIIFKzCCBBOgAwIBAgISA3xq...\n-----END CERTIFICATE-----\n"


def cmd_openssl(sh: Shell, args: list[str], stdin: str | None) -> Result:
    if not args or args[0] != "x509":
        return f"Invalid command '{args[0] if args else ''}'; type \"help\" for a list.", 1
    path_index = args.index("-in") + 1 if "-in" in args else -1
    if path_index <= 0 or path_index >= len(args):
        return "Could not read certificate from <stdin>\nUnable to load certificate", 1
    path = sh.resolve(args[path_index])
    expiry = sh.host.certs.get(path)
    if expiry is None:
        return (
            f"Could not read certificate from {args[path_index]}\nUnable to load certificate"
        ), 1
    lines = []
    if "-subject" in args:
        lines.append(f"subject=CN = {sh.host.hostname}.example.com")
    if "-dates" in args or "-startdate" in args:
        lines.append(f"notBefore={expiry - timedelta(days=90):%b %e %H:%M:%S %Y} GMT")
    if "-dates" in args or "-enddate" in args:
        lines.append(f"notAfter={expiry:%b %e %H:%M:%S %Y} GMT")
    if "-noout" not in args:
        lines.append(PEM.rstrip("\n"))
    return "\n".join(lines), 0


def cmd_certbot(sh: Shell, args: list[str], stdin: str | None) -> Result:
    host = sh.host
    if args[:1] == ["certificates"]:
        rows = ["Found the following certs:"]
        for path, expiry in host.certs.items():
            days = (expiry - host.now).days
            state = "INVALID: EXPIRED" if expiry <= host.now else f"VALID: {days} days"
            rows += [
                f"  Certificate Name: {path.split('/')[-2]}",
                f"    Expiry Date: {expiry:%Y-%m-%d %H:%M:%S}+00:00 ({state})",
                f"    Certificate Path: {path}",
            ]
        return "\n".join(rows), 0
    if args[:1] != ["renew"]:
        return "certbot: error: this session supports 'certbot renew' and 'certbot certificates'", 2
    lines = ["Saving debug log to /var/log/letsencrypt/letsencrypt.log", ""]
    for path, expiry in list(host.certs.items()):
        name = path.split("/")[-2]
        lines.append(f"Processing /etc/letsencrypt/renewal/{name}.conf")
        if (expiry - host.now).days >= 30:
            lines.append("Certificate not yet due for renewal")
            continue
        host.certs[path] = host.now + timedelta(days=90)
        host.add_file(path, File(len(PEM), 0o644, "root", "root", host.now, PEM))
        lines += [
            "Renewing an existing certificate for " + name,
            "",
            "Congratulations, all renewals succeeded:",
            f"  {path} (success)",
        ]
    host.touch()
    return "\n".join(lines), 0


# ------------------------------------------------------------------- system
def cmd_reboot(sh: Shell, args: list[str], stdin: str | None) -> Result:
    sh.host.reboot()
    sh.rebooted = True
    return f"Connection to {sh.host.hostname} closed by remote host.", 0


def cmd_shutdown(sh: Shell, args: list[str], stdin: str | None) -> Result:
    if "-r" not in args:
        return "shutdown: only 'shutdown -r now' (reboot) is allowed on this host", 1
    return cmd_reboot(sh, args, stdin)


def constant(text: str, status: int = 0) -> Handler:
    return lambda sh, args, stdin: (text, status)


def cmd_hostname(sh: Shell, args: list[str], stdin: str | None) -> Result:
    return sh.host.hostname, 0


def cmd_uname(sh: Shell, args: list[str], stdin: str | None) -> Result:
    if "-a" in args:
        return (
            f"Linux {sh.host.hostname} {sh.host.kernel} #101-Ubuntu SMP x86_64 x86_64 x86_64 "
            "GNU/Linux"
        ), 0
    return (sh.host.kernel if "-r" in args else "Linux"), 0


def cmd_date(sh: Shell, args: list[str], stdin: str | None) -> Result:
    return f"{sh.host.now:%a %b %e %H:%M:%S UTC %Y}", 0


def cmd_pwd(sh: Shell, args: list[str], stdin: str | None) -> Result:
    return sh.cwd, 0


def cmd_which(sh: Shell, args: list[str], stdin: str | None) -> Result:
    found = [f"/usr/bin/{a}" for a in args if a in COMMANDS]
    return "\n".join(found), 0 if len(found) == len(args) and args else 1


def cmd_help(sh: Shell, args: list[str], stdin: str | None) -> Result:
    return "Commands available on this host:\n" + " ".join(sorted(COMMANDS)), 0


def cmd_apt(sh: Shell, args: list[str], stdin: str | None) -> Result:
    return (
        "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1 (systemd)\n"
        "E: package management is disabled on this host"
    ), 100


COMMANDS: dict[str, Handler] = {
    "ps": cmd_ps,
    "top": cmd_top,
    "free": cmd_free,
    "uptime": cmd_uptime,
    "df": cmd_df,
    "du": cmd_du,
    "systemctl": cmd_systemctl,
    "service": cmd_service,
    "journalctl": cmd_journalctl,
    "dmesg": cmd_dmesg,
    "ss": cmd_ss,
    "netstat": cmd_netstat,
    "nslookup": cmd_nslookup,
    "dig": cmd_nslookup,
    "host": cmd_nslookup,
    "resolvectl": cmd_resolvectl,
    "curl": cmd_curl,
    "ping": cmd_ping,
    "cat": cmd_cat,
    "head": lambda sh, args, stdin: cmd_head_tail(sh, args, stdin, tail=False),
    "tail": lambda sh, args, stdin: cmd_head_tail(sh, args, stdin, tail=True),
    "grep": cmd_grep,
    "wc": cmd_wc,
    "sort": cmd_sort,
    "ls": cmd_ls,
    "find": cmd_find,
    "rm": cmd_rm,
    "truncate": cmd_truncate,
    "chmod": cmd_chmod,
    "chown": cmd_chown,
    "cp": cmd_cp,
    "mv": lambda sh, args, stdin: cmd_cp(sh, args, stdin, move=True),
    "sed": cmd_sed,
    "tee": cmd_tee,
    "touch": cmd_touch,
    "mkdir": cmd_mkdir,
    "echo": cmd_echo,
    "cd": cmd_cd,
    "kill": cmd_kill,
    "pkill": cmd_pkill,
    "killall": lambda sh, args, stdin: cmd_pkill(sh, args, stdin, exact=True),
    "pstree": cmd_pstree,
    "lsof": cmd_lsof,
    "openssl": cmd_openssl,
    "certbot": cmd_certbot,
    "reboot": cmd_reboot,
    "shutdown": cmd_shutdown,
    "hostname": cmd_hostname,
    "uname": cmd_uname,
    "date": cmd_date,
    "pwd": cmd_pwd,
    "whoami": constant("root"),
    "id": constant("uid=0(root) gid=0(root) groups=0(root)"),
    "which": cmd_which,
    "help": cmd_help,
    "clear": constant(""),
    "true": constant(""),
    "false": constant("", 1),
    "crontab": constant("no crontab for root", 1),
    "apt": cmd_apt,
    "apt-get": cmd_apt,
}
