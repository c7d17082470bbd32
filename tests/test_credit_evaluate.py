"""Credit-quality metrics against hand-computed values, and the evaluation command."""

import math

import numpy as np
import pytest

from creditgym.agents.base import AgentInput, NoisyExpertAgent
from creditgym.benchmarks.credit_quality import main
from creditgym.credit.base import CreditOutput
from creditgym.measure.key_steps import auroc, credit_quality, precision_at_k
from tests.credit_cases import scripted_trajectory


def test_auroc_counts_pairs_and_half_ties():
    labels = np.array([True, False, True, False])
    # Positive 3 beats both negatives (2 pairs); positive 1 ties 1 and loses to 2: 0.5.
    assert auroc(np.array([3.0, 1.0, 1.0, 2.0]), labels) == pytest.approx(2.5 / 4)
    assert auroc(np.array([1.0, 1.0, 1.0, 1.0]), labels) == 0.5


def test_precision_at_k_breaks_ties_in_expectation():
    labels = np.array([True, False, False, True])
    assert precision_at_k(np.array([4.0, 3.0, 2.0, 1.0]), labels, 2) == 0.5
    # All tied: expected precision = fraction of keys.
    assert precision_at_k(np.zeros(4), labels, 2) == 0.5
    # One clear top key, then three tied for one slot, one of them a key: (1 + 1/3) / 2.
    assert precision_at_k(np.array([5.0, 1.0, 1.0, 1.0]), labels, 2) == pytest.approx(2 / 3)


def test_credit_quality_splits_by_outcome_and_skips_unrankable():
    success = scripted_trajectory("g", [0.0, 0.0, 1.0], True, key_steps=[False, True, True])
    failure = scripted_trajectory("g", [0.0, 0.0], False, key_steps=[True, False])
    all_key = scripted_trajectory("g", [1.0], True, key_steps=[True])
    output = CreditOutput(
        step_advantages=[
            np.array([0.0, 2.0, 1.0], dtype=np.float32),
            np.array([-1.0, -0.5], dtype=np.float32),
            np.array([1.0], dtype=np.float32),
        ],
        token_advantages=[[], [], []],
    )
    rows = credit_quality([success, failure, all_key], output)
    assert (rows["success"].trajectories, rows["success"].ranked) == (2, 1)
    assert rows["success"].auroc == 1.0 and rows["success"].precision == 1.0
    assert rows["success"].chance == pytest.approx(2 / 3)
    # The failure's key step has the larger magnitude but the lower credit.
    assert rows["failure"].auroc == 0.0 and rows["failure"].auroc_magnitude == 1.0
    empty = credit_quality([], CreditOutput([], []))
    assert empty["success"].ranked == 0 and math.isnan(empty["success"].auroc)


def test_noisy_expert_mixes_expert_and_admissible_actions():
    inputs = [
        AgentInput("e", "t", (), "o", ("a", "b", "c"), {"expert_action": "fix"}) for _ in range(400)
    ]
    actions = [action.action for action in NoisyExpertAgent(0.25, seed=3).act(inputs)]
    random_share = 1 - actions.count("fix") / len(actions)
    assert 0.15 < random_share < 0.35
    assert set(actions) <= {"fix", "a", "b", "c"}
    assert all(a.action == "fix" for a in NoisyExpertAgent(0.0).act(inputs[:20]))
    with pytest.raises(ValueError, match="noise"):
        NoisyExpertAgent(1.5)


def test_evaluate_command_on_sysdiag_prints_a_table_per_module(capsys):
    assert main(["--env", "sysdiag", "--credit", "grpo,rule_based", "--episodes", "8"]) == 0
    printed = capsys.readouterr().out
    assert "8 trajectories on creditgym/SysDiag-v0" in printed
    grpo = printed.split("== grpo")[1].split("== rule_based")[0]
    rule_based = printed.split("== rule_based")[1]
    # GRPO gives every step of a trajectory the same credit: AUROC exactly 0.5.
    assert "success" in grpo and " 0.500 " in grpo.splitlines()[3]
    # The rule-based module reads the same labels the metric checks: perfect ranking.
    assert " 1.000 " in rule_based.splitlines()[3]


def test_evaluate_command_rejects_unknown_module(capsys):
    assert main(["--credit", "gigpo,nope", "--episodes", "1"]) == 2
    assert "valid: " in capsys.readouterr().err


def test_the_command_line_follows_benchmarks_run_conventions(capsys):
    for argv, expected in (
        (["--env", "sysdaig"], "Did you mean sysdiag"),
        (["--credit", "grop"], "Did you mean grpo"),
        (["--episodes", "0"], "--episodes and --group-size must be >= 1"),
        (["--noise", "2"], "--noise is a probability"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and expected in err.splitlines()[-1], err


def test_the_command_line_scores_scripted_trajectories(capsys):
    assert main(["--env", "keydoor", "--credit", "grpo,rule_based", "--episodes", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("8 trajectories on creditgym/KeyDoor-v0")
    assert "rule_based" in out and "AUROC" in out
