"""The study report (benchmarks/study.py, report/study/, report/stats.py) on run folders
written by hand, with answers worked out by hand: curve area, rollouts to a threshold (a
run that never reaches it is slower than any that does), the zero-variance prediction,
intervals, the probability of improvement, and a statistic added as one entry of the
table of statistics."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from creditgym.benchmarks import study
from creditgym.report import records, stats
from creditgym.report.stats import Interval
from creditgym.report.study import summary
from creditgym.report.study.comparisons import (
    ceiling_pairs,
    confirmatory,
    exact_pairs,
    horizon_trends,
    improvement_pairs,
    verdicts,
)
from creditgym.report.study.plan import plan_costs, plan_pairs
from creditgym.report.study.rows import method_name, run_row, runs_table
from creditgym.report.study.summary import task_summary

ENV_ID = "creditgym/KeyDoor-v0"


def write_run(
    root,
    name,
    seed,
    credit,
    curve,
    success,
    group_size=8,
    delay=4,
    typed=False,
    steps=3,
    dtype="float32",
):
    """A finished training run: 3 iterations of 32 rollouts (one optimiser step each, 10 s
    each), a curve point after each, `success` of 4 final evaluation episodes (with
    `typed`, episodes alternate the task types rain and sunshine, rain first); `steps` is
    the configured budget its name may carry, `dtype` the resolved precision."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    config = {
        "env_id": ENV_ID,
        "env_options": [f"delay={delay}", "variance=high"],
        "max_episode_steps": delay + 4,
        "seed": seed,
        "steps": steps,
        "learning_rate": 3e-3,
        "credit": credit,
        "trainer": "policy_gradient",
        "credit_convention": "creditgym",
        "eval_episodes": 4,
        "method_group_size": group_size,
        "method_config": {
            "model": "small",
            "trainer": "policy_gradient",
            "credit": credit,
            "dtype": dtype,
        },
    }
    (run_dir / records.CONFIG_FILE).write_text(json.dumps(config))
    episodes = [
        records.EpisodeRecord(
            index=i,
            env=ENV_ID,
            split="test",
            task_id=f"t{i}",
            task_type=("rain", "sunshine")[i % 2] if typed else "",
            seed=i,
            method=credit,
            success=i < success,
            episode_return=0.0,
            steps=6,
            truncated=False,
            tokens=10,
            train_step=3,
        ).to_dict()
        for i in range(4)
    ]
    (run_dir / records.EPISODES_FILE).write_text("".join(json.dumps(e) + "\n" for e in episodes))
    (run_dir / records.DONE_FILE).write_text(json.dumps({"summary": [], "train_step": 3}))
    metrics = [
        {
            "step": k + 1,
            "iteration": k,
            "rollout/num_trajectories": 32.0,
            "rollout/success_rate": 0.5,
            "time/rollout_s": 6.0,
            "time/credit_s": 1.0,
            "time/train_s": 3.0,
            "charts/grad_norm_is_zero": float(k == 0),
            "credit/frac_reward_zero_std": 0.25,
        }
        for k in range(3)
    ]
    (run_dir / records.METRICS_FILE).write_text("".join(json.dumps(m) + "\n" for m in metrics))
    points = [
        {"iteration": k, "optimizer_step": k, "episodes": 32.0, "success_rate": rate}
        for k, rate in enumerate(curve)
    ]
    (run_dir / records.CURVE_FILE).write_text("".join(json.dumps(p) + "\n" for p in points))
    (run_dir / records.TRAINING_FILE).write_text(json.dumps({"wall_seconds": 30.0}))
    return run_dir


def test_a_runs_line_has_the_area_the_thresholds_and_the_prediction_worked_out_by_hand(tmp_path):
    write_run(tmp_path, "a", seed=0, credit="grpo", curve=[0.0, 0.5, 1.0, 1.0], success=3)
    (run,) = records.load_runs(tmp_path)
    points = records.curve_points(run)
    assert [p.rollouts for p in points] == [0, 32, 64, 96]
    assert [p.train_seconds for p in points] == [0.0, 10.0, 20.0, 30.0]
    row = run_row(run)
    # Trapezoids over 32 rollouts each: (0 + .5)/2 + (.5 + 1)/2 + (1 + 1)/2 = 2.0, over 3 widths.
    assert row["auc"] == pytest.approx(2.0 / 3)
    assert (row["rollouts_to_50"], row["seconds_to_50"]) == (32, 10.0)
    assert (row["rollouts_to_80"], row["seconds_to_80"]) == (64, 20.0)
    assert row["final_success"] == 0.75
    assert row["horizon"] == 4 and row["method"] == "grpo"
    assert row["zero_grad_fraction"] == pytest.approx(1 / 3)
    # p = 0.5, G = 8: 2 * 0.5^8 predicted, 0.25 observed.
    assert row["predicted_zero_std"] == pytest.approx(2 * 0.5**8)
    assert row["zero_std_groups"] == 0.25


def test_a_statistic_added_as_one_entry_is_computed_and_printed(tmp_path, monkeypatch):
    # The recipe of docs/extending.md, "Adding a statistic": one entry of STATISTICS, and
    # study.md's per-task table gains its column with the value worked out by hand.
    runs = tmp_path / "runs"
    for seed, success in enumerate((1, 2, 4)):  # final success 25, 50, 100 %
        write_run(runs, f"g{seed}", seed, "grpo", [0.0, 0.5, 1.0], success)
    median = summary.Statistic(
        "median final success",
        lambda rows, reps: {"final_success_median": float(rows.final_success.median())},
        (summary.Column("median %", lambda row: f"{100 * row.final_success_median:.1f}"),),
    )
    monkeypatch.setattr(summary, "STATISTICS", (*summary.STATISTICS, median))
    out = tmp_path / "report"
    assert study.main(["--runs", str(runs), "--out", str(out), "--reps", "200"]) == 0
    table = [line for line in (out / "study.md").read_text().splitlines() if "| grpo |" in line]
    header = next(
        line for line in (out / "study.md").read_text().splitlines() if "| method |" in line
    )
    assert header.endswith("| median train s to 80 % | median % |")
    assert table[0].startswith("| grpo | 3 |") and table[0].endswith("| 50.0 |")


def test_a_run_that_never_reaches_a_threshold_is_slower_than_any_that_does(tmp_path):
    write_run(tmp_path, "a", seed=0, credit="grpo", curve=[0.0, 0.2, 0.9, 1.0], success=4)
    write_run(tmp_path, "b", seed=1, credit="grpo", curve=[0.0, 0.1, 0.2, 0.3], success=1)
    write_run(tmp_path, "c", seed=2, credit="grpo", curve=[0.0, 0.1, 0.2, 0.3], success=1)
    frame = runs_table(records.load_runs(tmp_path))
    assert frame.rollouts_to_80.tolist()[0] == 64 and frame.rollouts_to_80.isna().sum() == 2
    (line,) = task_summary(frame, reps=200).itertuples(index=False)
    assert line.reached_80 == "1/3"
    # Two of three never reach 80 %: the median seed never reaches it.
    assert line.median_rollouts_to_80 is None
    assert line.final_success_mean.value == pytest.approx(0.5)


def test_intervals_cover_the_estimate_and_shrink_with_agreeing_seeds():
    rng = np.random.default_rng(0)
    noisy = rng.uniform(0, 1, size=(5, 3))
    mean = stats.mean_estimate(noisy, reps=500).headline
    iqm = stats.bca_interval(stats.iqm_of_tasks, noisy, reps=500)
    assert mean.value == pytest.approx(noisy.mean()) and iqm.value == stats.iqm(noisy)
    assert mean.low <= mean.value <= mean.high and iqm.low <= iqm.value <= iqm.high
    same = stats.mean_estimate(np.full((5, 3), 0.4), reps=500)
    assert same.headline == (pytest.approx(0.4), pytest.approx(0.4), pytest.approx(0.4))
    with pytest.raises(ValueError, match="NaN"):
        stats.mean_estimate(np.array([[np.nan]]))


def test_probability_of_improvement_is_the_pairwise_win_rate():
    better = np.array([[0.9], [0.8], [0.7]])
    worse = np.array([[0.1], [0.8], [0.2]])
    # Pairs (x, y): 9 in all; x > y in 7, ties (0.8, 0.8) count one half, x < y in 1
    # ((0.7, 0.8)): (7 + 0.5) / 9.
    interval = stats.probability_of_improvement(better, worse, reps=500)
    assert interval.value == pytest.approx(7.5 / 9)
    assert interval.low <= interval.value <= interval.high
    far = stats.probability_of_improvement(np.ones((5, 2)), np.zeros((5, 2)), reps=200)
    assert far == (1.0, 1.0, 1.0) and far.excludes(0.5)


def test_the_report_writes_its_tables_and_figures(tmp_path):
    runs = tmp_path / "runs"
    for seed in range(3):
        for delay in (1, 4):
            write_run(runs, f"g{seed}{delay}", seed, "grpo", [0.0, 0.5, 0.9, 1.0], 4, delay=delay)
            write_run(runs, f"h{seed}{delay}", seed, "hp_rlvr", [0.0, 0.0, 0.1, 0.2], 1, 1, delay)
    out = tmp_path / "report"
    assert study.main(["--runs", str(runs), "--out", str(out), "--reps", "200"]) == 0
    text = (out / "study.md").read_text()
    # Fully apart on both tasks: 2 of the 20 x 20 deals of a 3 + 3 permutation test are as
    # extreme, p = 0.005, alone in its confirmatory family (Holm leaves it); no spread, so
    # the difference is exactly 75 points, outside the 10-point margin (TOST p = 1).
    assert (
        "| grpo | hp_rlvr | 2 | 3 | 1.00 [1.00, 1.00] | 75.0 [75.0, 75.0] | 0.005 | 1.00 | "
        "grpo better |"
    ) in text
    # Each method's success is the same at delay 1 and 4: J = E[J] = 4.5, no trend.
    assert "| KeyDoor-v0 | grpo | 1, 4 | 3, 3 | 100.0 → 100.0 | 4.5 (4.5) | 1.00 | 1.00 |" in text
    for figure in (
        "credit_vs_horizon.png",
        "learning_curves.png",
        "learning_curves_wallclock.png",
        "zero_variance_groups.png",
    ):
        assert (out / figure).stat().st_size > 10_000, figure
    assert study.main(["--runs", str(tmp_path / "missing")]) == 2
    assert study.main(["--runs", str(runs), "--out", str(out), "--reps", "0"]) == 2


def test_iqm_is_the_mean_of_the_middle_half():
    # 8 values: the 2 lowest and 2 highest are cut.
    assert stats.iqm(np.array([[0.0, 100.0], [1.0, 2.0], [3.0, 4.0], [-50.0, 5.0]])) == 2.5


def test_row_names_keep_conventions_options_and_trainers_apart():
    base = {"credit": "hcapo", "trainer": "policy_gradient"}
    assert method_name(base) == "hcapo"
    assert method_name({**base, "credit_options": []}) == "hcapo"
    options = {**base, "credit_options": ["gamma=1", "do_no_harm=false"]}
    assert method_name(options) == "hcapo [do_no_harm=false gamma=1]"
    verl = {"credit": "gigpo", "trainer": "policy_gradient", "credit_convention": "verl-agent"}
    assert method_name(verl) == "gigpo (verl-agent)"
    assert method_name({**base, "trainer": "sft"}) == "sft+hcapo"


def test_verdicts_adjust_the_confirmatory_family_and_call_ties_only_by_tost():
    def pair(x, p_diff, p_equiv, p_x_beats_y=0.8, y="grpo"):
        return {
            "x": x,
            "y": y,
            "p_x_beats_y": Interval(p_x_beats_y, 0.0, 1.0),
            "p_difference": p_diff,
            "p_equivalence": p_equiv,
            "confirmatory": confirmatory(x, y),
        }

    rows = [
        pair("gigpo", 0.01, 0.9),
        pair("hcapo", 0.04, 0.9),
        pair("hp_rlvr", 0.03, 0.9),
        pair("rule_based", 0.6, 0.01),
        pair("hcapo [do_no_harm=false]", 0.04, 0.9, p_x_beats_y=0.2),
        pair("sft+gigpo", float("nan"), float("nan")),
    ]
    judged = verdicts(pd.DataFrame(rows))
    # Holm over the four confirmatory differences .01 .04 .03 .6: x4 = .04, x3 = .09,
    # x2 = .08 -> .09, x1 = .6; equivalences .9 .9 .9 .01: .01 x4 = .04, the rest 1.
    assert judged.p_difference.tolist()[:4] == pytest.approx([0.04, 0.09, 0.09, 0.6])
    assert judged.p_equivalence.tolist()[:4] == pytest.approx([1.0, 1.0, 1.0, 0.04])
    assert judged.verdict.tolist() == [
        "gigpo better",
        "inconclusive",  # p .04 alone would pass; adjusted .09 does not
        "inconclusive",
        "tie (within ±10 points)",  # a failed difference test alone is never a tie
        "exploratory: grpo better",  # unadjusted .04, P(X > Y) = .2
        "cannot tell (fewer than 3 seeds)",
    ]


def test_horizon_trends_call_a_fall_only_when_the_adjusted_test_does():
    rows = []
    for horizon, falling in ((1, 0.9), (4, 0.6), (16, 0.2)):
        for seed in range(5):
            rows.append(
                {
                    "env": "KeyDoor-v0",
                    "method": "grpo",
                    "horizon": horizon,
                    "final_success": falling + 0.01 * seed,
                }
            )
            rows.append(
                {
                    "env": "KeyDoor-v0",
                    "method": "gigpo",
                    "horizon": horizon,
                    "final_success": 0.5 + 0.01 * ((seed + horizon) % 5),
                }
            )
    trends = horizon_trends(pd.DataFrame(rows)).set_index("method")
    # grpo: no pair ascends, J = 0 of E[J] = 37.5; a random deal as extreme is 2 in
    # 756,756, so p = 1 / 20,001, x2 for Holm over the table's two tests.
    assert trends.loc["grpo", "trend"].statistic == 0.0
    assert trends.loc["grpo", "p_holm"] == pytest.approx(2 / (1 + stats.PERMUTATIONS))
    assert trends.loc["grpo", "verdict"] == "falls"
    # gigpo's seeds take the same five values at every horizon: J = E[J], p = 1.
    assert trends.loc["gigpo", "trend"].statistic == 37.5
    assert trends.loc["gigpo", "verdict"] == "no trend shown"


def test_the_confirmatory_family_is_default_modules_against_grpo():
    assert confirmatory("gigpo", "grpo") and confirmatory("grpo", "hcapo")
    assert not confirmatory("gigpo", "hcapo")
    assert not confirmatory("grpo", "hcapo [do_no_harm=false]")
    assert not confirmatory("grpo", "sft+grpo")


def test_the_header_names_the_sweep_config_given(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "g", 0, "grpo", [0.0, 0.5, 0.9, 1.0], 4)
    config = tmp_path / "fair.toml"
    config.write_text("[common]\n")
    out = tmp_path / "report"
    assert study.main(["--runs", str(runs), "--out", str(out), "--config", str(config)]) == 0
    assert f"from the run folders of the sweep `{config}`" in (out / "study.md").read_text()
    assert "study.toml" not in (out / "study.md").read_text()
    assert study.main(["--runs", str(runs), "--config", str(tmp_path / "missing.toml")]) == 2


def test_calibration_sets_each_oracle_row_against_the_bar_with_grpo_beside_it(tmp_path):
    runs = tmp_path / "runs"
    curve = [0.0, 0.5, 0.9, 1.0]
    for seed in range(3):
        # Delay 4: the oracle wins all 4 episodes on every seed, GRPO 2 of 4.
        write_run(runs, f"o4{seed}", seed, "oracle", curve, 4, typed=True)
        write_run(runs, f"g4{seed}", seed, "grpo", curve, 2, typed=True)
        # Delay 1: the oracle wins 1 of 4 on every seed (only the first, a rain episode).
        write_run(runs, f"o1{seed}", seed, "oracle", curve, 1, delay=1, typed=True)
    # Delay 16: the oracle wins 3 of 4 on one seed and all on the other: mean 87.5, but two
    # seeds' t-interval reaches far below 80 %.
    write_run(runs, "o16a", 0, "oracle", curve, 3, delay=16)
    write_run(runs, "o16b", 1, "oracle", curve, 4, delay=16)
    out = tmp_path / "report"
    assert study.main(["--runs", str(runs), "--out", str(out), "--calibration"]) == 0
    assert not (out / "study.md").exists()
    lines = {
        line.split(" | ")[0]: line
        for line in (out / "calibration.md").read_text().splitlines()
        if line.startswith("| KeyDoor")
    }
    assert lines["| KeyDoor-v0[delay=4, variance=high, T=8]"].endswith(
        "| oracle | 3 | 100.0 [100.0, 100.0] | passes | rain 100 / sunshine 100 | 3 | "
        "50.0 [50.0, 50.0] |"
    )
    assert lines["| KeyDoor-v0[delay=1, variance=high, T=5]"].endswith(
        "| oracle | 3 | 25.0 [25.0, 25.0] | fails | rain 50 / sunshine 0 | – | – |"
    )
    delay16 = lines["| KeyDoor-v0[delay=16, variance=high, T=20]"]
    assert "| oracle | 2 | 87.5 [" in delay16 and "| passes on the mean | – | – | – |" in delay16
    # A folder without an oracle row has nothing to calibrate against: one line, exit 2.
    grpo_only = tmp_path / "grpo_only"
    write_run(grpo_only, "g", 0, "grpo", curve, 2)
    assert study.main(["--runs", str(grpo_only), "--out", str(out), "--calibration"]) == 2


def test_study_md_splits_final_success_by_task_type(tmp_path):
    runs = tmp_path / "runs"
    curve = [0.0, 0.5, 0.9, 1.0]
    # Episode 0 (rain) wins on seed 0; episodes 0-1 (rain, sunshine) on seed 1.
    write_run(runs, "g0", 0, "grpo", curve, 1, typed=True)
    write_run(runs, "g1", 1, "grpo", curve, 2, typed=True)
    out = tmp_path / "report"
    assert study.main(["--runs", str(runs), "--out", str(out), "--reps", "200"]) == 0
    text = (out / "study.md").read_text()
    assert "| method | rain | sunshine |" in text
    # Rain: 1/2 on both seeds; sunshine: 0/2 and 1/2.
    assert "| grpo | 50.0 | 25.0 |" in text


def test_runs_of_one_task_at_two_budgets_are_named_apart_and_compared_within_one(tmp_path):
    runs = tmp_path / "runs"
    curve = [0.0, 0.5, 0.9, 1.0]
    # The oracle at 3 and at 9 iterations, GRPO at 3 only; another task at one budget.
    write_run(runs, "o3", 0, "oracle", curve, 2)
    write_run(runs, "o9", 0, "oracle", curve, 4, steps=9)
    write_run(runs, "g3", 0, "grpo", curve, 1)
    write_run(runs, "g16", 0, "grpo", curve, 1, delay=16, steps=9)
    frame = runs_table(records.load_runs(tmp_path / "runs"))
    assert dict(zip(frame.run, frame.method, strict=True)) == {
        "o3": "oracle (3 iterations)",
        "o9": "oracle (9 iterations)",
        "g3": "grpo (3 iterations)",
        "g16": "grpo",
    }
    out = tmp_path / "report"
    assert study.main(["--runs", str(runs), "--out", str(out), "--calibration"]) == 0
    text = (out / "calibration.md").read_text()
    # Each oracle row against the 80 % bar, GRPO beside it only at its own budget.
    # One seed has no interval: the verdict is its mean's.
    assert (
        "| oracle (3 iterations) | 1 | 50.0 (one seed) | below on the mean | – | 1 | "
        "25.0 (one seed) |"
    ) in text
    assert (
        "| oracle (9 iterations) | 1 | 100.0 (one seed) | passes on the mean | – | – | – |" in text
    )


def test_runs_of_one_task_in_two_precisions_never_share_a_row(tmp_path):
    """A sweep continued on a processor where `dtype = "fast"` resolves to float32 adds
    float32 seeds beside bfloat16-products ones: each precision is its own row, so no
    row's seeds (nor a matched-seed pair) mix arithmetic; a task in one precision keeps
    plain names."""
    runs = tmp_path / "runs"
    curve = [0.0, 0.5, 0.9, 1.0]
    for seed in (0, 1):
        write_run(runs, f"g{seed}", seed, "grpo", curve, 2, dtype="bfloat16-products")
        write_run(runs, f"h{seed}", seed, "hcapo", curve, 3, dtype="bfloat16-products")
    write_run(runs, "g2", 2, "grpo", curve, 1)  # float32
    write_run(runs, "g16", 0, "grpo", curve, 1, delay=16)
    frame = runs_table(records.load_runs(runs))
    assert dict(zip(frame.run, frame.method, strict=True)) == {
        "g0": "grpo (bfloat16-products)",
        "g1": "grpo (bfloat16-products)",
        "h0": "hcapo (bfloat16-products)",
        "h1": "hcapo (bfloat16-products)",
        "g2": "grpo (float32)",
        "g16": "grpo",
    }
    assert set(frame.precision) == {"bfloat16-products", "float32"}
    out = tmp_path / "report"
    assert study.main(["--runs", str(runs), "--out", str(out)]) == 0
    text = (out / "study.md").read_text()
    assert "Runs computed in bfloat16-products (4 runs), float32 (2 runs)" in text
    # Each precision's row counts its own seeds only.
    assert "| grpo (bfloat16-products) | 2 |" in text and "| grpo (float32) | 1 |" in text


def test_oracle_rows_meet_grpo_only_on_their_channel_as_exploratory_ceilings():
    successes = {
        ("grpo", "grpo", "return", False): [0.2, 0.3, 0.1, 0.2],
        ("hcapo", "hcapo", "return", False): [0.3, 0.2, 0.4, 0.1],
        ("oracle", "oracle", "return", True): [1.0, 1.0, 1.0, 1.0],
        ("grpo on outcome", "grpo", "outcome", False): [0.9, 1.0, 0.95, 1.0],
        ("hcapo_exact on outcome", "hcapo_exact", "outcome", True): [1.0, 0.95, 1.0, 0.9],
    }
    frame = two_delay_frame(successes)
    ceilings = ceiling_pairs(frame, "final_success", reps=200)
    # each oracle against GRPO on its own channel: pooled over the env, then per task
    assert list(zip(ceilings.env, ceilings.x, ceilings.y, strict=True)) == [
        (scope, x, y)
        for x, y in (("hcapo_exact on outcome", "grpo on outcome"), ("oracle", "grpo"))
        for scope in ("KeyDoor-v0", "KeyDoor-v0[delay=4]", "KeyDoor-v0[delay=16]")
    ]
    assert not ceilings.confirmatory.any()
    oracle = ceilings[(ceilings.x == "oracle") & (ceilings.env == "KeyDoor-v0")].iloc[0]
    assert oracle.difference.value == pytest.approx(0.8)  # 1.0 - mean(0.2, 0.3, 0.1, 0.2)
    assert oracle.verdict == "exploratory: oracle better"
    exact = ceilings[(ceilings.x == "hcapo_exact on outcome") & (ceilings.env == "KeyDoor-v0")]
    assert exact.iloc[0].verdict == "exploratory: tie (within ±10 points)"
    # oracles stay out of the ranked pairs
    pairs = improvement_pairs(frame, "final_success", reps=200)
    assert set(pairs.x) | set(pairs.y) == {"grpo", "hcapo"}


def test_a_pair_is_compared_at_the_seeds_both_ran():
    """Part-way through a sweep the rows hold unequal seeds: each pair is tested on the
    seeds both have (here 0-2; grpo's seed 3 waits for hcapo's)."""
    values = {"grpo": [0.5, 0.6, 0.7, 0.0], "hcapo": [0.8, 0.9, 1.0]}
    frame = pd.DataFrame(
        [
            {"env": "KeyDoor-v0", "task": "KeyDoor-v0[delay=4]", "method": method}
            | {"form": method, "channel": "return", "oracle": False}
            | {"seed": seed, "final_success": value}
            for method, runs in values.items()
            for seed, value in enumerate(runs)
        ]
    )
    pair = improvement_pairs(frame, "final_success", reps=200).iloc[0]
    assert pair.seeds == 3
    assert pair.difference.value == pytest.approx(-0.3)  # 0.6 - 0.9: grpo's 0.0 left out


def test_a_module_named_by_path_is_shown_by_its_own_name():
    config = {"credit": "credit.exact_source:HCAPOExact", "trainer": "policy_gradient"}
    assert method_name(config) == "hcapo_exact"
    assert method_name({**config, "reward_channel": "outcome"}) == "hcapo_exact on outcome"


def test_the_report_reads_each_pair_seed_by_seed_apart_from_its_verdicts(tmp_path):
    """hcapo beats grpo by one evaluation episode of four at every seed while both rows
    spread over the seeds: the seed-by-seed reading is exact (-25 points, r = 1), the
    Welch interval is wide, and the verdict stays the stated analysis's."""
    runs = tmp_path / "runs"
    curve = [0.0, 0.5, 0.9, 1.0]
    for seed, success in enumerate((1, 2, 3)):
        write_run(runs, f"g{seed}", seed, "grpo", curve, success)
        write_run(runs, f"h{seed}", seed, "hcapo", curve, success + 1)
    out = tmp_path / "report"
    assert study.main(["--runs", str(runs), "--out", str(out)]) == 0
    text = (out / "study.md").read_text()
    seed_by_seed = text[text.index("### Seed by seed") :]
    assert "| KeyDoor-v0 | grpo | hcapo | 3 | -25.0 [-25.0, -25.0] | 1.00 |" in seed_by_seed
    welch = next(line for line in text.splitlines() if line.startswith("| KeyDoor-v0 | grpo |"))
    assert "-25.0 [-25.0, -25.0]" not in welch and "inconclusive" in welch


def pilot_frame() -> pd.DataFrame:
    """Four seeds of grpo and hcapo on one task, with rows the plan must leave out: a
    variant (exploratory), an oracle, and another channel's hcapo without its grpo."""
    rows = []
    grpo = [0.5, 0.2, 0.9, 0.4]
    differences = [0.1, 0.3, 0.2, 0.0]
    for seed, (base, d) in enumerate(zip(grpo, differences, strict=True)):
        for form, oracle, channel, value in (
            ("grpo", False, "return", base),
            ("hcapo", False, "return", base + d),
            ("hcapo [clip=1,1]", False, "return", 0.0),
            ("oracle", True, "return", 1.0),
            ("hcapo", False, "outcome", 1.0),
        ):
            rows.append(
                {
                    "env": "KeyDoor-v0",
                    "task": "KeyDoor-v0[delay=4]",
                    "channel": channel,
                    "form": form,
                    "oracle": oracle,
                    "seed": seed,
                    "final_success": value,
                    "auc": value / 2,
                    "train_seconds": 60.0 if form == "grpo" else 120.0,
                }
            )
    return pd.DataFrame(rows)


def test_plan_sizes_each_confirmatory_pair_from_its_per_seed_differences():
    pairs = plan_pairs(pilot_frame())
    assert set(zip(pairs.x, pairs.channel, pairs.endpoint, strict=True)) == {
        ("hcapo", "return", "final"),
        ("hcapo", "return", "AUC"),
    }
    final = pairs[pairs.endpoint == "final"].iloc[0]
    # Differences 0.1 0.3 0.2 0.0: mean 0.15, SD sqrt(0.05 / 3) = 0.1291. Half-width 0.1:
    # n = 8 gives 2.3646 * 0.1291 / 2.8284 = 0.1079, n = 9 gives 2.3060 * 0.1291 / 3 =
    # 0.0992: 9 seeds. Half-width 0.05: (1.96 * 2.582)^2 = 25.6 -> 26: t_25 = 2.0595,
    # 0.0521; 27: 0.0511; 28: 2.0518 * 0.1291 / 5.2915 = 0.05006; 29: 0.0491: 29 seeds.
    assert final.difference == pytest.approx(0.15)
    assert final.sd_difference == pytest.approx(0.12910, abs=1e-5)
    assert (final.seeds_10, final.seeds_5) == (9, 29)
    # The SD's 80 % upper limit (n = 4) is larger, so it asks for more seeds.
    assert final.seeds_10_upper > final.seeds_10
    # AUC is half of each value here: half the SD, fewer seeds.
    auc = pairs[pairs.endpoint == "AUC"].iloc[0]
    assert auc.sd_difference == pytest.approx(final.sd_difference / 2)
    costs = plan_costs(pilot_frame(), pairs).iloc[0]
    # 9 seeds of grpo (60 s) and hcapo (120 s): 9 * 180 s = 0.45 run-hours.
    assert (costs.seeds_10, costs.rows) == (9, 2)
    assert costs.hours_10 == pytest.approx(0.45)


def test_plan_never_asks_fewer_seeds_than_the_pilot_ran():
    frame = pilot_frame()
    frame = frame[frame.channel == "return"].copy()
    for column in ("final_success", "auc"):
        frame.loc[frame.form == "hcapo", column] = frame[frame.form == "grpo"][column].to_numpy()
    pairs = plan_pairs(frame)
    assert (pairs.seeds_10 == 2).all()  # no spread in the differences
    assert plan_costs(frame, pairs).iloc[0].seeds_10 == 4


def test_plan_without_a_pilot_is_one_line_exit_2(tmp_path, capsys):
    assert study.main(["--plan", "--pilot", str(tmp_path / "none")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and "pilot" in error


TOLERANT = "hp_rlvr_exact [divergence_tol=1e-12]"


def test_exact_hindsight_rows_meet_each_other_on_their_channel_as_exploratory_pairs():
    successes = {
        ("grpo", "grpo", "return", False): [0.2, 0.3, 0.1, 0.2],
        ("hcapo_exact", "hcapo_exact", "return", True): [0.3, 0.2, 0.4, 0.1],
        (TOLERANT, TOLERANT, "return", True): [0.9, 0.8, 1.0, 0.7],
        ("hp_rlvr_exact on outcome", "hp_rlvr_exact", "outcome", True): [1.0] * 4,
        ("hca", "hca", "return", True): [0.5] * 4,
    }
    frame = two_delay_frame(successes)
    formulas = exact_pairs(frame, "final_success", reps=200)
    # One pair (the outcome row has no partner on its channel; hca is no exact class),
    # pooled over the env, then per task.
    assert list(zip(formulas.env, formulas.x, formulas.y, strict=True)) == [
        (scope, "hcapo_exact", TOLERANT)
        for scope in ("KeyDoor-v0", "KeyDoor-v0[delay=4]", "KeyDoor-v0[delay=16]")
    ]
    pooled = formulas.iloc[0]
    assert pooled.difference.value == pytest.approx(-0.6)  # 0.25 - 0.85
    assert pooled.verdict == f"exploratory: {TOLERANT} better"


def two_delay_frame(successes: dict[tuple[str, str, str, bool], list[float]]) -> pd.DataFrame:
    """Rows of a KeyDoor study at delays 4 and 16: per (method, form, channel, oracle)
    its final success per seed, the same at both delays."""
    fields = ("method", "form", "channel", "oracle")
    return pd.DataFrame(
        [
            {"env": "KeyDoor-v0", "task": f"KeyDoor-v0[delay={delay}]"}
            | dict(zip(fields, row, strict=True))
            | {"seed": seed, "final_success": value}
            for delay in (4, 16)
            for row, values in successes.items()
            for seed, value in enumerate(values)
        ]
    )
