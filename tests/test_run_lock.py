"""One writer per run folder and per output file (benchmarks/lock.py): a second invocation
of the same command is refused in one line naming the holder, exit status 2."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from creditgym.benchmarks import lock, sweep
from creditgym.benchmarks.credit_truth import main as credit_truth_main
from creditgym.benchmarks.hindsight_ablation import main as ablation_main
from creditgym.benchmarks.run import RunConfig, resolve
from creditgym.report import records

REPO = Path(__file__).resolve().parent.parent


def holder_named(message: str, pid: int) -> bool:
    return f"pid {pid} on host {socket.gethostname()}" in message


def test_a_second_holder_is_refused_naming_the_first_and_the_lock_is_freed_on_release(
    tmp_path,
):
    lock_file = lock.run_folder_lock(tmp_path / "run")
    with lock.hold(lock_file, "the run"):
        with pytest.raises(lock.LockHeldError) as refused, lock.hold(lock_file, "the run"):
            pass
        assert holder_named(str(refused.value), os.getpid())
        assert str(refused.value).startswith("the run is being written by")
    assert not lock_file.exists()  # a clean release leaves nothing in the folder
    with lock.hold(lock_file, "the run"):  # free again
        assert lock_file.exists()


def test_the_lock_of_a_killed_holder_is_released_by_the_kernel(tmp_path):
    lock_file = tmp_path / ".out.lock"
    script = (
        "import sys, time; from pathlib import Path; from creditgym.benchmarks import lock\n"
        "with lock.hold(Path(sys.argv[1]), 'out'):\n"
        "    print('held', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(lock_file)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(lock.LockHeldError) as refused, lock.hold(lock_file, "out"):
            pass
        assert holder_named(str(refused.value), holder.pid)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert lock_file.exists()  # left behind by the kill, with the dead holder's pid
    with lock.hold(lock_file, "out"):
        assert str(os.getpid()) in lock_file.read_text()


@pytest.mark.slow  # two fresh interpreters, one playing 500 episodes
def test_two_identical_runs_started_together_one_refuses_and_no_episode_is_doubled(tmp_path):
    # Enough episodes (~20 s) that the first to take the lock still holds it when the other,
    # slowed by a loaded machine, has imported torch and reaches it.
    episodes = 500
    argv = [sys.executable, "-m", "benchmarks.run", "--env", "keydoor", "--model", "random"]
    argv += ["--credit", "none", "--eval-episodes", str(episodes), "--out", str(tmp_path)]
    processes = [
        subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=300) for process in processes]
    codes = sorted(process.returncode for process in processes)
    assert codes == [0, 2], outputs
    refused = next(i for i, p in enumerate(processes) if p.returncode == 2)
    other = processes[1 - refused]
    stderr = outputs[refused][1]
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert holder_named(stderr, other.pid)
    (run_dir,) = records.run_dirs(tmp_path)
    written = records.read_episodes(run_dir)
    assert len(written) == episodes
    assert sorted(e.index for e in written) == list(range(episodes))
    assert not (run_dir / lock.RUN_LOCK_FILE).exists()


def test_a_sweep_skips_a_run_another_process_holds_and_runs_the_rest(tmp_path, capsys):
    config = tmp_path / "sweep.toml"
    config.write_text(
        '[common]\nenv = "keydoor"\ncredit = "none"\nmodel = "random"\neval_episodes = 2\n'
        "sample_group_size = 0\n\n[[grid]]\nseed = [0, 1]\n"
    )
    out = tmp_path / "runs"
    held = RunConfig(env="keydoor", credit="none", model="random", eval_episodes=2,
                     sample_group_size=0, seed=1, out=out)  # fmt: skip
    with lock.hold(lock.run_folder_lock(out / resolve(held).name), str(out / resolve(held).name)):
        code = sweep.main(["--config", str(config), "--out", str(out), "--no-leaderboard"])
    assert code == 1
    printed = capsys.readouterr()
    skipped = [line for line in printed.out.splitlines() if "skipped" in line]
    assert len(skipped) == 1 and resolve(held).name in skipped[0]
    assert holder_named(skipped[0], os.getpid())
    assert "Traceback" not in printed.err
    finished = [d.name for d in records.run_dirs(out) if (d / records.DONE_FILE).exists()]
    assert finished == [resolve(RunConfig(**{**held.__dict__, "seed": 0})).name]


def test_credit_truth_refuses_while_another_process_writes_its_output(tmp_path, capsys):
    stem = tmp_path / "held"
    argv = ["--env", "keydoor", "--model", "uniform", "--credit", "grpo", "--pool", "16"]
    argv += ["--batch-sizes", "8", "--tasks", "1", "--out", str(tmp_path), "--name", "held"]
    with lock.hold(lock.output_lock(stem), "held"):
        assert credit_truth_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and holder_named(err, os.getpid())
    assert not stem.with_suffix(".csv").exists()


def test_the_ablation_refuses_while_another_process_writes_its_output(tmp_path, capsys):
    stem = tmp_path / "held"
    with lock.hold(lock.output_lock(stem), "held"):
        assert ablation_main(["--out", str(tmp_path), "--name", "held"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and holder_named(err, os.getpid())
    assert not stem.with_suffix(".csv").exists()
