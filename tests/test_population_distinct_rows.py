"""No step row computed twice in an update (`PolicyGradientConfig.distinct_rows`,
`benchmarks.run --update-distinct-rows`): each distinct row of an optimiser step runs once
and carries the summed gradient of every step that repeats it; the loss, the gradient
norm and the updated weights equal the unshared update's within float rounding, and runs
with it are named apart from the runs before it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from creditgym.benchmarks.run import main, parse_config, resolve
from creditgym.benchmarks.run.command import starting_policy
from creditgym.benchmarks.run.train import build_trainer
from creditgym.trainers.policy_gradient import distinct_steps

ARGV = [
    "--env", "keydoor", "--env-options", "delay=4", "variance=high", "--model", "small",
    "--credit", "grpo", "--steps", "1", "--tasks-per-step", "4", "--learning-rate", "3e-3",
    "--max-new-tokens", "8",
]  # fmt: skip
# float32 sums of ~10^4 terms in another order: relative differences of ~1e-6 per value;
# a gradient element is compared to within ABSOLUTE_TOLERANCE of the largest element.
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_TOLERANCE = 1e-5


def trainer(tmp_path: Path, name: str, distinct: bool, kl_coef: float = 0.0):
    cfg = parse_config([*ARGV, "--out", str(tmp_path)])
    run_dir = tmp_path / name
    run_dir.mkdir()
    plan = resolve(cfg)
    built = build_trainer(plan, run_dir, starting_policy(plan))
    built.config = dataclasses.replace(built.config, distinct_rows=distinct, kl_coef=kl_coef)
    if kl_coef:
        built.reference = built._frozen_reference()
    return built


@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_distinct_rows_give_the_unshared_update_within_float_rounding(tmp_path, kl_coef):
    torch.set_num_threads(1)
    unshared = trainer(tmp_path, "unshared", distinct=False, kl_coef=kl_coef)
    shared = trainer(tmp_path, "shared", distinct=True, kl_coef=kl_coef)
    phase = unshared.rollout_and_credit()
    trajectories, advantages = phase.trajectories, phase.credit.token_advantages
    distinct, inverse = distinct_steps(trajectories)
    rows = sum(len(t.steps) for t in trajectories)
    assert len(inverse) == rows and len(distinct) < rows / 1.5  # states recur on KeyDoor

    # Every row is its distinct row: same prompt, action and admissible commands (its
    # recorded behaviour log-probs and reward may differ: the update reads the row's own).
    def key(step):
        return step.prompt_token_ids, step.action_token_ids, step.admissible_commands

    steps = [step for trajectory in trajectories for step in trajectory.steps]
    assert all(
        key(distinct[int(i)].steps[0]) == key(step) for step, i in zip(steps, inverse, strict=True)
    )

    expected = unshared._optimiser_step(trajectories, advantages)
    found = shared._optimiser_step(trajectories, advantages)
    assert expected["charts/grad_norm"] > 0
    assert found.keys() == expected.keys()
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, rel=RELATIVE_TOLERANCE, abs=ABSOLUTE_TOLERANCE)
    # The clipped gradients each step took (Adam's first step, about lr * sign(g), would
    # magnify rounding in the gradient's near-zero elements into differences of lr).
    gradients = [
        (p.grad, q.grad)
        for p, q in zip(
            unshared.policy.model.parameters(), shared.policy.model.parameters(), strict=True
        )
    ]
    scale = max(float(g.abs().max()) for g, _ in gradients)
    assert scale > 0
    for gradient, shared_gradient in gradients:
        torch.testing.assert_close(
            shared_gradient, gradient, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE * scale
        )


def test_runs_with_distinct_rows_are_named_apart_and_the_others_keep_their_names():
    plain = parse_config(ARGV)
    assert resolve(parse_config([*ARGV, "--update-distinct-rows"])).name != resolve(plain).name
    # A run's name from before the option (and before --population): left out at its
    # default, neither renames a run.
    before = [*ARGV, "--steps", "3", "--eval-episodes", "16", "--eval-batch-size", "16"]
    assert resolve(parse_config(before)).name == (
        "keydoor-delay4-variancehigh_small_policy_gradient-grpo-G8-3steps_seed0_5c8056"
    )


@pytest.mark.parametrize(
    "extra", [["--trainer", "sft"], ["--credit", "none"], ["--trainer", "eval-only"]]
)
def test_distinct_rows_outside_a_policy_gradient_update_is_one_line_and_exit_2(
    extra, tmp_path, capsys
):
    assert main([*ARGV, *extra, "--update-distinct-rows", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --update-distinct-rows changes the policy_gradient trainer's update"
    assert not any(tmp_path.iterdir())
