"""Credit-filtered SFT (docs/methods.md) end to end on SysDiag with `tiny`."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from creditgym.agents.llm import SamplingConfig
from creditgym.agents.trajectory import TokenBatch
from creditgym.credit.rule_based import RuleBased
from creditgym.models.registry import build_tiny
from creditgym.trainers.policy_gradient import PolicyGradientConfig, PolicyGradientTrainer
from creditgym.trainers.sft import SFT_METRICS, CreditFilteredSFTTrainer, SFTConfig, action_nll
from tests.test_trainer_losses import _trajectory
from tests.test_trainer_pg import Killed, KilledOnCall, strip_times

AGENT = SamplingConfig(constrained=True, max_new_tokens=128, history_len=0)


def test_action_nll_scores_only_action_tokens_and_matches_a_manual_forward():
    loaded = build_tiny()
    batch = TokenBatch.from_trajectories([_trajectory("a", [2, 3])])
    nll = action_nll(loaded.model, batch)
    assert torch.all(nll[batch.action_mask == 0] == 0)
    logits = loaded.model(input_ids=batch.input_ids[:1, :5]).logits
    # Row 0 is prompt (1, 2, 3) then action (10, 11): position 3 predicts token 10.
    expected = -torch.log_softmax(logits[0, 2], dim=-1)[10]
    assert torch.allclose(nll[0, 3], expected, atol=1e-5)


def test_sft_rounds_fit_the_kept_pairs_and_log_the_filter(tmp_path):
    config = SFTConfig(
        rounds=1,
        num_tasks=2,
        group_size=2,
        num_envs=4,
        epochs_per_round=4,
        pairs_per_step=64,
        learning_rate=3e-3,
        min_credit=-1.0,
        seed=1,
    )
    trainer = CreditFilteredSFTTrainer(
        build_tiny(),
        RuleBased(),
        "creditgym/SysDiag-v0",
        {"max_steps": 3},
        AGENT,
        config,
        tmp_path,
    )
    records = trainer.train()
    assert len(records) == 4  # one optimiser step per epoch: all pairs fit in one step
    logged = {key for key in records[0] if not key.startswith("credit/")} - {"step"}
    assert logged == set(SFT_METRICS)
    assert records[0]["sft/kept_pairs"] > 0
    assert 0 < records[0]["sft/kept_fraction"] <= 1
    # Same pairs every epoch: the NLL must fall as the model fits them.
    assert records[-1]["losses/sft"] < records[0]["losses/sft"]
    assert (tmp_path / "checkpoints" / "step_000001" / "state.pt").is_file()


@pytest.mark.parametrize("task_pool", [0, 50])
def test_both_trainers_draw_the_same_tasks_for_the_same_seed(task_pool, tmp_path):
    # One seeding rule (trainers.core): comparing methods across trainers compares them on
    # the same tasks. The SFT trainer used to draw its own.
    common = {"group_size": 1, "task_pool": task_pool, "seed": 5}
    sft = CreditFilteredSFTTrainer(
        build_tiny(),
        RuleBased(),
        "creditgym/SysDiag-v0",
        {},
        AGENT,
        SFTConfig(rounds=3, num_tasks=4, **common),
        tmp_path / "sft",
    )
    pg = PolicyGradientTrainer(
        build_tiny(),
        RuleBased(),
        "creditgym/SysDiag-v0",
        {},
        AGENT,
        PolicyGradientConfig(steps=3, tasks_per_step=4, batching="equal_tasks", **common),
        tmp_path / "pg",
    )
    for iteration in range(3):
        assert sft.task_seeds(iteration) == pg.task_seeds(iteration)
        assert len(set(sft.task_seeds(iteration))) == 4
    assert sft.task_seeds(0) != sft.task_seeds(1)
    sft.log.close()
    pg.log.close()


@pytest.mark.slow
def test_sft_resumed_after_a_kill_equals_an_uninterrupted_run(tmp_path):
    # The kill/resume machinery is trainers.core's, shared with policy gradient; this checks
    # that SFT's round counter, shuffles and weights come back through it too.
    config = SFTConfig(rounds=2, num_tasks=2, group_size=2, num_envs=4, min_credit=-1.0, seed=2)

    def run(run_dir, wrap=lambda credit: credit, resume=False):
        loaded = build_tiny()
        trainer = CreditFilteredSFTTrainer(
            loaded,
            wrap(RuleBased()),
            "creditgym/SysDiag-v0",
            {"max_steps": 2},
            AGENT,
            dataclasses.replace(config, resume=resume),
            run_dir,
        )
        return loaded, trainer.train()

    reference_model, reference_records = run(tmp_path / "a")
    with pytest.raises(Killed):
        run(tmp_path / "b", wrap=lambda credit: KilledOnCall(credit, call=2))
    resumed_model, resumed_records = run(tmp_path / "b", resume=True)
    assert reference_records and strip_times(resumed_records) == strip_times(reference_records)
    for a, b in zip(
        reference_model.model.parameters(), resumed_model.model.parameters(), strict=True
    ):
        assert torch.equal(a, b)
