"""Leaderboard tables, plots and the sweep, built from real scripted-agent run folders."""

from __future__ import annotations

import csv
import io
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from creditgym.benchmarks import leaderboard as leaderboard_command
from creditgym.benchmarks import sweep
from creditgym.benchmarks.run import RunConfig, resolve, run
from creditgym.benchmarks.run import command as run_module
from creditgym.benchmarks.run.command import prepare_run_dir
from creditgym.benchmarks.run.identity import method_label
from creditgym.report import leaderboard, plots, records

SWEEP_TOML = """
[common]
env = "sysdiag"
credit = "none"
eval_episodes = 8
sample_group_size = 0

[[grid]]
model = "random"
seed = [0, 1, 2]

[[grid]]
model = "expert"
sample_group_size = 2
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """results/-like folder after one sweep: random x 3 seeds and the expert."""
    root = tmp_path_factory.mktemp("results")
    config = root / "sweep.toml"
    config.write_text(SWEEP_TOML)
    assert sweep.main(["--config", str(config), "--out", str(root / "runs")]) == 0
    return root


@pytest.mark.slow  # the `swept` fixture runs a sweep of four runs (45 s)
def test_sweep_runs_the_grid_then_skips_finished_runs(swept, capsys):
    assert len(records.run_dirs(swept / "runs")) == 4
    config = swept / "sweep.toml"
    assert sweep.main(["--config", str(config), "--out", str(swept / "runs"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 runs, 4 finished" in out and out.count("finished, skipped") == 4


@pytest.mark.slow  # the `swept` fixture runs a sweep of four runs
def test_sweep_shards_split_the_grid_without_overlap(swept, capsys):
    config = swept / "sweep.toml"
    names = []
    for shard in ("0/2", "1/2"):
        argv = ["--config", str(config), "--out", str(swept / "runs"), "--dry-run"]
        assert sweep.main([*argv, "--shard", shard]) == 0
        names.append({line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]})
    assert len(names[0]) == len(names[1]) == 2 and not names[0] & names[1]
    assert sweep.main(["--config", str(config), "--shard", "2/2", "--dry-run"]) == 2


def test_sweep_fault_families_become_tuples(tmp_path):
    document = {"common": {"faults": ["memory_leak", "cpu_hog"]}, "grid": [{"seed": [0]}]}
    assert sweep.expand(document, tmp_path)[0].faults == ("memory_leak", "cpu_hog")
    document = {"grid": [{"faults": ["memory_leak", "cpu_hog,fork_storm"]}]}
    assert [c.faults for c in sweep.expand(document, tmp_path)] == [
        ("memory_leak",),
        ("cpu_hog", "fork_storm"),
    ]


def test_sweep_option_strings_become_key_value_tuples(tmp_path):
    grid = {"env": "keydoor", "env_options": "delay=4 variance=high", "credit": "hcapo"}
    grid["credit_options"] = "do_no_harm=false gamma=1"
    (config,) = sweep.expand({"grid": [grid]}, tmp_path)
    assert config.env_options == ("delay=4", "variance=high")
    assert config.credit_options == ("do_no_harm=false", "gamma=1")


def test_sweep_rejects_unknown_option_with_suggestion(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('[[grid]]\nenv = "sysdiag"\neval_episode = 3\n')
    assert sweep.main(["--config", str(config), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "eval_episode" in err and "Did you mean eval_episodes" in err


def test_sweep_validates_every_run_before_starting_any(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('[[grid]]\nmodel = "expert"\ncredit = "none"\nenv = ["sysdiag", "alfwrld"]\n')
    assert sweep.main(["--config", str(config), "--out", str(tmp_path / "runs")]) == 2
    assert "Did you mean alfworld" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not records.run_dirs(tmp_path / "runs")


def per_seed_rates(root: Path, model: str) -> list[float]:
    return [
        100 * statistics.fmean(e.success for e in records.read_episodes(run_dir))
        for run_dir in records.run_dirs(root / "runs")
        if records.read_json(run_dir / records.CONFIG_FILE)["model"] == model
    ]


def row_of(table: leaderboard.Table, section: leaderboard.Section, **settings) -> str:
    """The one row key of `section` whose settings include `settings`."""
    (method,) = [m for m in section.methods if settings.items() <= dict(table.settings[m]).items()]
    return method


@pytest.mark.slow  # the `swept` fixture runs a sweep of four runs
def test_cells_are_mean_and_standard_error_over_seeds(swept):
    table = leaderboard.write_leaderboard(swept / "runs", swept)
    rates = per_seed_rates(swept, "random")
    (section,) = table.sections
    cell = table.cells[(section.task, row_of(table, section, model="random"), "test")]
    assert cell.n == 3
    assert cell.mean == pytest.approx(statistics.fmean(rates))
    assert cell.se == pytest.approx(statistics.stdev(rates) / math.sqrt(3))
    expert = row_of(table, section, model="expert")
    assert table.cells[(section.task, expert, "test")].text() == "100.0 (n=1)"


@pytest.mark.slow  # the `swept` fixture runs a sweep of four runs
def test_markdown_csv_and_html_agree_and_html_sorts_offline(swept):
    assert leaderboard_command.main(["--runs", str(swept / "runs")]) == 0  # out: the folder above
    markdown = (swept / "leaderboard.md").read_text()
    assert "| random | eval-only | none |" in markdown and "100.0 (n=1)" in markdown
    assert f"4 run folders in `{(swept / 'runs').as_posix()}/`" in markdown
    rows = list(csv.DictReader(io.StringIO((swept / "leaderboard.csv").read_text())))
    by_model = {row["model"]: row for row in rows}
    assert float(by_model["random"]["success_mean_pct"]) == pytest.approx(
        statistics.fmean(per_seed_rates(swept, "random")), abs=1e-4
    )
    assert by_model["random"]["n"] == "3" and by_model["expert"]["success_se_pct"] == ""
    page = (swept / "leaderboard.html").read_text()
    assert f"<code>{(swept / 'runs').as_posix()}/</code>" in page  # names its source
    assert 'class="sortable"' in page and "addEventListener" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched: works offline
    assert 'src="plots/credit_heatmap.png"' in page
    assert (swept / "plots" / "credit_heatmap.png").stat().st_size > 1000


@pytest.mark.slow  # the `swept` fixture runs a sweep of four runs
def test_comparison_says_when_a_method_is_not_distinguishable(swept):
    table = leaderboard.build_table(records.load_runs(swept / "runs"), swept / "runs")
    (line,) = leaderboard.comparisons(table, table.sections[0])
    assert line.startswith("- test: best expert (eval-only)")
    assert "cannot tell" in line  # the expert has one seed: no standard error to compare


def test_leaderboard_without_runs_is_one_line_error(tmp_path, capsys):
    assert leaderboard_command.main(["--runs", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "no finished run folders" in capsys.readouterr().err


def test_training_plots_and_stats_come_from_metrics(tmp_path):
    """A run folder with a trainer's metrics.jsonl gets curves and zero-grad statistics."""
    run_dir = run(resolve(RunConfig(env="sysdiag", model="random", credit="none", eval_episodes=2,
                            sample_group_size=0, out=tmp_path / "runs")))  # fmt: skip
    metrics = [
        {"step": step, "iteration": step - 1, "rollout/success_rate": rate,
         "charts/grad_norm_is_zero": zero, "rollout/num_trajectories": 16.0,
         "time/rollout_s": 2.0, "time/credit_s": 0.5, "time/train_s": 1.0}
        for step, rate, zero in [(1, 0.25, 1.0), (2, 0.5, 0.0), (3, 0.75, 0.0), (4, 1.0, 1.0)]
    ]  # fmt: skip
    with records.JsonlAppender(run_dir / records.METRICS_FILE) as sink:
        for record in metrics:
            sink.append(record)
    assert records.training_clock(metrics) == [3.5, 7.0, 10.5, 14.0]
    assert records.rollouts_used(metrics) == 64
    runs = records.load_runs(tmp_path / "runs")
    stats = leaderboard.build_table(runs, tmp_path / "runs").stats[(runs[0].env, runs[0].method)]
    assert stats["zero_grad_fraction"] == pytest.approx(0.5)
    drawn = plots.make_all(runs, tmp_path / "plots")
    assert {p.name for p in drawn.values()} == {
        "success_vs_steps.png",
        "success_vs_wallclock.png",
        "zero_grad_fraction.png",
    }


def test_runs_on_different_task_variants_never_share_a_column():
    def env_label(**config) -> str:
        return records.RunData(Path("."), config, (), (), None).env

    assert env_label(env_id="creditgym/SysDiag-v0", max_episode_steps=None) == "SysDiag-v0"
    assert env_label(env_id="creditgym/SysDiag-v0", max_episode_steps=6) == "SysDiag-v0[T=6]"
    assert (
        env_label(env_id="creditgym/SysDiag-v0", faults=["memory_leak"], max_episode_steps=1)
        == "SysDiag-v0[memory_leak, T=1]"
    )


@pytest.mark.slow  # a fresh interpreter running the sweep command
def test_sweep_piped_into_a_closed_reader_exits_without_a_traceback(swept):
    command = [sys.executable, "-m", "benchmarks.sweep", "--config", str(swept / "sweep.toml")]
    command += ["--out", str(swept / "runs"), "--dry-run"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # like `| head -0`: every write hits a closed pipe
    _, err = process.communicate(timeout=120)
    assert b"Traceback" not in err and process.returncode == 1


def made_up_run(out: Path, successes: Sequence[bool], finished: bool = True, **options) -> Path:
    """A run folder as `benchmarks.run` writes it (config.json from `prepare_run_dir`) with
    made-up evaluation episodes, so the leaderboard's grouping is checked without
    training."""
    cfg = RunConfig(out=out, sample_group_size=0, **options)
    run_dir = prepare_run_dir(resolve(cfg))
    env_id = records.read_json(run_dir / records.CONFIG_FILE)["env_id"]
    with records.JsonlAppender(run_dir / records.EPISODES_FILE) as sink:
        for index, success in enumerate(successes):
            episode = records.EpisodeRecord(
                index=index, env=env_id, split="test", task_id=f"task{index}", task_type="",
                seed=index, method=method_label(resolve(cfg)), success=success,
                episode_return=float(success), steps=2, truncated=False, tokens=0,
            )  # fmt: skip
            sink.append(episode.to_dict())
    if finished:
        records.atomic_write_json(run_dir / records.DONE_FILE, {"summary": [], "train_step": 0})
    return run_dir


def test_an_unfinished_run_is_left_out_and_named(tmp_path, capsys):
    made_up_run(tmp_path, [True, True], env="sysdiag", model="random", credit="none", seed=0)
    partial = made_up_run(
        tmp_path, [False], finished=False, env="sysdiag", model="random", credit="none", seed=1
    )
    loaded = [run.run_dir for run in records.load_runs(tmp_path)]
    assert len(loaded) == 1 and partial not in loaded
    assert records.unfinished_runs(tmp_path) == [partial]
    table = leaderboard.write_leaderboard(tmp_path, tmp_path / "board")
    assert "left out 1 unfinished run folder(s)" in capsys.readouterr().out
    # only the finished run's two successes count: 100 %, not 2 of 3
    (cell,) = table.cells.values()
    assert cell.n == 1 and cell.mean == 100.0


def test_runs_differing_only_in_learning_rate_are_two_rows_not_seeds(tmp_path):
    trained = {"env": "sysdiag", "model": "tiny", "credit": "grpo"}
    made_up_run(tmp_path, [True, True], learning_rate=1e-3, seed=0, **trained)
    made_up_run(tmp_path, [True, False], learning_rate=1e-3, seed=1, **trained)
    made_up_run(tmp_path, [False, False], learning_rate=1e-4, seed=0, **trained)
    table = leaderboard.build_table(records.load_runs(tmp_path), tmp_path)
    (section,) = table.sections
    assert len(section.methods) == 2 and section.varying == ("learning_rate",)
    fast = table.cells[(section.task, row_of(table, section, learning_rate=1e-3), "test")]
    slow = table.cells[(section.task, row_of(table, section, learning_rate=1e-4), "test")]
    assert (fast.mean, fast.n) == (75.0, 2) and (slow.mean, slow.n) == (0.0, 1)
    markdown = leaderboard.render_markdown(table, {})
    assert "| learning_rate |" in markdown.replace(" | test |", " |")
    assert "| 0.001 |" in markdown and "| 0.0001 |" in markdown


def test_seeds_column_counts_the_runs_of_one_task_only(tmp_path):
    scripted = {"model": "random", "credit": "none"}
    for seed in (0, 1):
        made_up_run(tmp_path, [False, True], env="sysdiag", seed=seed, **scripted)
    made_up_run(tmp_path, [False], env="alfworld", seed=0, **scripted)
    table = leaderboard.build_table(records.load_runs(tmp_path), tmp_path)
    seeds = {section.task.split("[")[0]: table.stats[(section.task, method)]["seeds"]
             for section in table.sections for method in section.methods}  # fmt: skip
    assert seeds == {"SysDiag-v0": 2, "ALFWorld-v0": 1}


def test_two_folders_of_one_configuration_and_seed_are_refused(tmp_path, capsys):
    # An eval-only run ignores --steps, so these two are one configuration and one seed.
    made_up_run(tmp_path, [True], env="sysdiag", model="random", credit="none", steps=1)
    made_up_run(tmp_path, [True], env="sysdiag", model="random", credit="none", steps=2)
    assert (
        leaderboard_command.main(["--runs", str(tmp_path), "--out", str(tmp_path / "board")]) == 2
    )
    assert "same configuration and seed" in capsys.readouterr().err
    assert not (tmp_path / "board" / "leaderboard.md").exists()


def test_reused_name_with_another_configuration_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch
):
    common = ["--env", "sysdiag", "--credit", "none", "--eval-episodes", "2"]
    common += ["--sample-group-size", "0", "--name", "mine", "--out", str(tmp_path)]
    assert run_module.main(["--model", "random", *common]) == 0
    run_dir = tmp_path / "mine"
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    capsys.readouterr()

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the run folder was checked")

    monkeypatch.setattr(run_module, "load_run_policy", no_model)
    assert run_module.main(["--model", "tiny", *common]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds another configuration" in err
    assert "model random there, tiny here" in err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before  # nothing relabelled
    assert run_module.main(["--model", "random", *common, "--eval-episodes", "3"]) == 0
    assert len(records.read_episodes(run_dir)) == 3  # the same configuration resumes


def comparison_table(best_runs, other_runs):
    """A one-task table of two rows with the given per-seed success %."""
    settings = {
        name: {"model": "small", "trainer": "policy_gradient", "credit": name,
               "group_size": 8, "steps": 20}
        for name in ("grpo", "hcapo")
    }  # fmt: skip
    cells = {
        ("T", name, "test"): leaderboard.Cell(statistics.fmean(runs), None, len(runs), tuple(runs))
        for name, runs in (("grpo", best_runs), ("hcapo", other_runs))
    }
    section = leaderboard.Section(
        task="T", columns=("test",), task_type_columns=(), methods=("grpo", "hcapo"),
        shared={}, varying=(),
    )  # fmt: skip
    table = leaderboard.Table(
        source=Path("runs"), run_count=6, sections=(section,), settings=settings,
        cells=cells, stats={},
    )  # fmt: skip
    return table, section


def test_a_lead_is_real_only_when_the_improvement_interval_clears_one_half():
    # Every seed of grpo above every seed of hcapo: P(grpo > hcapo) = 1, interval [1, 1].
    table, section = comparison_table([90.0, 95.0, 100.0], [10.0, 20.0, 30.0])
    (line,) = leaderboard.comparisons(table, section)
    assert "beats every other row" in line
    # Overlapping seeds: a 5-point lead in the means is not shown to be real.
    table, section = comparison_table([60.0, 20.0, 90.0], [50.0, 30.0, 70.0])
    (line,) = leaderboard.comparisons(table, section)
    assert "is not shown to beat small policy_gradient+hcapo" in line and "P = 0.56" in line
    # Two seeds are too few for a verdict either way.
    table, section = comparison_table([90.0, 100.0], [10.0, 20.0])
    (line,) = leaderboard.comparisons(table, section)
    assert "cannot tell" in line


def test_a_setting_the_training_rows_differ_in_is_a_column_not_a_shared_setting():
    base = {"model": "small", "trainer": "policy_gradient", "credit": "gigpo", "group_size": 8,
            "steps": 20, "learning_rate": 0.003, "credit_convention": "creditgym"}  # fmt: skip
    peer = {**base, "credit_convention": "verl-agent"}
    untrained = {"model": "small", "trainer": "eval-only", "credit": "none",
                 "group_size": 0, "steps": 0}  # fmt: skip
    shared, varying = leaderboard.split_settings([base, peer, untrained])
    assert varying == ("credit_convention",) and shared == {"learning_rate": 0.003}
    assert records.setting_text(base, "credit_convention") == "creditgym"
    assert records.setting_text(untrained, "credit_convention") == "–"
    assert records.setting_text({**base, "learning_rate": None}, "learning_rate") == "default"
