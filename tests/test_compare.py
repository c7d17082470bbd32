"""`python -m benchmarks.compare` (benchmarks/compare.py, report/comparison.py): a
user's module on the plan's grpo cells, grpo runs of equal identity reused, the cost
printed first, and verdicts that agree with the paired analysis worked out here."""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from creditgym.benchmarks.compare import finished_run, main, plan_cells
from creditgym.benchmarks.run import resolve
from creditgym.benchmarks.sweep import load_sweep
from creditgym.report import comparison, records
from creditgym.report.stats import Interval
from examples.discounted_credit import DiscountedGroupReturn, DiscountedGroupReturnOptions
from tests.credit_cases import scripted_trajectory

EXAMPLE = "examples.discounted_credit:DiscountedGroupReturn"
PLAN = Path("benchmarks/configs/study_decisive.toml")
SUBSET = Path("benchmarks/configs/compare.toml")
# One cell (KeyDoor delay 4, return channel) planned at seeds 0-3, as small as a run with a
# learning curve gets: two iterations of `small`, 8 held-out episodes.
TINY_PLAN = """
[common]
model = "small"
steps = 2
learning_rate = 3e-3
max_new_tokens = 8
constrained = true
eval_episodes = 8
eval_batch_size = 8
eval_every = 1
curve_episodes = 4
sample_group_size = 2

[[grid]]
env = "keydoor"
seed = [0, 1, 2, 3]
env_options = "delay=4 variance=high verdict_feedback=false"
credit = ["grpo", "hcapo"]
"""


def test_the_plans_cells_are_its_grpo_rows_at_the_planned_seeds_and_compare_toml_a_subset():
    cells = plan_cells(load_sweep(PLAN, None), Path("out"))
    # KeyDoor's three levels on each channel (Umbrella waits for its calibration).
    assert [(c.baseline.config.env, c.baseline.config.reward_channel) for c in cells] == [
        ("keydoor", "return")
    ] * 3 + [("keydoor", "outcome")] * 3
    assert [len(c.seeds) for c in cells] == [106] * 6
    assert all(
        c.baseline.config.credit == "grpo" and c.baseline.credit_options is None for c in cells
    )
    assert all(c.baseline.config.out == Path("out") for c in cells)
    # compare.toml's cells are the plan's own, at its seeds: the same run folders.
    subset = plan_cells(load_sweep(SUBSET, None), Path("out"))
    assert subset and all(cell in cells for cell in subset)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--credit", "no_such_module:Credit"], "cannot import credit module"),
        (["--credit", "pathlib:Path"], "lacks"),
        (["--credit", "hcapp"], "Did you mean hcapo"),
        (["--credit", "grpo"], "compare a module other than the baseline"),
        (["--credit", EXAMPLE, "--credti-options", "gamma=2"], "--credit-options"),
        (["--credit", EXAMPLE, "--credit-options", "gamma=2"], "gamma must be in [0, 1]"),
        (["--credit", EXAMPLE, "--config", "no/such.toml"], "cannot read sweep file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text(TINY_PLAN, encoding="utf-8")
    argv = ["--config", str(plan), *args, "--out", str(tmp_path / "runs"), "--dry-run"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and message in captured.err
    assert captured.out == ""
    assert not (tmp_path / "runs").exists()


def test_verdicts_follow_the_plans_rules():
    row = {"seeds": 10, "planned_seeds": 10, "p_difference": 0.01, "p_equivalence": 0.5}
    better = {**row, "difference": Interval(0.2, 0.1, 0.3)}
    assert comparison.verdict(better, exploratory=False) == ("better", True)
    worse = {**row, "difference": Interval(-0.2, -0.35, -0.05)}
    assert comparison.verdict(worse, exploratory=False) == ("worse", False)  # half-width 15
    tie = {**row, "difference": Interval(0.0, -0.05, 0.05), "p_difference": 0.6}
    tie["p_equivalence"] = 0.01
    assert comparison.verdict(tie, exploratory=False) == ("tie", True)
    assert comparison.verdict(tie, exploratory=True) == ("exploratory: tie", True)
    unclear = {**tie, "p_equivalence": 0.2, "difference": Interval(0.0, -0.2, 0.2)}
    assert comparison.verdict(unclear, exploratory=False) == ("inconclusive", False)
    short = {**tie, "seeds": 9}
    assert comparison.verdict(short, exploratory=False) == ("short of seeds (9 of 10)", True)
    none = {**row, "seeds": 2, "difference": None}
    assert comparison.verdict(none, exploratory=True) == ("short of seeds (2 of 10)", None)


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the markdown table in a command's output."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]


def endpoints(run_dir: Path) -> tuple[float, float]:
    """Final held-out success and the curve's area, recomputed from the run's records."""
    config = records.read_json(run_dir / records.CONFIG_FILE)
    episodes = [e for e in records.read_episodes(run_dir) if e.index < config["eval_episodes"]]
    final = float(np.mean([e.success for e in episodes]))
    curve = records.read_curve(run_dir)
    rollouts = [records.rollouts_used(records.read_metrics(run_dir)[: p["optimizer_step"]])
                for p in curve]  # fmt: skip
    area = float(np.trapezoid([p["success_rate"] for p in curve], rollouts) / rollouts[-1])
    return final, area


def run_folders(out: Path, credit: str) -> list[Path]:
    """The finished run folders of `credit` under `out`, by seed."""
    found = [d for d in out.iterdir() if (d / records.DONE_FILE).exists()]
    chosen = [d for d in found if records.read_json(d / records.CONFIG_FILE)["credit"] == credit]
    return sorted(chosen, key=lambda d: records.read_json(d / records.CONFIG_FILE)["seed"])


# Six two-iteration runs of `small`: 14 s on the shared 2-core machine.
def test_compare_runs_the_module_and_grpo_then_prints_the_paired_verdicts(tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text(TINY_PLAN, encoding="utf-8")
    out = tmp_path / "runs"
    args = ["--config", str(plan), "--credit", EXAMPLE, "--seeds", "0", "1", "2"]
    args += ["--out", str(out), "--baselines", str(tmp_path / "none")]
    # The second of two shards: the module's population (seeds 0-2) of the two to run.
    assert main([*args, "--shard", "1/2"]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    # The cost and the departure from the plan come first, before any run starts.
    assert lines[0].startswith("--seeds 0 1 2 departs from the plan (4 seeds per cell)")
    assert "3 seeds: run 3 of the module's and 3 grpo (0 grpo reused)" in lines[1]
    assert lines[2].startswith("planned: 6 runs to do, 0 reused")
    assert captured.out.index("planned:") < captured.out.index("): running")
    assert "measured: 3 runs in" in captured.out and "| instrument |" not in captured.out
    assert "3 runs not finished (another shard, or failed)" in captured.err
    # The run folders a sweep of the plan's grpo rows with this credit would write.
    mine = run_folders(out, EXAMPLE)
    swept = tmp_path / "swept.toml"
    swept.write_text(TINY_PLAN.replace('["grpo", "hcapo"]', f'"{EXAMPLE}"'), encoding="utf-8")
    assert [d.name for d in mine] == [resolve(c).name for c in load_sweep(swept, out)[:3]]
    assert run_folders(out, "grpo") == []

    # The same command unsharded runs what is left (grpo), then prints the verdicts.
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "run 0 of the module's and 3 grpo" in text and "measured: 3 runs in" in text
    grpo = run_folders(out, "grpo")
    assert len(grpo) == 3

    # The verdict table, recomputed here from the runs' records: paired by seed, the
    # t-test and the two one-sided tests at 10 points, Holm over the two endpoints.
    rows = table_rows(text)
    assert "Holm-adjusted over the module's family of 2 " in text
    assert [row[:5] for row in rows] == [
        ["KeyDoor-v0", "delay=4, variance=high, verdict_feedback=false, T=8", "return", e, "3/4"]
        for e in ("final", "AUC")
    ]
    x = np.array([endpoints(d) for d in mine])
    y = np.array([endpoints(d) for d in grpo])
    d = x - y
    p_difference, p_equivalence = [], []
    for column in range(2):
        mean, se = d[:, column].mean(), d[:, column].std(ddof=1) / math.sqrt(3)
        p_difference.append(2 * scipy.stats.t.sf(abs(mean) / se, 2) if se else float(mean == 0))
        low = scipy.stats.t.sf((mean + 0.1) / se, 2) if se else float(abs(mean) >= 0.1)
        high = scipy.stats.t.cdf((mean - 0.1) / se, 2) if se else float(abs(mean) >= 0.1)
        p_equivalence.append(max(low, high))
    for ps in (p_difference, p_equivalence):  # Holm over two: 2 p_min, then max with p_max
        small, large = sorted(range(2), key=lambda i: ps[i])
        ps[small], ps[large] = min(1.0, 2 * ps[small]), max(min(1.0, 2 * ps[small]), ps[large])
    for column, row in enumerate(rows):
        assert row[5] == f"{100 * y[:, column].mean():.1f}"
        assert row[6] == f"{100 * x[:, column].mean():.1f}"
        mean = d[:, column].mean()
        half = scipy.stats.t.ppf(0.975, 2) * d[:, column].std(ddof=1) / math.sqrt(3)
        assert row[7] == f"{100 * mean:.1f} [{100 * (mean - half):.1f}, {100 * (mean + half):.1f}]"
        assert row[8] == ("yes" if half <= 0.1 else "no")
        assert row[9] == f"{p_difference[column]:.3f}"
        assert row[10] == f"{p_equivalence[column]:.3f}"
        if p_difference[column] < 0.05:
            word = "better" if mean > 0 else "worse"
        else:
            word = "tie" if p_equivalence[column] < 0.05 else "inconclusive"
        assert row[11] == f"exploratory: {word}"

    # Another output folder, searching the first for grpo: its grpo runs are reused (equal
    # identity), and the cost's seconds per run are their measured training seconds.
    other = tmp_path / "other"
    assert main([*args, "--out", str(other), "--baselines", str(out), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "run 3 of the module's and 0 grpo (3 grpo reused)" in dry
    seconds = statistics.median(
        records.read_json(d / records.TRAINING_FILE)["wall_seconds"] for d in grpo
    )
    assert f"{seconds:.0f} s per run (median of 3 finished grpo runs of this cell)" in dry
    assert ": running" not in dry and not other.exists()

    # A copy of a grpo run whose recorded identity differs (another learning rate) under
    # the same name is not reused.
    copied = tmp_path / "copied"
    shutil.copytree(grpo[0], copied / grpo[0].name)
    cells = plan_cells(load_sweep(plan, None), other)
    baseline = cells[0].baseline
    assert finished_run(baseline, [copied]) == copied / grpo[0].name
    path = copied / grpo[0].name / records.CONFIG_FILE
    saved = json.loads(path.read_text())
    saved["identity"]["learning_rate"] = 0.01
    path.write_text(json.dumps(saved))
    assert finished_run(baseline, [copied]) is None


def test_the_console_script_imports_the_users_module_from_the_working_directory(tmp_path):
    # `creditgym compare` (a console script: the working directory is not on its path, as
    # it is under `python -m`) finds `my_module.py` beside the user, as the docs promise.
    (tmp_path / "my_module.py").write_text(
        "from creditgym.credit.grpo import GRPO\n\n\nclass MyCredit(GRPO):\n"
        '    name = "my_credit"\n',
        encoding="utf-8",
    )
    (tmp_path / "plan.toml").write_text(TINY_PLAN, encoding="utf-8")
    command = [str(Path(sys.executable).parent / "creditgym"), "compare"]
    command += ["--credit", "my_module:MyCredit", "--config", "plan.toml", "--dry-run"]
    command += ["--out", "runs", "--baselines", "none"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "4 seeds: run 4 of the module's and 4 grpo (0 grpo reused)" in done.stdout
    assert not (tmp_path / "runs").exists()


def test_the_example_module_gives_discounted_group_relative_returns_worked_by_hand():
    # Group "a": returns 3 (three steps) and 1 (one step), mean 2; group "b": one of 5.
    batch = [
        scripted_trajectory("a", [0.0, 1.0, 2.0], success=True),
        scripted_trajectory("a", [1.0], success=False),
        scripted_trajectory("b", [5.0, 0.0], success=True),
    ]
    module = DiscountedGroupReturn(DiscountedGroupReturnOptions(gamma=0.5))
    steps = module.compute(batch).step_advantages
    # (R - mean) * gamma^(T - 1 - t): 1 * (0.25, 0.5, 1); -1 * (1); 0 * (0.5, 1).
    assert [s.tolist() for s in steps] == [[0.25, 0.5, 1.0], [-1.0], [0.0, 0.0]]
    assert all(s.dtype == np.float32 for s in steps)
    with pytest.raises(ValueError, match="gamma must be in"):
        DiscountedGroupReturnOptions(gamma=1.5)
