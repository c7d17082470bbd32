"""Row formats shared by the shell's commands and the faults' clue strings.

A fault's clue is "the row that shows the culprit" as the real tool would print it, so
the renderer and the clue must agree: both come from these functions.
"""

from __future__ import annotations

from datetime import datetime

from creditgym.envs.sysdiag.host import Directory, File, Host, Mount, Proc

UNITS = "KMGTP"


def human(size: int) -> str:
    """`df -h` / `du -h` / `ls -lh` style: 1023, 4.0K, 12M, 3.4G."""
    if size < 1024:
        return str(size)
    value = float(size)
    for unit in UNITS:
        value /= 1024
        if value < 1024 or unit == UNITS[-1]:
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    raise AssertionError("unreachable")


def mode_string(mode: int, is_dir: bool) -> str:
    bits = "".join(
        flag if mode & (1 << (8 - index)) else "-" for index, flag in enumerate("rwxrwxrwx")
    )
    return ("d" if is_dir else "-") + bits


def ls_time(when: datetime, now: datetime) -> str:
    # ls shows the year instead of the time for entries older than six months.
    if (now - when).days > 182:
        return when.strftime("%b %e  %Y")
    return when.strftime("%b %e %H:%M")


def ls_row(name: str, entry: File | Directory, now: datetime, human_sizes: bool) -> str:
    is_dir = isinstance(entry, Directory)
    size = 4096 if is_dir else entry.size
    size_text = human(size) if human_sizes else str(size)
    links = 2 if is_dir else 1
    return (
        f"{mode_string(entry.mode, is_dir)} {links} {entry.owner:<8} {entry.group:<8} "
        f"{size_text:>11} {ls_time(entry.mtime, now)} {name}"
    )


def command_of(proc: Proc) -> str:
    """What `ps` prints for the command: zombies have lost their argv."""
    if proc.stat.startswith("Z"):
        return f"[{comm_of(proc)}] <defunct>"
    return proc.command


def comm_of(proc: Proc) -> str:
    """The 15-character kernel `comm` name that `top` and zombies show."""
    if proc.command.startswith("["):
        return proc.command.strip("[]")[:15]
    first = proc.command.split(" ", 1)[0].rstrip(":").lstrip("@")
    return first.rsplit("/", 1)[-1][:15]


def ps_aux_row(host: Host, proc: Proc) -> str:
    row = host.rows.get(("aux", proc.pid))
    if row is None:
        row = host.rows[("aux", proc.pid)] = _ps_aux_row(host, proc)
    return row


def _ps_aux_row(host: Host, proc: Proc) -> str:
    # %-formatting: about twice as fast as an f-string with this many format specs, and
    # these rows dominate the cost of a step (see benchmarks/perf/bench_sysdiag.py).
    return "%-10.10s %7d %4.1f %4.1f %8d %7d %-8s %-4s %5s %7s %s" % (  # noqa: UP031
        proc.user,
        proc.pid,
        proc.cpu,
        100.0 * proc.rss_kb / host.mem_total_kb,
        proc.vsz_kb,
        proc.rss_kb,
        proc.tty,
        proc.stat,
        proc.start,
        proc.cpu_time,
        command_of(proc),
    )


def ps_ef_row(host: Host, proc: Proc) -> str:
    row = host.rows.get(("ef", proc.pid))
    if row is None:
        row = host.rows[("ef", proc.pid)] = _ps_ef_row(proc)
    return row


def _ps_ef_row(proc: Proc) -> str:
    return "%-8.8s %7d %7d %2d %5s %-8s %8s %s" % (  # noqa: UP031
        proc.user,
        proc.pid,
        proc.ppid,
        min(99, int(proc.cpu)),
        proc.start,
        proc.tty,
        proc.cpu_time,
        command_of(proc),
    )


def top_row(host: Host, proc: Proc) -> str:
    row = host.rows.get(("top", proc.pid))
    if row is None:
        row = host.rows[("top", proc.pid)] = _top_row(host, proc)
    return row


def _top_row(host: Host, proc: Proc) -> str:
    res = proc.rss_kb
    res_text = f"{res / 1048576:.1f}g" if res >= 10 * 1048576 else str(res)
    return "%7d %-9.9s 20   0 %8d %7s %6d %s %5.1f %5.1f %9s %s" % (  # noqa: UP031
        proc.pid,
        proc.user,
        proc.vsz_kb,
        res_text,
        min(res, 9000),
        proc.stat[0],
        proc.cpu,
        100.0 * res / host.mem_total_kb,
        proc.cpu_time,
        comm_of(proc),
    )


def df_row(host: Host, mount: Mount, inodes: bool) -> str:
    usage = host.usage(mount)
    if inodes:
        total, used = mount.inodes, usage.inodes_used
        percent = f"{-(-100 * used // total)}%" if total else "-"
        return (
            f"{mount.device:<15} {total:>9} {used:>9} {total - used:>9} {percent:>4} "
            f"{mount.mountpoint}"
        )
    total, used = mount.size, usage.used
    percent = f"{-(-100 * used // total)}%"
    return (
        f"{mount.device:<15} {human(total):>5} {human(used):>5} {human(total - used):>5} "
        f"{percent:>4} {mount.mountpoint}"
    )


def du_row(size: int, path: str, human_sizes: bool) -> str:
    return f"{human(size) if human_sizes else str(-(-size // 1024))}\t{path}"


def journal_row(host: Host, when: datetime, ident: str, pid: int, message: str) -> str:
    return "%s %s %s[%d]: %s" % (  # noqa: UP031
        when.strftime("%b %d %H:%M:%S"),
        host.hostname,
        ident,
        pid,
        message,
    )
