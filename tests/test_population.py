"""Population runs (`benchmarks.run --population K`, benchmarks/run/population.py): each
member's folder is its single run's, whatever K and its co-members; a kill -9 and a rerun
leave every member as an uninterrupted run; overlapping invocations are refused; a
failing member is one line and the others finish."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import traceback
from pathlib import Path

import pytest
import ray
import torch
from safetensors.torch import load_file

from creditgym.benchmarks import lock, sweep
from creditgym.benchmarks.run import RunConfig, main, parse_config, resolve, run_population
from creditgym.benchmarks.run.population import group_into_populations, member_plans
from creditgym.report import records

# `small` on KeyDoor delay 4: two iterations of 8 rollouts, a learning curve, samples and
# one evaluation batch: every file a run writes, in a few seconds.
ARGV = [
    "--env", "keydoor", "--env-options", "delay=4", "variance=high", "--model", "small",
    "--credit", "grpo", "--steps", "2", "--learning-rate", "3e-3", "--max-new-tokens", "8",
    "--eval-episodes", "8", "--eval-batch-size", "8", "--eval-every", "1",
    "--curve-episodes", "4", "--sample-group-size", "2", "--threads", "1",
]  # fmt: skip
# Fields measured on the wall clock: they differ between any two runs.
CLOCK_FIELDS = ("time/", "rollout/tokens_per_s", "eval_s")
# Written whole by the run, decided by its seed alone: byte for byte.
SAME_BYTES = (
    records.EPISODES_FILE,
    records.EVAL_TRAJECTORIES_FILE,
    records.SAMPLES_FILE,
    records.DONE_FILE,
)


def argv(out: Path, seed: int, population: int | None = None) -> list[str]:
    extra = [] if population is None else ["--population", str(population)]
    return [*ARGV, "--seed", str(seed), "--out", str(out), *extra]


def folder(out: Path, seed: int) -> Path:
    """The run folder of `seed`'s single run under `out`."""
    return out / resolve(parse_config(argv(out, seed))).name


def without_clock(path: Path) -> list[dict]:
    return [
        {key: value for key, value in record.items() if not key.startswith(CLOCK_FIELDS)}
        for record in map(json.loads, path.read_text().splitlines())
    ]


def assert_same_run(run_dir: Path, reference: Path) -> None:
    """`run_dir` holds what the single run `reference` wrote: the same name, records,
    configuration (but `out`) and final weights bit for bit."""
    assert run_dir.name == reference.name
    for name in SAME_BYTES:
        assert (run_dir / name).read_bytes() == (reference / name).read_bytes(), name
    for name in (records.METRICS_FILE, records.CURVE_FILE):
        assert without_clock(run_dir / name) == without_clock(reference / name), name
    config, expected = (records.read_json(d / records.CONFIG_FILE) for d in (run_dir, reference))
    assert {**config, "out": None} == {**expected, "out": None}
    weights, want = (load_file(d / "final" / "model.safetensors") for d in (run_dir, reference))
    assert weights.keys() == want.keys()
    assert all(torch.equal(weights[name], want[name]) for name in weights)


@pytest.fixture(scope="module")
def single_runs(tmp_path_factory) -> Path:
    """The single runs of seeds 0 and 1 (today's path: one run per seed)."""
    out = tmp_path_factory.mktemp("single")
    for seed in (0, 1):
        assert main(argv(out, seed)) == 0
    return out


@pytest.mark.slow  # five member runs of `small` beside the two single runs: ~1 min
def test_a_member_is_its_single_run_whatever_the_population_size_and_co_members(
    single_runs, tmp_path
):
    reference = folder(single_runs, 1)
    # Seed 1 alone, second of {0, 1}, first of {1, 2}. The command line runs a population
    # of one as the single run itself: the population's path is called directly for it.
    for first, size in ((1, 1), (0, 2), (1, 2)):
        out = tmp_path / f"seeds{first}-{first + size - 1}"
        if size == 1:
            outcomes = run_population(resolve(parse_config(argv(out, first, size))))
            assert [(o.seed, o.status) for o in outcomes] == [(1, 0)]
        else:
            assert main(argv(out, first, size)) == 0
        assert sorted(p.name for p in out.iterdir()) == sorted(
            folder(out, seed).name for seed in range(first, first + size)
        )
        assert_same_run(folder(out, 1), reference)
        provenance = records.read_json(folder(out, 1) / records.PROVENANCE_FILE)
        assert provenance["population"]["seeds"] == list(range(first, first + size))
        # The command that replays the population (a population of one is the single run).
        command = provenance["population"]["command"]
        assert (
            command.endswith(f"--population {size}") if size > 1 else "--population" not in command
        )
    assert_same_run(folder(tmp_path / "seeds0-1", 0), folder(single_runs, 0))


def test_members_are_the_single_runs_of_consecutive_seeds_with_their_names():
    cfg = parse_config(argv(Path("out"), 5, 3))
    members = member_plans(resolve(cfg))
    assert [m.config.seed for m in members] == [5, 6, 7]
    assert all(m.config.population == 1 and m.seeds == (m.config.seed,) for m in members)
    # The population size is not part of a run's identity: a member is named as its run.
    assert [m.name for m in members] == [
        resolve(parse_config(argv(Path("out"), seed))).name for seed in (5, 6, 7)
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--population", "0"], "--population must be >= 1 (got 0)"),
        (["--population", "2", "--name", "mine"], "--name names one run folder"),
    ],
)
def test_a_population_that_cannot_run_is_one_line_and_exit_2(extra, message, tmp_path, capsys):
    assert main([*ARGV, "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not any(tmp_path.iterdir())


def test_a_population_overlapping_a_held_seed_is_refused_before_any_work(tmp_path, capsys):
    held = folder(tmp_path, 1)
    with lock.hold(lock.run_folder_lock(held), str(held)):
        assert main(argv(tmp_path, 0, 2)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{held} is being written by pid {os.getpid()}" in err
    # Seed 0's lock was taken first and given back: its folder is gone, nothing was run.
    assert not folder(tmp_path, 0).exists()
    assert list(held.iterdir()) == []  # the folder this test's lock made, left empty


def test_a_member_with_a_damaged_checkpoint_is_one_line_and_the_others_finish(tmp_path, capsys):
    # Seed 0 trained, then as if killed before its export, with every checkpoint cut
    # short (a disk error): its resume finds none that loads.
    assert main(argv(tmp_path, 0)) == 0
    run_dir = folder(tmp_path, 0)
    for name in (records.TRAINING_FILE, records.DONE_FILE, records.EPISODES_FILE):
        (run_dir / name).unlink()
    shutil.rmtree(run_dir / "final")
    checkpoints = sorted((run_dir / "checkpoints").glob("step_*/state.pt"))
    assert checkpoints
    for state in checkpoints:
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    capsys.readouterr()
    assert main(argv(tmp_path, 0, 2)) == 2  # a damaged file is bad input, as in a single run
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: seed 0 stopped: none of the {len(checkpoints)} checkpoints in "
        f"{run_dir / 'checkpoints'} loads (the lines above name each); to train this run "
        f"afresh, delete {run_dir / 'checkpoints'} and run the same command again"
    ]
    assert "Traceback" not in captured.err
    assert not (run_dir / records.DONE_FILE).exists()
    assert (folder(tmp_path, 1) / records.DONE_FILE).exists()
    assert "2/2 members ended, 1 stopped; mean held-out success" in captured.out


def start(out: Path) -> int:
    """Fork a child running the population of seeds 0 and 1 into `out`; its pid."""
    pid = os.fork()
    if pid == 0:  # the child: the command, its output discarded, never back to pytest
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            code = main(argv(out, 0, 2))
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.slow  # three killed attempts and a final one, beside the two single runs: ~1 min
def test_kill_9_in_either_member_then_rerun_leaves_each_as_its_uninterrupted_run(
    single_runs, tmp_path
):
    torch.set_num_threads(1)
    out = tmp_path / "killed"
    first, second = folder(out, 0), folder(out, 1)
    # Killed in member 0's training, member 1's training and member 1's evaluation.
    moments = [
        lambda: lines(first / records.METRICS_FILE) >= 1,
        lambda: lines(second / records.METRICS_FILE) >= 1,
        lambda: lines(second / records.EPISODES_FILE) >= 1,
    ]
    for moment in moments:
        pid = start(out)
        deadline = time.monotonic() + 120
        while not moment():
            assert time.monotonic() < deadline, "the kill moment never came"
            ended, _ = os.waitpid(pid, os.WNOHANG)
            assert not ended, "the population ended before its kill moment"
            time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not (second / records.DONE_FILE).exists()
    pid = start(out)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for seed, run_dir in ((0, first), (1, second)):
        assert_same_run(run_dir, folder(single_runs, seed))


# Every credit module the studies rank or list as oracles (benchmarks/configs/study_fair.toml),
# with the options their rows name.
STUDY_MODULES = [
    ("grpo", ()),
    ("gigpo", ()),
    ("hcapo", ()),
    ("hcapo", ("clip=1,1",)),
    ("hp_rlvr", ()),
    ("hp_rlvr", ("weights=uniform",)),
    ("rule_based", ()),
    ("oracle", ()),
    ("credit.exact_source:HCAPOExact", ()),
    ("credit.exact_source:HCAPOSeedExact", ()),
    ("credit.exact_source:HPRLVRExact", ()),
    ("hca", ()),
]
# Modules that score hindsight with the policy: each member must score with its own weights.
MODEL_SCORED = ("hcapo", "hp_rlvr")


@pytest.mark.slow  # 2-3 one-iteration runs of `small` per module: ~10 s each
@pytest.mark.parametrize(("credit", "options"), STUDY_MODULES)
def test_every_study_module_trains_in_a_population(credit, options, tmp_path):
    module_argv = [
        "--env", "keydoor", "--env-options", "delay=4", "variance=high", "--model", "small",
        "--credit", credit, "--steps", "1", "--learning-rate", "3e-3", "--max-new-tokens", "8",
        "--eval-episodes", "4", "--eval-batch-size", "4", "--threads", "1",
        *(["--credit-options", *options] if options else []),
    ]  # fmt: skip
    population_out, single_out = tmp_path / "population", tmp_path / "single"
    population = [*module_argv, "--population", "2", "--out", str(population_out)]
    assert main(population) == 0
    members = member_plans(resolve(parse_config(population)))
    for member in members:
        run_dir = population_out / member.name
        assert (run_dir / records.DONE_FILE).exists()
        (metrics,) = records.read_metrics(run_dir)
        assert torch.isfinite(torch.tensor(metrics["losses/total"]))
    if credit in MODEL_SCORED:
        assert main([*module_argv, "--seed", "1", "--out", str(single_out)]) == 0
        # Its credit metrics (and the samples' hindsight credit) are its single run's.
        name = members[1].name
        assert without_clock(population_out / name / records.METRICS_FILE) == without_clock(
            single_out / name / records.METRICS_FILE
        )
        assert (population_out / name / records.SAMPLES_FILE).read_bytes() == (
            single_out / name / records.SAMPLES_FILE
        ).read_bytes()


def test_a_sweep_groups_consecutive_seeds_of_one_configuration_into_populations():
    def config(seed: int, credit: str = "grpo", name: str | None = None) -> RunConfig:
        return RunConfig(env="keydoor", model="small", credit=credit, seed=seed, name=name)

    configs = [config(s) for s in (0, 1, 2, 3, 4, 6)] + [config(0, "gigpo"), config(2, "gigpo")]
    configs += [config(7, name="mine"), config(8, name="mine")]  # named runs stay alone
    runs = [resolve(c) for c in configs]
    grouped = group_into_populations(runs, 3)
    assert [(p.config.credit, p.seeds, p.config.population, p.config.name) for p in grouped] == [
        ("grpo", (0, 1, 2), 3, None),
        ("grpo", (3, 4), 2, None),
        ("grpo", (6,), 1, None),
        ("gigpo", (0,), 1, None),
        ("gigpo", (2,), 1, None),
        ("grpo", (7,), 1, "mine"),
        ("grpo", (8,), 1, "mine"),
    ]
    # The same runs, every one alone at a population size of 1.
    assert group_into_populations(runs, 1) == runs


SCRIPTED_SWEEP = """
[common]
env = "sysdiag"
model = "random"
credit = "none"
eval_episodes = 2
sample_group_size = 0

[[grid]]
seed = [0, 1, 2]
"""


def test_a_sweep_in_populations_writes_the_run_folders_of_one_in_single_runs(tmp_path, capsys):
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(SCRIPTED_SWEEP)
    argv = ["--config", str(sweep_file), "--no-leaderboard"]
    assert sweep.main([*argv, "--out", str(tmp_path / "single"), "--population", "1"]) == 0
    assert sweep.main([*argv, "--out", str(tmp_path / "grouped"), "--population", "2"]) == 0
    out = capsys.readouterr().out
    assert "(population of 2, seeds 0-1): running" in out
    single, grouped = (sorted((tmp_path / d).iterdir()) for d in ("single", "grouped"))
    assert [p.name for p in single] == [p.name for p in grouped]
    for one, member in zip(single, grouped, strict=True):
        assert (member / records.EPISODES_FILE).read_bytes() == (
            one / records.EPISODES_FILE
        ).read_bytes()
    populations = [
        records.read_json(member / records.PROVENANCE_FILE).get("population", {}).get("seeds")
        for member in grouped
    ]
    assert populations == [[0, 1], [0, 1], None]


@pytest.mark.slow  # a local Ray whose workers import benchmarks.run: ~1-2 min
def test_a_ray_sweep_runs_each_population_as_one_task_into_the_local_run_folders(tmp_path, capsys):
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(SCRIPTED_SWEEP)
    argv = ["--config", str(sweep_file), "--no-leaderboard", "--population", "2"]
    assert sweep.main([*argv, "--out", str(tmp_path / "local")]) == 0
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert sweep.main([*argv, "--out", str(tmp_path / "ray"), "--executor", "ray"]) == 0
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    # Two tasks: seeds 0-1 as one population, seed 2 alone.
    assert out.count("submitted ") == 2
    assert "(population of 2, seeds 0-1)" in out
    local, on_ray = (sorted((tmp_path / d).iterdir()) for d in ("local", "ray"))
    assert [p.name for p in local] == [p.name for p in on_ray]
    for one, member in zip(local, on_ray, strict=True):
        for name in (records.EPISODES_FILE, records.EVAL_TRAJECTORIES_FILE):
            assert (member / name).read_bytes() == (one / name).read_bytes()
