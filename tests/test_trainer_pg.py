"""The policy-gradient trainer end to end on SysDiag with the `tiny` model.

Covers: the logged metric names (one list for the code, this test and docs/training.md),
exact-zero gradients of uniform GRPO groups, gradient accumulation equal to one pass, LoRA
changing only the adapter, and a killed run resumed from its checkpoint reaching the same
result as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from peft import PeftModel

from creditgym.agents.llm import SamplingConfig
from creditgym.agents.trajectory import Step, Trajectory
from creditgym.credit.base import CreditOutput
from creditgym.credit.grpo import GRPO
from creditgym.credit.hp_rlvr import HPRLVR
from creditgym.credit.rule_based import RuleBased
from creditgym.models.registry import build_tiny
from creditgym.trainers.activation_checkpointing import ActivationCost
from creditgym.trainers.core import WALL_CLOCK_METRICS, LoraSettings, prepare_policy
from creditgym.trainers.policy_gradient import (
    POLICY_GRADIENT_METRICS,
    PolicyGradientConfig,
    PolicyGradientTrainer,
    micro_batches,
)
from creditgym.trainers.sft import SFT_METRICS

ENV_ID = "creditgym/SysDiag-v0"
ENV_KWARGS = {"max_steps": 3}
AGENT = SamplingConfig(constrained=True, max_new_tokens=128, history_len=0)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "training.md"


def small_config(**changes) -> PolicyGradientConfig:
    settings = {
        "steps": 1,
        "group_size": 2,
        "tasks_per_step": 2,
        "reference_group_size": 2,
        "num_envs": 4,
        "learning_rate": 1e-3,
        "checkpoint_every": 1,
        "seed": 3,
    }
    return PolicyGradientConfig(**{**settings, **changes})


def strip_times(records: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_METRICS} for r in records]


def test_one_iteration_logs_every_metric_to_jsonl_and_tensorboard(tmp_path):
    trainer = PolicyGradientTrainer(
        build_tiny(), RuleBased(), ENV_ID, ENV_KWARGS, AGENT, small_config(kl_coef=0.01), tmp_path
    )
    records = trainer.train()
    assert len(records) == 1
    # Exactly the documented names: a metric added or dropped without the list fails here.
    logged = {key for key in records[0] if not key.startswith("credit/")} - {"step"}
    assert logged == set(POLICY_GRADIENT_METRICS)
    assert {key for key in records[0] if key.startswith("credit/")}  # the module's own
    assert records[0]["rollout/num_trajectories"] == 4
    assert records[0]["rollout/valid_action_ratio"] == 1.0  # constrained decoding
    assert records[0]["charts/grad_norm"] > 0
    on_disk = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert on_disk == records
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert (tmp_path / "final" / "config.json").is_file()


def test_docs_list_every_logged_metric_name_of_both_trainers():
    text = DOCS.read_text(encoding="utf-8")
    names = {*POLICY_GRADIENT_METRICS, *SFT_METRICS}
    missing = sorted(name for name in names if f"`{name}`" not in text)
    assert not missing, f"docs/training.md does not list {missing}"


def test_uniform_grpo_groups_give_exactly_zero_gradient_records(tmp_path):
    # An untrained policy fails every task within 3 steps: every group is uniform, every
    # advantage is 0, and the gradient norm is exactly 0 (HP-RLVR's zero-gradient count).
    trainer = PolicyGradientTrainer(
        build_tiny(), GRPO(), ENV_ID, ENV_KWARGS, AGENT, small_config(steps=2), tmp_path
    )
    records = trainer.train()
    for record in records:
        uniform = record["credit/frac_reward_zero_std"] == 1.0
        assert record["charts/grad_norm_is_zero"] == float(uniform)
        assert (record["charts/grad_norm"] == 0.0) == uniform
    zero = sum(r["charts/grad_norm_is_zero"] for r in records)
    assert records[-1]["charts/zero_grad_fraction"] == zero / len(records)


@pytest.mark.slow
def test_gradient_accumulation_matches_a_single_pass(tmp_path):
    # The gradient handed to the optimiser is compared, not the parameters after it: AdamW's
    # first step moves each weight by about lr * g / (|g| + eps), so an element whose
    # gradient is at rounding level may move by anything up to 2 * lr in either run and
    # an elementwise comparison of the weights tests the processor, not the trainer.
    # Bound: the two runs sum the same float32 terms in a different order (8 micro-batches
    # vs one pass, and BLAS reductions whose blocking depends on the batch shape and the
    # CPU's vector width). Each such sum is within a few hundred ulps (float32 ulp 1.2e-7)
    # of the exact one relative to the gradient's scale, so 1e-5 of the gradient's norm is
    # generous for rounding and still about 1e5 times smaller than a real accumulation bug:
    # a missing 1/k scale changes the gradient by (k - 1) = 7 times its norm.
    gradients, norms = [], []
    for micro in (1, 8):
        loaded = build_tiny()
        # a token budget no trajectory reaches: `micro` alone decides the split
        config = small_config(
            micro_batch_trajectories=micro, micro_batch_tokens=10**7, length_normalise=True
        )
        trainer = PolicyGradientTrainer(
            loaded, RuleBased(), ENV_ID, ENV_KWARGS, AGENT, config, tmp_path / str(micro)
        )
        captured: list[torch.Tensor] = []

        def keep_gradient(optimizer, args, kwargs, captured=captured):
            captured.append(
                torch.cat([p.grad.flatten() for g in optimizer.param_groups for p in g["params"]])
            )

        trainer.optimizer.register_step_pre_hook(keep_gradient)
        records = trainer.train()
        assert len(captured) == 1
        gradients.append(captured[0])
        norms.append(records[0]["charts/grad_norm"])
    single, accumulated = gradients
    assert norms[0] > 0
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)
    scale = single.norm()
    assert (single - accumulated).norm() <= 1e-5 * scale
    # The bound separates a correct accumulation from a wrongly scaled one.
    assert (single - accumulated * 8).norm() > 1.0 * scale


def test_micro_batches_split_by_trajectory_count_and_token_budget():
    def trajectory(*lengths):  # one step per length, its tokens split prompt / action
        steps = [
            Step(
                observation="o",
                action="a",
                prompt_token_ids=(1,) * (n - 1),
                action_token_ids=(2,),
                action_logprobs=(-0.5,),
            )
            for n in lengths
        ]
        return Trajectory(
            env_id="e",
            task_id="t",
            seed=0,
            group_id="g",
            task="",
            initial_observation="",
            steps=tuple(steps),
            success=False,
        )

    batch = [trajectory(10, 10), trajectory(30), trajectory(5), trajectory(100), trajectory(1)]
    # tokens per trajectory: 20, 30, 5, 100, 1
    assert micro_batches(batch, 32, 40) == [slice(0, 1), slice(1, 3), slice(3, 4), slice(4, 5)]
    assert micro_batches(batch, 2, 10**6) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    # a trajectory over the budget goes alone, never dropped
    assert micro_batches(batch, 32, 1) == [slice(i, i + 1) for i in range(5)]
    assert micro_batches([], 4, 100) == []
    # the activation budget: 2 bytes per token plus 1 per token squared, per step
    cost = ActivationCost(per_token=2.0, per_token_squared=1.0)
    # kept bytes per trajectory: 2 x (20 + 100) = 240, 960, 35, 10,200, 3
    assert micro_batches(batch, 32, 10**6, 1000.0, cost) == [
        slice(0, 1),  # 240 + 960 > 1,000
        slice(1, 3),  # 960 + 35
        slice(3, 4),  # over the budget alone: alone, never dropped
        slice(4, 5),
    ]
    assert micro_batches(batch, 32, 10**6, 10**6, cost) == [slice(0, 5)]


def test_lora_changes_the_adapter_and_leaves_base_weights_untouched(tmp_path):
    loaded = build_tiny()
    base_before = {name: p.detach().clone() for name, p in loaded.model.named_parameters()}
    config = small_config(finetune="lora", lora=LoraSettings(rank=4, alpha=8), kl_coef=0.01)
    trainer = PolicyGradientTrainer(
        loaded, RuleBased(), ENV_ID, ENV_KWARGS, AGENT, config, tmp_path
    )
    records = trainer.train()
    assert records[0]["charts/grad_norm"] > 0
    adapter = {n: p for n, p in trainer.policy.model.named_parameters() if "lora_" in n}
    assert adapter and all(p.requires_grad for p in adapter.values())
    # lora_B starts at zero (peft's init): any non-zero entry means the update happened.
    assert any(p.abs().max() > 0 for n, p in adapter.items() if "lora_B" in n)
    base_after = {
        n.replace("base_model.model.", "", 1).replace(".base_layer", ""): p
        for n, p in trainer.policy.model.named_parameters()
        if "lora_" not in n
    }
    assert set(base_after) == set(base_before)
    for name, before in base_before.items():
        assert torch.equal(base_after[name], before), name
    assert (tmp_path / "final" / "adapter_config.json").is_file()


class Killed(Exception):
    """Stands for the process being killed in the middle of an iteration."""


class KilledOnCall:
    """A real credit module whose process 'dies' when it is called for the `call`-th time."""

    def __init__(self, inner, call: int) -> None:
        self.inner, self.call, self.calls = inner, call, 0
        self.name = inner.name
        self.generation_cache = inner.generation_cache  # rollouts fill the module's cache

    def __call__(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        self.calls += 1
        if self.calls == self.call:
            raise Killed
        return self.inner(trajectories)

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state) -> None:
        self.inner.load_state_dict(state)


@pytest.mark.slow
def test_resume_after_a_kill_reaches_the_same_result_as_an_uninterrupted_run(tmp_path):
    config = small_config(steps=3, group_size=1, kl_coef=0.01)

    def run(run_dir, wrap=lambda credit: credit, resume=False):
        loaded = build_tiny()
        # HP-RLVR scores with the policy being trained, as the paper's snapshot does.
        credit = HPRLVR(loaded)
        trainer = PolicyGradientTrainer(
            loaded,
            wrap(credit),
            ENV_ID,
            ENV_KWARGS,
            AGENT,
            dataclasses.replace(config, resume=resume),
            run_dir,
        )
        return loaded, credit, trainer.train()

    reference_model, reference_credit, reference_records = run(tmp_path / "a")
    with pytest.raises(Killed):
        run(tmp_path / "b", wrap=lambda credit: KilledOnCall(credit, call=3))
    resumed_model, resumed_credit, resumed_records = run(tmp_path / "b", resume=True)

    assert len(resumed_records) == 3
    assert strip_times(resumed_records) == strip_times(reference_records)
    for a, b in zip(
        reference_model.model.parameters(), resumed_model.model.parameters(), strict=True
    ):
        assert torch.equal(a, b)
    # HP-RLVR's baseline came back from the checkpoint and moved on identically.
    assert resumed_credit.state_dict() == reference_credit.state_dict()


def test_wrapping_a_policy_in_lora_prints_no_peft_deprecation_warning():
    """peft reads transformers' deprecated `is_gradient_checkpointing` when it wraps a
    model: a FutureWarning in every LoRA run that no user can act on (`peft_quietly`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy = prepare_policy(build_tiny(), "lora", LoraSettings())
    assert isinstance(policy.model, PeftModel)
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]
