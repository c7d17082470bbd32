"""`python -m benchmarks.run`: bad input, run folders, and resume after SIGKILL."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from creditgym.benchmarks.run import RunConfig, main, parse_config, resolve, run
from creditgym.benchmarks.run.samples import write_samples
from creditgym.report import records

REPO = Path(__file__).resolve().parent.parent


def scripted(out: Path, **overrides) -> RunConfig:
    """A fast eval-only configuration of a scripted agent on SysDiag."""
    fields = {"env": "sysdiag", "model": "random", "credit": "none", "eval_episodes": 6}
    fields = {**fields, "sample_group_size": 0}  # samples score with a model: one test only
    return RunConfig(out=out, **{**fields, **overrides})


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--env", "sysdaig"], "Did you mean sysdiag"),
        (["--credit", "grop", "--model", "random"], "Did you mean grpo"),
        (["--model", "random", "--split", "in_distributon"], "valid: test"),
        (["--trainer", "policy_gradiant"], "Did you mean policy_gradient"),
        (["--model", "expert", "--credit", "grpo"], "cannot be trained"),
    ],
)
def test_bad_names_give_one_line_and_suggestions(argv, expected, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert expected in one_error_line(capsys)


def test_unreadable_model_path_is_one_line_and_leaves_no_run_folder(capsys, tmp_path):
    argv = ["--model", str(tmp_path / "no-such-model"), "--out", str(tmp_path / "runs")]
    assert main(argv) == 2
    assert "no-such-model" in one_error_line(capsys)
    # Refused before any work: not even --out is created.
    assert not (tmp_path / "runs").exists()


def test_unwritable_out_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["--model", "expert", "--credit", "none", "--out", str(blocker / "runs")]) == 2
    assert "cannot be written" in one_error_line(capsys)


def test_preset_sets_defaults_and_flags_still_override():
    paper = parse_config(["--preset", "paper"])
    assert (paper.steps, paper.max_episode_steps, paper.eval_temperature) == (150, 50, 0.4)
    assert parse_config(["--preset", "paper", "--steps", "3"]).steps == 3
    assert parse_config([]).steps == RunConfig().steps


def test_group_size_defaults_to_one_for_hp_rlvr_only():
    hp = RunConfig(credit="hp_rlvr", model="tiny")
    grpo = RunConfig(credit="grpo", model="tiny")
    assert "G1" in resolve(hp).name and "G8" in resolve(grpo).name
    assert resolve(RunConfig(credit="hp_rlvr", group_size=1, model="tiny")).name == resolve(hp).name


@pytest.mark.slow  # a whole run; its samples score every credit module with `tiny` (35 s)
def test_run_folder_holds_config_provenance_episodes_and_samples(tmp_path):
    run_dir = run(resolve(scripted(tmp_path, model="expert", sample_group_size=2)))
    config = records.read_json(run_dir / records.CONFIG_FILE)
    assert config["env_id"] == "creditgym/SysDiag-v0" and config["method_trainer"] == "eval-only"
    provenance = records.read_json(run_dir / records.PROVENANCE_FILE)
    assert provenance["packages"]["gymnasium"] and len(provenance["git"]["commit"]) == 40
    episodes = records.read_episodes(run_dir)
    assert [e.index for e in episodes] == list(range(6))
    assert all(e.success and e.split == "test" and e.task_type for e in episodes)
    assert len({e.seed for e in episodes}) == 6
    line = json.loads((run_dir / records.EPISODES_FILE).read_text().splitlines()[0])
    assert {"env", "split", "task_id", "task_type", "seed", "method", "success", "return",
            "steps", "truncated", "tokens"} <= set(line)  # fmt: skip
    samples = list(records.iter_jsonl(run_dir / records.SAMPLES_FILE))
    assert len(samples) == 2
    for sample in samples:
        steps = len(sample["trajectory"]["steps"])
        assert {"grpo", "gigpo", "hcapo", "hp_rlvr", "rule_based"} <= set(sample["credit"])
        assert all(len(values) == steps for values in sample["credit"].values())
    assert (run_dir / records.DONE_FILE).exists()


def test_expert_beats_random_on_the_same_tasks(tmp_path):
    expert = records.read_episodes(
        run(resolve(scripted(tmp_path, model="expert", eval_episodes=10)))
    )
    rand = records.read_episodes(run(resolve(scripted(tmp_path, eval_episodes=10))))
    assert [e.task_id for e in expert] == [e.task_id for e in rand]  # same evaluation tasks
    assert sum(e.success for e in expert) == 10 > sum(e.success for e in rand)


def test_rerun_extends_without_repeating_and_repairs_a_torn_line(tmp_path):
    run_dir = run(resolve(scripted(tmp_path, eval_episodes=4)))
    first = (run_dir / records.EPISODES_FILE).read_text()
    with open(run_dir / records.EPISODES_FILE, "a") as handle:
        handle.write('{"index": 4, "env": "torn')  # what a kill mid-write leaves
    assert run(resolve(scripted(tmp_path, eval_episodes=7))) == run_dir
    text = (run_dir / records.EPISODES_FILE).read_text()
    assert text.startswith(first)
    assert [e.index for e in records.read_episodes(run_dir)] == list(range(7))


@pytest.mark.slow  # three fresh interpreters importing torch
def test_sigkill_mid_evaluation_then_rerun_loses_and_repeats_nothing(tmp_path):
    episodes = 200
    argv = [
        sys.executable,
        "-m",
        "benchmarks.run",
        "--env",
        "sysdiag",
        "--model",
        "random",
        "--credit",
        "none",
        "--eval-episodes",
        str(episodes),
        "--sample-group-size",
        "0",
    ]
    killed_out, clean_out = tmp_path / "killed", tmp_path / "clean"
    process = subprocess.Popen(
        [*argv, "--out", str(killed_out)], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    path = None
    while time.monotonic() < deadline and process.poll() is None:
        found = list(killed_out.glob(f"*/{records.EPISODES_FILE}"))
        if found and found[0].read_text().count("\n") >= 20:
            path = found[0]
            break
        time.sleep(0.01)
    assert path is not None, "the run ended or stalled before 20 episodes were written"
    process.send_signal(signal.SIGKILL)
    process.wait()
    written = len(records.read_episodes(path.parent))
    assert 20 <= written < episodes, "the kill did not land mid-evaluation"

    subprocess.run([*argv, "--out", str(killed_out)], cwd=REPO, check=True, capture_output=True)
    subprocess.run([*argv, "--out", str(clean_out)], cwd=REPO, check=True, capture_output=True)
    resumed = records.read_episodes(path.parent)
    clean = records.read_episodes(clean_out / path.parent.name)
    assert [e.index for e in resumed] == list(range(episodes))
    assert resumed == clean  # the same episodes an uninterrupted run plays


@pytest.mark.slow  # trains `tiny` for one iteration and evaluates it through batched rollouts
def test_training_run_writes_metrics_then_a_rerun_reuses_the_trained_policy(tmp_path):
    config = RunConfig(env="sysdiag", model="tiny", credit="grpo", steps=1, group_size=2,
                       tasks_per_step=1, eval_episodes=2, max_episode_steps=3,
                       sample_group_size=2, out=tmp_path)  # fmt: skip
    run_dir = run(resolve(config))
    training = records.read_json(run_dir / records.TRAINING_FILE)
    metrics = records.read_metrics(run_dir)
    # equal_rollouts batching: 1 task x G=8 rollouts worth, i.e. 4 tasks x G=2.
    assert training["rollouts"] == 8 and training["optimizer_steps"] == len(metrics) == 1
    assert "charts/grad_norm_is_zero" in metrics[0] and training["wall_seconds"] > 0
    episodes = records.read_episodes(run_dir)
    assert len(episodes) == 2 and all(e.tokens > 0 and e.train_step == 1 for e in episodes)
    assert episodes[0].method == "tiny policy_gradient+grpo G=2 1 steps"
    samples = list(records.iter_jsonl(run_dir / records.SAMPLES_FILE))
    assert len(samples) == 2 and samples[0]["credit_model"] == "tiny"

    # A rerun asking for more episodes evaluates the exported policy: no retraining.
    stamp = (run_dir / records.TRAINING_FILE).stat().st_mtime_ns
    run(resolve(dataclasses.replace(config, eval_episodes=3)))
    assert (run_dir / records.TRAINING_FILE).stat().st_mtime_ns == stamp
    assert records.read_metrics(run_dir) == metrics
    assert [e.index for e in records.read_episodes(run_dir)] == [0, 1, 2]


@pytest.mark.slow  # samples scored by every credit module with `tiny`, six times (48 s)
def test_samples_score_the_runs_own_module_with_its_convention(tmp_path):
    # The random agent's KeyDoor group has different returns (apple noise), so the GRPO
    # conventions differ:
    # TRL divides by the unbiased std + 1e-4, creditgym by the population std.
    def samples(**settings):
        cfg = scripted(tmp_path, env="keydoor", credit="none", sample_group_size=4)
        cfg = dataclasses.replace(cfg, **settings)
        run_dir = tmp_path / "samples" / str(sorted(settings.items()))
        run_dir.mkdir(parents=True)
        write_samples(resolve(cfg), run_dir, None)
        return list(records.iter_jsonl(run_dir / records.SAMPLES_FILE))

    default = samples()
    trl = samples(credit="grpo", credit_convention="trl")
    assert default[0]["credit_settings"] == {}
    assert trl[0]["credit_settings"] == {"grpo": {"convention": "trl", "options": {}}}
    returns = {sum(step["reward"] for step in s["trajectory"]["steps"]) for s in default}
    assert len(returns) > 1, "the check needs a group whose returns differ"
    grpo = [s["credit"]["grpo"] for s in default]
    assert [s["credit"]["grpo"] for s in trl] != grpo  # the run's own settings
    assert [s["credit"]["gigpo"] for s in trl] == [s["credit"]["gigpo"] for s in default]
