"""Learning curves (trainers/curve.py): points at the documented iterations, measured on
the same held-out tasks with the same sampling seed, without touching training, and a
killed run resumed writes the curve an uninterrupted one writes."""

from __future__ import annotations

import json

import pytest

from creditgym.credit.grpo import GRPO
from creditgym.models.registry import build_small
from creditgym.trainers.curve import CURVE_FILE, CurveLog, CurveSettings
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)
from tests.test_trainer_pg import Killed, KilledOnCall

KEYDOOR = "creditgym/KeyDoor-v0"
ENV_KWARGS = {"delay": 1, "max_steps": 5}
AGENT = AgentConfig(temperature=1.0, max_new_tokens=8, history_len=0, constrained=True)
HELD_OUT = tuple(1_000_000 + index for index in range(8))


def curve(every: int) -> CurveSettings:
    return CurveSettings(every=every, seeds=HELD_OUT, agent_seed=7, env_kwargs=ENV_KWARGS)


def test_points_fall_every_n_iterations_and_after_the_last():
    settings = curve(every=2)
    assert [k for k in range(6) if settings.due(k, last_iteration=5)] == [0, 2, 4, 5]
    with pytest.raises(ValueError, match="every 0 iterations"):
        CurveSettings(every=0, seeds=HELD_OUT)
    with pytest.raises(ValueError, match="at least one held-out task"):
        CurveSettings(every=1, seeds=())


def test_log_keeps_points_up_to_the_resumed_iteration_and_drops_a_torn_line(tmp_path):
    path = tmp_path / CURVE_FILE
    path.write_text(
        "".join(json.dumps({"iteration": k, "success_rate": k / 4}) + "\n" for k in (0, 2, 4))
        + '{"iteration": 6, "succ'
    )
    log = CurveLog(tmp_path, resume_iteration=2)
    assert log.iterations == {0, 2}
    assert [point["iteration"] for point in log.read()] == [0, 2]
    log.append({"iteration": 3, "success_rate": 0.5})
    assert [point["iteration"] for point in log.read()] == [0, 2, 3]


def train(run_dir, every: int, wrap=lambda credit: credit, resume: bool = False):
    config = PolicyGradientConfig(
        steps=2,
        group_size=4,
        tasks_per_step=1,
        learning_rate=3e-3,
        finetune="full",
        seed=0,
        resume=resume,
    )
    trainer = PolicyGradientTrainer(
        build_small(), wrap(GRPO()), KEYDOOR, ENV_KWARGS, AGENT, config, run_dir, curve(every)
    )
    records = trainer.train()
    return records, CurveLog(run_dir, resume_iteration=config.steps).read()


def measured(points):
    return [(p["iteration"], p["episodes"], p["success_rate"], p["mean_return"]) for p in points]


@pytest.mark.slow
def test_curve_is_a_pure_measurement_of_the_weights_and_survives_a_kill(tmp_path):
    every_step, every_step_curve = train(tmp_path / "a", every=1)
    assert [p["iteration"] for p in every_step_curve] == [0, 1, 2]
    assert [p["optimizer_step"] for p in every_step_curve] == [0, 1, 2]
    assert all(p["episodes"] == len(HELD_OUT) for p in every_step_curve)

    # Fewer points, same training: the curve neither perturbs the run's RNG streams nor
    # depends on when it was taken (same tasks, same sampling seed at every point).
    sparse, sparse_curve = train(tmp_path / "b", every=2)
    assert [r["charts/grad_norm"] for r in sparse] == [r["charts/grad_norm"] for r in every_step]
    assert measured(sparse_curve) == [measured(every_step_curve)[k] for k in (0, 2)]

    # Killed during iteration 2's credit, then resumed from the checkpoint of iteration 1.
    with pytest.raises(Killed):
        train(tmp_path / "c", every=1, wrap=lambda credit: KilledOnCall(credit, call=2))
    _, resumed_curve = train(tmp_path / "c", every=1, resume=True)
    assert measured(resumed_curve) == measured(every_step_curve)
