"""`python -m benchmarks.run` / `benchmarks.sweep`: bad input refused before any work,
no empty run folder after a failure, Ctrl-C ending in one line, a sweep file's `out`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from creditgym.benchmarks import sweep
from creditgym.benchmarks.run import command as run_module
from creditgym.benchmarks.run import evaluate as run_eval
from creditgym.benchmarks.run import main, parse_config, resolve
from creditgym.benchmarks.run.identity import method_config
from creditgym.report import records

REPO = Path(__file__).resolve().parent.parent
SCRIPTED = ["--model", "random", "--credit", "none", "--sample-group-size", "0"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--device", "gpu"], "not a torch device"),
        (["--device", "cuda:7"], "cuda"),
        (["--eval-batch-size", "0"], "--eval-batch-size must be >= 1"),
        (["--tasks-per-step", "0"], "--tasks-per-step must be >= 1"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["--learning-rate", "-1"], "--learning-rate must be a finite number > 0"),
        (["--learning-rate", "nan"], "--learning-rate must be a finite number > 0"),
        (["--eval-temperature", "nan"], "--eval-temperature must be > 0"),
        (["--max-episode-steps", "0"], "--max-episode-steps must be >= 1"),
        (["--model", "smolm2-135m"], "Did you mean smollm2-135m"),
        (["--eval-every", "-1"], "--eval-every must be >= 0"),
        (["--curve-episodes", "0"], "--curve-episodes must be >= 1"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--env", "keydoor", "--env-options", "delay"], "an env option is key=value"),
        (["--env", "keydoor", "--env-options", "dely=3"], "no option 'dely'; valid: delay,"),
        (["--env", "keydoor", "--env-options", "delay=-2"], "delay must be a non-negative"),
        (["--env", "keydoor", "--env-options", "max_steps=3"], "--max-episode-steps"),
    ],
)
def test_bad_values_are_one_line_with_status_2_and_leave_nothing(argv, expected, capsys, tmp_path):
    out = tmp_path / "runs"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert expected in err
    assert not out.exists() or not list(out.iterdir())


def test_speed_options_keep_the_run_name():
    base = parse_config(["--env", "keydoor"])
    for argv in (["--threads", "2"], ["--env-workers", "process"], ["--env-workers", "inline"]):
        changed = parse_config(["--env", "keydoor", *argv])
        assert resolve(changed).name == resolve(base).name


def test_env_options_choose_the_task_its_step_limit_and_its_table():
    default = parse_config(["--env", "keydoor"])
    long = parse_config(["--env", "keydoor", "--env-options", "delay=16", "variance=high"])
    assert resolve(long).env_kwargs() == {
        "delay": 16,
        "variance": "high",
        "max_steps": 20,  # the env's own default for delay 16 (delay + 4), not delay 8's 12
    }
    assert resolve(default).step_limit == 12
    assert resolve(long).name.startswith("keydoor-delay16-variancehigh_")
    # Other options are another task: another leaderboard table, the same method row.
    assert method_config(resolve(long)) == method_config(resolve(default))
    umbrella = parse_config(["--env", "umbrella", "--env-options", "length=20"])
    assert resolve(umbrella).step_limit == 20


def test_a_run_failing_before_any_output_leaves_no_folder(monkeypatch, tmp_path):
    def broken_evaluation(*args, **kwargs):
        raise RuntimeError("the env crashed")

    monkeypatch.setattr(run_module, "evaluate", broken_evaluation)
    with pytest.raises(RuntimeError, match="env crashed"):
        main([*SCRIPTED, "--eval-episodes", "2", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_an_evaluation_that_lost_episodes_is_left_unfinished_and_resumes(
    monkeypatch, tmp_path, capsys
):
    played = run_eval.scripted_episodes

    def dropping_odd_episodes(cfg, env, split, indices):  # as a crashed env drops its episode
        return [pair for pair in played(cfg, env, split, indices) if pair[0] % 2 == 0]

    monkeypatch.setattr(run_eval, "scripted_episodes", dropping_odd_episodes)
    assert main([*SCRIPTED, "--eval-episodes", "4", "--out", str(tmp_path)]) == 1
    assert "2 of 4 evaluation episodes were dropped" in capsys.readouterr().err
    (run_dir,) = tmp_path.iterdir()
    assert not (run_dir / records.DONE_FILE).exists()
    monkeypatch.setattr(run_eval, "scripted_episodes", played)
    assert main([*SCRIPTED, "--eval-episodes", "4", "--out", str(tmp_path)]) == 0
    assert sorted(e.index for e in records.read_episodes(run_dir)) == [0, 1, 2, 3]
    assert (run_dir / records.DONE_FILE).exists()


def test_a_failing_rerun_keeps_the_folder_of_earlier_work(monkeypatch, tmp_path):
    assert main([*SCRIPTED, "--eval-episodes", "2", "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()

    def broken_evaluation(*args, **kwargs):
        raise RuntimeError("the env crashed")

    monkeypatch.setattr(run_module, "evaluate", broken_evaluation)
    with pytest.raises(RuntimeError):
        main([*SCRIPTED, "--eval-episodes", "4", "--out", str(tmp_path)])
    assert len(records.read_episodes(run_dir)) == 2


# A terminal's foreground command starts with SIGINT at its default and unblocked; a
# child of this process inherits whatever the suite left (a library that ignored or
# blocked SIGINT here), and Python keeps an inherited SIG_IGN. In two clean-clone runs of
# the whole suite the command below ignored the SIGINT; alone it never did. So the command
# starts as from a terminal: SIGINT reset and unblocked, then exec.
AS_FROM_A_TERMINAL = (
    "import os, signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)


@pytest.mark.slow  # a fresh interpreter running the command until interrupted (41 s)
def test_ctrl_c_prints_one_line_saying_how_to_resume(tmp_path):
    # The whole process group gets SIGINT, as from a terminal's Ctrl-C.
    argv = [sys.executable, "-c", AS_FROM_A_TERMINAL, "-m", "benchmarks.run", *SCRIPTED]
    argv += ["--eval-episodes", "100000"]
    inherited = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    process = subprocess.Popen(
        [*argv, "--out", str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        episodes = list(tmp_path.glob(f"*/{records.EPISODES_FILE}"))
        if episodes and episodes[0].stat().st_size > 0:
            break
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate()
        tail = [line for line in err.splitlines() if "ep/s" not in line][-20:]
        pytest.fail(f"no exit 60 s after SIGINT; this process's SIGINT {inherited}; {tail}")
    assert process.returncode == 130
    assert "Traceback" not in err
    assert "run the same command again to resume" in err


def test_a_sweep_file_out_is_honoured_unless_the_command_line_sets_one(tmp_path):
    path = tmp_path / "sweep.toml"
    target = tmp_path / "from-file" / "runs"
    path.write_text(
        f'[common]\nout = "{target}"\nmodel = "random"\ncredit = "none"\n[[grid]]\nseed = [0, 1]\n'
    )
    assert {c.out for c in sweep.load_sweep(path, None)} == {target}
    assert {c.out for c in sweep.load_sweep(path, tmp_path / "cli")} == {tmp_path / "cli"}
    path.write_text('[common]\nmodel = "random"\ncredit = "none"\n[[grid]]\nseed = [0]\n')
    # Ad-hoc sweeps stay out of the committed reference set; the reference configs name it.
    assert sweep.load_sweep(path, None)[0].out == Path("results/local/runs")
    reference = sweep.load_sweep(REPO / "benchmarks/configs/reference_cpu.toml", None)
    assert {c.out for c in reference} == {Path("results/runs")}


def test_the_resolved_dtype_takes_part_in_the_run_identity():
    from creditgym.benchmarks.run import RunConfig

    cpu = RunConfig()
    assert resolve(cpu).dtype == "float32" and resolve(RunConfig(device="cuda")).dtype == "bfloat16"
    # auto on a CPU is float32 spelled out: one run.
    assert resolve(RunConfig(dtype="float32")).name == resolve(cpu).name
    assert resolve(RunConfig(dtype="bfloat16")).name != resolve(cpu).name
    assert resolve(RunConfig(device="cuda")).name == resolve(RunConfig(dtype="bfloat16")).name


@pytest.mark.slow  # loads and evaluates `tiny` through the command (17 s)
def test_a_bfloat16_policy_runs_end_to_end(tmp_path):
    argv = ["--model", "tiny", "--credit", "none", "--eval-episodes", "1", "--dtype", "bfloat16"]
    assert main([*argv, "--sample-group-size", "0", "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    assert len(records.read_episodes(run_dir)) == 1


@pytest.mark.slow
def test_the_run_folder_keeps_commands_logs_and_evaluation_trajectories(tmp_path, capsys):
    argv = ["--model", "tiny", "--credit", "grpo", "--steps", "1", "--group-size", "2"]
    argv += ["--eval-episodes", "2", "--sample-group-size", "0", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    (run_dir,) = tmp_path.iterdir()
    # One line per optimiser step, printed and kept, with the return and the phase times.
    (line,) = (run_dir / "train.log").read_text().splitlines()
    assert line.startswith("step 1/1 | success ") and "| return " in line and "update " in line
    assert line in out
    metrics = records.read_metrics(run_dir)[0]
    assert {"rollout/mean_return", "rollout/tokens_per_s"} <= set(metrics)
    trajectories = records.read_eval_trajectories(run_dir)
    assert sorted(trajectories) == [("test", 0), ("test", 1)]
    assert all(step["response"] for t in trajectories.values() for step in t["steps"])
    # A rerun resumes: it says so, and the command is kept next to the first one.
    assert (
        main(
            [*argv[:-4], "--eval-episodes", "3", "--sample-group-size", "0", "--out", str(tmp_path)]
        )
        == 0
    )
    commands = (run_dir / records.COMMANDS_FILE).read_text().splitlines()
    assert len(commands) == 2 and "--eval-episodes 3" in commands[1]
    assert len(records.read_eval_trajectories(run_dir)) == 3


def test_a_sweep_grid_takes_env_options_as_an_axis_of_strings():
    document = {
        "common": {"env": "keydoor", "model": "random", "credit": "none"},
        "grid": [{"env_options": ["delay=1 variance=high", "delay=4 variance=high"]}],
    }
    configs = sweep.expand(document, out=None)
    assert [c.env_options for c in configs] == [
        ("delay=1", "variance=high"),
        ("delay=4", "variance=high"),
    ]


def test_a_sweep_begun_in_another_precision_stops_before_starting_a_second_grid(tmp_path, capsys):
    """`dtype = "fast"` resolves per processor; where `--out` holds the grid's runs in the
    precision another processor chose, the sweep stops in one line, running nothing."""
    from creditgym.benchmarks.run.identity import hashed_name

    path = tmp_path / "sweep.toml"
    out = tmp_path / "runs"
    path.write_text(
        f'[common]\nout = "{out}"\nmodel = "random"\ncredit = "none"\ndtype = "fast"\n'
        "eval_episodes = 1\n[[grid]]\nseed = [0, 1]\n"
    )
    argv = ["--config", str(path), "--no-leaderboard"]
    first, second = sweep.load_sweep(path, None)
    here = resolve(second).identity["dtype"]
    other = "bfloat16-products" if here == "float32" else "float32"
    twin = hashed_name(resolve(second), {**resolve(second).identity, "dtype": other})
    (out / twin).mkdir(parents=True)
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert f"holds this sweep's runs computed in {other}" in err and twin in err
    assert "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == [twin]  # nothing ran
    # The same grid in this processor's precision only: the sweep runs.
    (out / twin).rmdir()
    assert sweep.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [resolve(first).name, resolve(second).name]
    )


def test_a_ray_task_on_a_node_that_resolves_another_precision_refuses_its_run(tmp_path):
    """The driver names each run by its own processor; a worker whose processor resolves
    `dtype = "fast"` otherwise computes another name and refuses, writing nothing (here
    the driver's name is that of the other precision)."""
    import dataclasses

    from creditgym.benchmarks.cli import UsageError
    from creditgym.benchmarks.run.identity import hashed_name

    smoke = sweep.load_sweep(REPO / "benchmarks/configs/smoke.toml", tmp_path)[0]
    config = dataclasses.replace(smoke, dtype="fast")
    here = resolve(config).identity["dtype"]
    other = "bfloat16-products" if here == "float32" else "float32"
    driver_name = hashed_name(resolve(config), {**resolve(config).identity, "dtype": other})
    with pytest.raises(UsageError, match=f"this node resolves dtype='fast' to {here}"):
        sweep.run_cell(config, driver_name)
    assert not any(tmp_path.iterdir())
