"""The sandbox contains hostile programs: each is stopped, reported, and leaves no trace.

Limits are small so that nothing here can hurt a shared machine even if a mechanism
failed: processes are capped by RLIMIT_NPROC (checked to hold first), memory by
RLIMIT_AS, disk by a 2 MiB tmpfs, time by 1 s of CPU and 2 s of wall time.
"""

from __future__ import annotations

import os
import socket
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from envs.code.sandbox import (
    SANDBOX_UID_BASE,
    SANDBOX_UID_SPAN,
    Sandbox,
    SandboxLimits,
    _fork_server,
)

LIMITS = SandboxLimits(
    cpu_seconds=1,
    wall_seconds=2.0,
    memory_bytes=256 * 2**20,
    file_size_bytes=2**20,
    max_processes=8,
    max_output_bytes=64 * 2**10,
    tmpfs_bytes=2 * 2**20,
)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(LIMITS)


def run(sandbox: Sandbox, code: str):
    return sandbox.run_python(textwrap.dedent(code))


def sandbox_processes() -> list[int]:
    """Host pids owned by a sandbox uid (there must be none between executions)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
            except FileNotFoundError:
                continue
            if SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_SPAN:
                pids.append(int(entry.name))
    return pids


def test_plain_program_runs_with_stdin_and_exit_code(sandbox: Sandbox) -> None:
    result = sandbox.run_python(
        "import sys; data = sys.stdin.read(); print(data.upper()); sys.exit(3)", stdin=b"hi"
    )
    assert result.stdout == "HI\n"
    assert result.exit_code == 3
    assert result.failure_reason() == "exited with status 3"
    assert not result.timed_out and not result.output_limit_exceeded


def test_runs_as_unprivileged_fresh_uid_in_own_pid_namespace(sandbox: Sandbox) -> None:
    code = "import os; print(os.getuid(), os.getpid(), os.getcwd(), sorted(os.listdir('.')))"
    first, second = run(sandbox, code), run(sandbox, code)
    uid, pid, cwd, listing = first.stdout.split(maxsplit=3)
    assert SANDBOX_UID_BASE <= int(uid) < SANDBOX_UID_BASE + SANDBOX_UID_SPAN
    assert pid == "1" and cwd == "/tmp" and listing.strip() == "[]"
    assert first.stdout.split()[0] != second.stdout.split()[0]  # a fresh uid each time


def test_working_directory_is_fresh_each_time(sandbox: Sandbox) -> None:
    assert run(sandbox, "open('left_behind', 'w').write('x')").ok
    assert run(sandbox, "import os; print(os.listdir('.'))").stdout == "[]\n"


def test_infinite_loop_is_killed_at_cpu_limit(sandbox: Sandbox) -> None:
    result = run(sandbox, "while True: pass")
    assert not result.ok
    assert "SIGKILL" in result.failure_reason() or result.timed_out
    assert result.wall_seconds < LIMITS.wall_seconds + 1.0


def test_blocking_program_is_killed_at_wall_limit(sandbox: Sandbox) -> None:
    result = run(sandbox, "import time; time.sleep(60)")
    assert result.timed_out and result.exit_code is None
    assert "wall-time limit" in result.failure_reason()
    assert result.wall_seconds < LIMITS.wall_seconds + 1.0


def test_process_limit_holds(sandbox: Sandbox) -> None:
    result = run(
        sandbox,
        """
        import os, time
        children = 0
        while children < 100:
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children += 1
        print(children)
        """,
    )
    assert result.ok, result.stderr
    assert 0 < int(result.stdout) < LIMITS.max_processes  # pid 1 counts too
    assert sandbox_processes() == []  # the sleeping children died with pid 1


def test_fork_bomb_is_contained_and_leaves_no_process(sandbox: Sandbox) -> None:
    result = run(
        sandbox,
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
    )
    assert not result.ok and result.failure_reason()
    assert sandbox_processes() == []


def test_daemon_that_leaves_the_process_group_is_killed(sandbox: Sandbox) -> None:
    result = run(
        sandbox,
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            os.close(1); os.close(2)
            time.sleep(60)
        print("parent exits")
        """,
    )
    assert result.stdout == "parent exits\n"
    assert sandbox_processes() == []


def test_memory_bomb_hits_address_space_limit(sandbox: Sandbox) -> None:
    result = run(
        sandbox,
        """
        blocks = []
        while True:
            blocks.append(bytearray(16 * 2**20))
        """,
    )
    assert not result.ok
    assert "MemoryError" in result.stderr


def test_disk_filler_is_capped_by_file_size_and_tmpfs(sandbox: Sandbox) -> None:
    result = run(
        sandbox,
        """
        import itertools
        written = 0
        try:
            for index in itertools.count():
                with open(f"fill{index}", "wb") as handle:
                    for _ in range(4):
                        handle.write(b"0" * 2**19)
                        written += 2**19
        except OSError as error:
            print(written, error.strerror)
        """,
    )
    written, reason = result.stdout.split(maxsplit=1)
    assert int(written) <= LIMITS.tmpfs_bytes
    assert reason.strip() in {"File too large", "No space left on device"}


def test_writes_outside_working_directory_never_reach_the_host(sandbox: Sandbox) -> None:
    marker = f"creditgym-escape-{os.getpid()}"
    targets = [
        str(Path.cwd() / marker),
        f"/tmp/{marker}",
        f"/var/tmp/{marker}",
        f"/dev/shm/{marker}",
        str(Path(__file__).resolve().parent / marker),
    ]
    result = run(
        sandbox,
        f"""
        for path in {targets!r}:
            try:
                open(path, "w").write("escaped")
                print("wrote", path)
            except OSError as error:
                print("blocked", path, error.strerror)
        """,
    )
    assert result.ok, result.stderr
    assert result.stdout.count("blocked") >= len(targets) - 1  # /tmp is the sandbox's own
    for path in targets:
        assert not Path(path).exists(), path


def test_parent_environment_is_not_visible(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "creditgym-secret-value-4242"
    monkeypatch.setenv("CREDITGYM_TEST_SECRET", secret)
    result = run(
        sandbox,
        """
        import os
        print(dict(os.environ))
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    print(open(f"/proc/{name}/environ", "rb").read())
                except OSError as error:
                    print(name, error.strerror)
        for pid in (os.getppid(), 1):
            try:
                print(open(f"/proc/{pid}/environ", "rb").read())
            except OSError as error:
                print(pid, error.strerror)
        """,
    )
    assert result.ok, result.stderr
    assert secret not in result.stdout
    assert "CREDITGYM_TEST_SECRET" not in result.stdout


def test_killing_the_parent_fails(sandbox: Sandbox) -> None:
    harness_pid, harness_group = os.getpid(), os.getpgid(0)
    result = run(
        sandbox,
        f"""
        import os, signal
        for target in (os.getppid(), {harness_pid}, -{harness_group}, -1):
            try:
                os.kill(target, signal.SIGKILL)
                print("sent", target)
            except OSError as error:
                print("refused", target, error.strerror)
        print("still here")
        """,
    )
    assert result.stdout.endswith("still here\n")
    # This test process is alive to check it: the harness survived every attempt.
    assert os.getpid() == harness_pid


def test_closed_stdout_is_reported_and_does_not_hang(sandbox: Sandbox) -> None:
    result = run(sandbox, "import os, time\nos.close(1)\nos.close(2)\nprint('lost')")
    assert result.exit_code not in (0, None)
    assert result.failure_reason().startswith("exited with status")
    blocked = run(sandbox, "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)")
    assert blocked.timed_out


def test_printing_gigabytes_is_cut_at_output_limit(sandbox: Sandbox) -> None:
    result = run(sandbox, "while True:\n    print('x' * 2**20)")
    assert result.output_limit_exceeded
    assert len(result.stdout) + len(result.stderr) <= LIMITS.max_output_bytes
    assert "output limit" in result.failure_reason()


def test_network_connect_fails(sandbox: Sandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        result = run(
            sandbox,
            f"""
            import socket
            # Only loopback targets: a host listener that any non-isolated process reaches.
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=0.5)
                print("connected")
            except OSError as error:
                print("failed", error.strerror)
            interfaces = [line.split(":")[0].strip() for line in open("/proc/net/dev")][2:]
            print("interfaces", interfaces)
            """,
        )
    finally:
        listener.close()
    assert "connected" not in result.stdout
    assert "failed Network is unreachable" in result.stdout
    assert "interfaces ['lo']" in result.stdout  # an empty network namespace


def test_limits_reject_non_positive_values() -> None:
    with pytest.raises(ValueError, match="wall_seconds must be positive"):
        SandboxLimits(wall_seconds=0)


def test_program_that_cannot_be_executed_is_reported(sandbox: Sandbox) -> None:
    result = sandbox.execute(["/nonexistent/interpreter", "-c", "pass"])
    assert result.exit_code == 127
    assert "sandbox: cannot run /nonexistent/interpreter: FileNotFoundError" in result.stderr


def test_report_channel_is_separate_from_stdout(sandbox: Sandbox) -> None:
    result = sandbox.run_python(
        "import os\nprint('to stdout')\nos.write(int(os.environ['SANDBOX_REPORT_FD']), b'rep')",
        report_channel=True,
    )
    assert (result.stdout, result.report) == ("to stdout\n", "rep")


def test_concurrent_executions_from_threads_stay_apart(sandbox: Sandbox) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: run(sandbox, f"print({i} * 7)"), range(8)))
    assert [r.stdout for r in results] == [f"{i * 7}\n" for i in range(8)]


def test_a_dead_fork_server_is_replaced(sandbox: Sandbox) -> None:
    server = _fork_server()
    server.process.kill()
    server.process.wait()
    assert run(sandbox, "print('again')").stdout == "again\n"
    assert _fork_server() is not server
