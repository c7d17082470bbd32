"""Leaderboard tables, plots and the sweep, built from real scripted-agent run folders."""

from __future__ import annotations

import csv
import io
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import leaderboard, plots, records, sweep
from benchmarks.run import RunConfig, run

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


def test_sweep_runs_the_grid_then_skips_finished_runs(swept, capsys):
    assert len(records.run_dirs(swept / "runs")) == 4
    config = swept / "sweep.toml"
    assert sweep.main(["--config", str(config), "--out", str(swept / "runs"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 runs, 4 finished" in out and out.count("finished, skipped") == 4


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


def test_cells_are_mean_and_standard_error_over_seeds(swept):
    table = leaderboard.write_leaderboard(swept / "runs", swept)
    rates = per_seed_rates(swept, "random")
    random_method = next(m for m in table.methods if m[0] == "random")
    cell = table.cells[(random_method, "SysDiag-v0[T=5]/test")]
    assert cell.n == 3
    assert cell.mean == pytest.approx(statistics.fmean(rates))
    assert cell.se == pytest.approx(statistics.stdev(rates) / math.sqrt(3))
    expert_method = next(m for m in table.methods if m[0] == "expert")
    assert table.cells[(expert_method, "SysDiag-v0[T=5]/test")].text() == "100.0 (n=1)"


def test_markdown_csv_and_html_agree_and_html_sorts_offline(swept):
    leaderboard.write_leaderboard(swept / "runs", swept)
    markdown = (swept / "leaderboard.md").read_text()
    assert "| random | eval-only | none |" in markdown and "100.0 (n=1)" in markdown
    rows = list(csv.DictReader(io.StringIO((swept / "leaderboard.csv").read_text())))
    by_model = {row["model"]: row for row in rows}
    assert float(by_model["random"]["success_mean_pct"]) == pytest.approx(
        statistics.fmean(per_seed_rates(swept, "random")), abs=1e-4
    )
    assert by_model["random"]["n"] == "3" and by_model["expert"]["success_se_pct"] == ""
    page = (swept / "leaderboard.html").read_text()
    assert 'class="sortable"' in page and "addEventListener" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched: works offline
    assert 'src="plots/credit_heatmap.png"' in page
    assert (swept / "plots" / "credit_heatmap.png").stat().st_size > 1000


def test_comparison_says_when_a_method_is_not_distinguishable(swept):
    table = leaderboard.build_table(records.load_runs(swept / "runs"))
    (line,) = leaderboard.comparisons(table)
    assert line.startswith("- SysDiag-v0[T=5]/test: best expert (eval-only)")
    assert "cannot tell" in line  # the expert has one seed: no standard error to compare


def test_leaderboard_without_runs_is_one_line_error(tmp_path, capsys):
    assert leaderboard.main(["--runs", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "no run folders" in capsys.readouterr().err


def test_training_plots_and_stats_come_from_metrics(tmp_path):
    """A run folder with a trainer's metrics.jsonl gets curves and zero-grad statistics."""
    run_dir = run(RunConfig(env="sysdiag", model="random", credit="none", eval_episodes=2,
                            sample_group_size=0, out=tmp_path / "runs"))  # fmt: skip
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
    stats = leaderboard.build_table(runs).stats[runs[0].method]
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


def test_sweep_piped_into_a_closed_reader_exits_without_a_traceback(swept):
    command = [sys.executable, "-m", "benchmarks.sweep", "--config", str(swept / "sweep.toml")]
    command += ["--out", str(swept / "runs"), "--dry-run"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # like `| head -0`: every write hits a closed pipe
    _, err = process.communicate(timeout=120)
    assert b"Traceback" not in err and process.returncode == 1
