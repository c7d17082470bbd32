"""The credit contract (credit/base.py): building from one context, third-party modules
through `benchmarks.run --credit module:Class`, and non-finite input refused."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch

import creditgym.trainers.policy_gradient as policy_gradient
from creditgym.agents.trajectory import Trajectory
from creditgym.benchmarks.run import main
from creditgym.credit import REGISTRY, CreditContext, CreditModule, NonFiniteError, build, resolve
from creditgym.credit.base import (
    CreditModuleBase,
    CreditOutput,
    broadcast_to_tokens,
    check_finite_advantages,
    check_finite_rewards,
)
from creditgym.credit.options import NoOptions
from creditgym.models.registry import build_tiny
from creditgym.trainers.checkpoint import latest_checkpoint, load_checkpoint
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)
from creditgym.trainers.sft import CreditFilteredSFTTrainer, SFTConfig
from tests.credit_cases import CASE_MODULES, scripted_trajectory
from tests.example_credit import ReturnToGo

ENV_ID = "creditgym/SysDiag-v0"
THIS = "tests.test_credit_contract"
# A command-line training run as small as the trainers allow: `tiny`, one iteration of
# 8 one-step rollouts, one evaluation episode, no samples.
TINY_RUN = (
    "--model", "tiny", "--steps", "1", "--tasks-per-step", "1", "--max-episode-steps", "1",
    "--eval-episodes", "1", "--sample-group-size", "0", "--max-new-tokens", "16",
)  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return build_tiny()


class NaNAdvantages(CreditModuleBase):
    """Breaks the contract: every advantage is NaN (a module bug the trainers must stop)."""

    name = "nan_advantages"
    reads = frozenset()
    default_group_size = 1

    def compute(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        steps = [np.full(t.length, np.nan, dtype=np.float32) for t in trajectories]
        return CreditOutput(steps, broadcast_to_tokens(trajectories, steps))


class ProtocolOnly:
    """Implements `CreditModule` without subclassing the base (credit 1 for every step)."""

    name = "protocol_only"
    reads: frozenset[str] = frozenset()
    default_group_size = 4
    needs_policy = False
    conventions = ("creditgym",)
    Options = NoOptions
    options = NoOptions()
    generation_cache = None

    @classmethod
    def from_context(cls, context: CreditContext) -> ProtocolOnly:
        return cls()

    def __call__(self, trajectories: Sequence[Trajectory]) -> CreditOutput:
        steps = [np.ones(t.length, dtype=np.float32) for t in trajectories]
        return CreditOutput(steps, broadcast_to_tokens(trajectories, steps))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        del state


class ReturnsNothing(ProtocolOnly):
    @classmethod
    def from_context(cls, context: CreditContext) -> Any:
        return object()


class NotACreditModule:
    """A class with none of the contract."""


# --- building -------------------------------------------------------------------------


def test_default_group_sizes_and_policy_needs_live_on_the_classes():
    assert REGISTRY["hp_rlvr"].default_group_size == 1
    assert all(REGISTRY[n].default_group_size == 8 for n in ("grpo", "gigpo", "hcapo"))
    assert {name for name, cls in REGISTRY.items() if cls.needs_policy} == {
        "hcapo",
        "hcapo_seed",
        "hp_rlvr",
        "oracle",  # the policy's exact action table
        "hca",
    }


def test_build_passes_the_context_to_hindsight_modules(tiny):
    context = CreditContext(tiny, history_len=0, generation_cache_bytes=0)
    module = build(REGISTRY["hp_rlvr"], context)
    assert module.model is tiny and module.history_len == 0 and module.generation_cache is None
    cached = build(REGISTRY["hcapo"], CreditContext(tiny, generation_cache_bytes=1 << 20))
    assert cached.generation_cache.budget_bytes == 1 << 20
    with pytest.raises(ValueError, match="hcapo scores with the policy and needs a model"):
        build(REGISTRY["hcapo"], CreditContext())


def test_a_module_written_to_the_protocol_alone_is_built_and_checked():
    module = build(ProtocolOnly, CreditContext())
    assert isinstance(module, CreditModule)
    batch = [scripted_trajectory("g", [0.0, 1.0], True)]
    np.testing.assert_array_equal(module(batch).step_advantages[0], [1.0, 1.0])
    with pytest.raises(TypeError, match="returned an object without name, default_group_size"):
        build(ReturnsNothing, CreditContext())
    with pytest.raises(KeyError, match="lacks name, default_group_size, needs_policy"):
        resolve(f"{THIS}:NotACreditModule")
    with pytest.raises(KeyError, match="is not a class"):
        resolve(f"{THIS}:THIS")


def test_the_readme_example_keeps_its_baseline_across_batches_and_checkpoints():
    module = build(ReturnToGo, CreditContext())
    batch = [scripted_trajectory("g", [0.0, 1.0], True), scripted_trajectory("g", [0.0], False)]
    first = module(batch)
    # G_t with gamma 0.95 and baseline 0: [0.95, 1.0] and [0.0].
    np.testing.assert_allclose(first.step_advantages[0], [0.95, 1.0], rtol=1e-6)
    # Baseline after the batch: 0.9 * 0 + 0.1 * mean(1, 0) = 0.05.
    assert module.state_dict() == {"baseline": pytest.approx(0.05)}
    restored = ReturnToGo()
    restored.load_state_dict(module.state_dict())
    np.testing.assert_allclose(restored(batch).step_advantages[1], [-0.05], rtol=1e-6)


# --- non-finite input -----------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e39])
@pytest.mark.parametrize("name", CASE_MODULES)
def test_every_module_refuses_a_non_finite_reward_before_any_credit(name, bad, tiny):
    module = build(REGISTRY[name], CreditContext(tiny))
    state = copy.deepcopy(module.state_dict())
    batch = [
        scripted_trajectory("g", [0.0, 1.0], True),
        scripted_trajectory("g", [0.0, bad, 0.0], False, task_id="task-7"),
    ]
    with pytest.raises(NonFiniteError, match=r"trajectory 1 \(task 'task-7'.*step 1: reward"):
        module(batch)
    assert module.state_dict() == state  # HP-RLVR's baseline did not move


def test_finite_rewards_whose_return_leaves_float32_are_refused():
    batch = [scripted_trajectory("g", [3e38, 3e38], True)]
    with pytest.raises(NonFiniteError, match=r"trajectory 0 .*: return 6e\+38 over its 2 steps"):
        check_finite_rewards(batch)
    check_finite_rewards([scripted_trajectory("g", [3e38, -3e38], True)])  # sums to 0: fine


def test_non_finite_advantages_are_named_by_trajectory_and_step():
    batch = [scripted_trajectory("g", [0.0], True), scripted_trajectory("h", [0.0, 1.0], True)]
    steps = [np.zeros(1, np.float32), np.array([0.0, np.inf], np.float32)]
    with pytest.raises(NonFiniteError, match=r"trajectory 1 \(task 'task-0', group 'h'\) step 1"):
        check_finite_advantages(batch, CreditOutput(steps, broadcast_to_tokens(batch, steps)))


def one_step_config(**changes: Any) -> PolicyGradientConfig:
    settings = {"steps": 1, "group_size": 1, "tasks_per_step": 1, "reference_group_size": 1}
    return PolicyGradientConfig(num_envs=1, learning_rate=1e-3, **{**settings, **changes})


AGENT = AgentConfig(constrained=True, max_new_tokens=16, history_len=0)


def parameters_of(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.params]


def test_policy_gradient_refuses_nan_advantages_and_leaves_the_weights(tmp_path):
    trainer = PolicyGradientTrainer(
        build_tiny(), NaNAdvantages(), ENV_ID, {"max_steps": 1}, AGENT, one_step_config(), tmp_path
    )
    before = parameters_of(trainer)
    with pytest.raises(NonFiniteError, match=r"trajectory 0 .* step 0: the credit module gave"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, parameters_of(trainer), strict=True))


def test_policy_gradient_refuses_a_non_finite_loss_before_the_step(tmp_path, monkeypatch):
    def infinite_surrogate(new_logprobs, old_logprobs, advantages, clip_eps):
        loss = torch.full_like(new_logprobs, math.inf) + 0.0 * new_logprobs
        return loss, torch.zeros_like(new_logprobs)

    monkeypatch.setattr(policy_gradient, "clipped_surrogate", infinite_surrogate)
    trainer = PolicyGradientTrainer(
        build_tiny(), ProtocolOnly(), ENV_ID, {"max_steps": 1}, AGENT, one_step_config(), tmp_path
    )
    before = parameters_of(trainer)
    with pytest.raises(NonFiniteError, match=r"optimiser step 1: loss (nan|inf) on tasks"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, parameters_of(trainer), strict=True))


def test_sft_refuses_nan_credit_instead_of_keeping_its_steps(tmp_path):
    config = SFTConfig(rounds=1, num_tasks=1, group_size=1, num_envs=1, min_credit=0.0)
    trainer = CreditFilteredSFTTrainer(
        build_tiny(), NaNAdvantages(), ENV_ID, {"max_steps": 1}, AGENT, config, tmp_path
    )
    with pytest.raises(NonFiniteError, match="the credit module gave a non-finite advantage"):
        trainer.train()


# --- the command line -----------------------------------------------------------------


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_plug_in_without_the_contract_is_one_line_and_exit_2(capsys, tmp_path):
    argv = ["--credit", f"{THIS}:NotACreditModule", "--model", "tiny", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "lacks name, default_group_size" in one_error_line(capsys)


def test_a_plug_in_convention_it_does_not_offer_is_refused_before_any_work(capsys, tmp_path):
    argv = ["--credit", "tests.example_credit:ReturnToGo", "--credit-convention", "trl"]
    assert main([*argv, "--model", "tiny", "--out", str(tmp_path / "runs")]) == 2
    assert "--credit-convention of tests.example_credit:ReturnToGo" in one_error_line(capsys)
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


@pytest.mark.slow  # trains `tiny` for one iteration through the command line
def test_the_readme_module_trains_through_the_command_line_and_checkpoints(tmp_path):
    credit_path = "tests.example_credit:ReturnToGo"
    assert main(["--credit", credit_path, *TINY_RUN, "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    assert "-G1-" in run_dir.name  # the class's default_group_size, no --group-size given
    state = load_checkpoint(latest_checkpoint(run_dir))
    assert set(state["credit"]) == {"baseline"}
    # Moved off its initial 0: a one-step SysDiag episode returns +1 (fixed) or -0.01 (the
    # step cost), never 0, so the checkpoint holds the module's state after the batch.
    assert math.isfinite(state["credit"]["baseline"]) and state["credit"]["baseline"] != 0.0


@pytest.mark.slow  # one rollout iteration of `tiny` through the command line
def test_nan_advantages_stop_a_command_line_run_with_one_line_and_exit_2(capsys, tmp_path):
    assert main(["--credit", f"{THIS}:NaNAdvantages", *TINY_RUN, "--out", str(tmp_path)]) == 2
    assert "non-finite advantage; refusing the optimiser step" in one_error_line(capsys)
