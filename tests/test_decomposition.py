"""benchmarks.decomposition: formula against model, with exact hindsight (arXiv 1912.02503)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from creditgym import credit
from creditgym.benchmarks.decomposition import SCORING_RULE, current, markdown
from creditgym.benchmarks.decomposition import main as decomposition_main
from creditgym.credit.exact_source import EXACT_CLASSES, HCAPOExact
from creditgym.measure.bootstrap import block_bootstrap_se
from creditgym.measure.decomposition import kl_divergence


def test_bootstrap_se_of_a_mean_over_two_blocks_matches_hand_value():
    """Blocks {0} and {1}: a resample's mean is 0, 1/2 or 1 with probability 1/4, 1/2,
    1/4, so its standard deviation is sqrt(1/8)."""
    values = np.array([0.0, 1.0])
    se = block_bootstrap_se(
        [[0], [1]], lambda i: float(values[i].mean()), 4000, np.random.default_rng(0)
    )
    assert se == pytest.approx(math.sqrt(1 / 8), abs=0.01)
    # A statistic every resample agrees on has no error; one never finite has none to give.
    assert block_bootstrap_se([[0], [1]], lambda i: 3.0, 50, np.random.default_rng(0)) == 0.0
    assert math.isnan(
        block_bootstrap_se([[0]], lambda i: float("nan"), 50, np.random.default_rng(0))
    )


def test_kl_divergence_matches_hand_values():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.5])
    with np.errstate(divide="ignore"):
        log_p, log_q = np.log(p), np.log(q)
    # KL(p || q) = 2 * 0.5 * log(0.5 / 0.25) = log 2; p's zero entry contributes nothing.
    assert kl_divergence(p, log_p, log_q) == pytest.approx(math.log(2.0))
    assert kl_divergence(p, log_p, log_p) == 0.0
    # Mass where q has none: infinite.
    assert kl_divergence(q, np.log(q), log_p) == math.inf


def test_every_exact_class_pairs_the_registered_method_of_its_formula():
    for name, cls in EXACT_CLASSES.items():
        assert name in credit.REGISTRY
        assert cls.name == f"{name}_exact"
        # The formula is the method's own: only the hindsight source differs.
        assert cls.compute is credit.REGISTRY[name].compute


def _argv(tmp_path, *extra):
    argv = ["--settings", "keydoor:delay=1", "--models", "small", "--pools", "16"]
    return [*argv, "--bootstrap", "20", "--out", str(tmp_path), *extra]


@pytest.mark.slow  # two small-model runs of one KeyDoor cell (~30 s on a loaded 2-core CPU)
def test_decomposition_scores_both_sources_calibrates_and_resumes(tmp_path, capsys):
    assert decomposition_main(_argv(tmp_path)) == 0
    lines = (tmp_path / "cells.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    cell = json.loads(lines[0])
    assert (cell["setting"], cell["model"]) == ("keydoor:delay=1", "small")
    rows = {(row["channel"], row["module"], row["source"]): row for row in cell["rows"]}
    assert set(rows) == {
        (c, m, s)
        for c in ("outcome", "return")
        for m in ("hcapo", "hcapo_seed", "hp_rlvr")
        for s in ("exact", "model")
    }
    assert rows["outcome", "hcapo", "exact"]["credit"] == "credit.exact_source:HCAPOExact"
    assert rows["outcome", "hp_rlvr", "exact"]["credit"] == "credit.exact_source:HPRLVRExact"
    assert rows["outcome", "hcapo", "model"]["credit"] == "hcapo"
    for row in rows.values():
        assert row["batches"] == 2 and math.isfinite(row["pearson"]) and math.isfinite(row["cos"])
        assert 0 <= row["key_small_credit"] <= row["key_steps"]
    assert cell["config"]["rule"] == SCORING_RULE
    # Exact hindsight is a different credit from small's (inert) hindsight.
    assert (
        rows["outcome", "hp_rlvr", "exact"]["pearson"]
        != rows["outcome", "hp_rlvr", "model"]["pearson"]
    )
    # The channels score against different truths (the door's verdict; apples and door).
    assert (
        rows["outcome", "hcapo", "exact"]["pearson"] != rows["return", "hcapo", "exact"]["pearson"]
    )
    assert [c["channel"] for c in cell["calibration"]] == ["outcome", "return"]
    calibration = cell["calibration"][0]
    assert 0 < calibration["ratio_signed_steps"] <= calibration["steps"]
    # On KeyDoor the verdict says something about the key (KL(h_exact || pi) > 0), and
    # `small` reads nothing of it: its hindsight is its policy, so it is as far from the
    # exact hindsight as the policy is (a row misaligned with the commands would not be).
    assert calibration["kl_policy"] > 0.005
    assert calibration["kl_model"] == pytest.approx(calibration["kl_policy"], rel=0.2)
    markdown = (tmp_path / "decomposition.md").read_text(encoding="utf-8")
    assert "Produced by `creditgym decomposition --settings keydoor:delay=1" in markdown
    assert "| outcome | keydoor:delay=1 | small | 16 | hcapo |" in markdown
    # The same command again keeps the cell; other numeric options are refused (exit 2).
    capsys.readouterr()
    assert decomposition_main(_argv(tmp_path)) == 0
    assert "keydoor:delay=1 with small: kept from" in capsys.readouterr().out
    assert (tmp_path / "cells.jsonl").read_text(encoding="utf-8").splitlines() == lines
    # The tables rewritten from the records read back keep their column order.
    header = (tmp_path / "decomposition.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("setting,model,pool,channel,module,source,credit,pearson,")
    assert decomposition_main(_argv(tmp_path, "--seed", "1")) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and "--fresh" in error


def test_a_cell_of_an_earlier_scoring_rule_is_kept_in_the_tables_but_not_current(tmp_path):
    """A cell without the rule (scored before it) is shown, marked, and not taken as
    done: `run` computes it again when its model runs (`current`)."""
    row = {
        "channel": "outcome",
        "module": "hp_rlvr",
        "source": "exact",
        "credit": "x",
        "pearson": 0.5,
        "pearson_se": 0.1,
        "key_sign": 0.43,
        "key_sign_se": 0.03,
        "key_steps": 10.0,
        "cos": 0.1,
        "cos_se": 0.01,
        "batches": 2.0,
    }
    calibration = {
        "channel": "outcome",
        "kl_model": 0.1,
        "kl_model_se": 0.0,
        "kl_policy": 0.1,
        "kl_policy_se": 0.0,
        "ratio_pearson": 0.0,
        "ratio_pearson_se": 0.0,
        "ratio_sign": 0.5,
        "ratio_sign_se": 0.0,
        "ratio_signed_steps": 4.0,
        "steps": 8.0,
    }
    stale = {
        "setting": "keydoor:delay=1",
        "model": "smollm2-135m",
        "config": {"pool": 32},
        "rows": [row, {**row, "source": "model"}],
        "calibration": [calibration],
    }
    fresh = {
        **stale,
        "model": "small",
        "config": {"pool": 16, "rule": SCORING_RULE},
        "rows": [{**r, "key_small_credit": 3.0} for r in stale["rows"]],
    }
    assert not current(stale) and current(fresh)
    text = markdown([fresh, stale], "python -m benchmarks.decomposition")
    assert "| small | 16 | hp_rlvr | 10 | 0.50 ± 0.10 |" in text
    assert "| smollm2-135m (earlier rule) | 32 | hp_rlvr |" in text
    assert "(earlier rule)` come from cells scored before" in text
    assert "earlier rule" not in markdown([fresh], "python -m benchmarks.decomposition")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pools", "16", "32"], "one size per model"),
        (["--settings", "keydoor"], "env:key=value"),
        (["--settings", "keydor:delay=1"], "keydor"),
        (["--modules", "grpo"], "no exact-source class"),
        (["--pools", "12"], "multiple of --group-size"),
    ],
)
def test_decomposition_usage_errors_are_one_line_exit_2(tmp_path, capsys, extra, message):
    assert decomposition_main([*_argv(tmp_path), *extra]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and message in error, error
    assert not (tmp_path / "cells.jsonl").exists()


def test_hcapo_exact_is_named_by_the_path_the_table_prints():
    assert credit.resolve("credit.exact_source:HCAPOExact") is HCAPOExact
    assert credit.resolve("creditgym.credit.exact_source:HCAPOExact") is HCAPOExact
