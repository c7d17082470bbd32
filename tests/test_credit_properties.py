"""Contract properties every registered credit module must hold (credit/base.py)."""

import copy

import numpy as np
import pytest
import torch

from creditgym.agents.trajectory import TokenBatch, Trajectory
from creditgym.credit import REGISTRY, CreditContext, build, resolve
from creditgym.models.registry import build_tiny
from tests.credit_cases import CASE_MODULES, scripted_trajectory, tokenised


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return build_tiny()


@pytest.fixture(scope="module")
def sharp(tiny):
    """The tiny model with logits scaled x1000: log-probs down to about -1e4."""
    model = copy.deepcopy(tiny)
    with torch.no_grad():
        model.model.get_output_embeddings().weight.mul_(1000.0)
    return model


def fresh(name, model):
    """A fresh module, built as the command line builds it, with `model` as the policy."""
    return build(REGISTRY[name], CreditContext(policy=model))


def mixed_batch(loaded) -> list[Trajectory]:
    """Two groups, tokenised and scripted steps, a one-step and a zero-step trajectory."""
    return [
        tokenised(scripted_trajectory("g1", [0.0, -0.1, 1.0], True, key_steps=[0, 1, 1]), loaded),
        tokenised(scripted_trajectory("g1", [0.0, 0.0], False, key_steps=[1, 0]), loaded, -1e30),
        scripted_trajectory("g1", [0.0, 0.0, 1.0], True, observations=["g1 state 0", "x", "y"]),
        scripted_trajectory("g2", [1.0], True, key_steps=[1]),
        scripted_trajectory("g2", [], False),
        tokenised(scripted_trajectory("g3", [0.0, 0.0], False), loaded),
    ]


def check_contract(batch, output):
    assert len(output.step_advantages) == len(batch) == len(output.token_advantages)
    for trajectory, steps, tokens in zip(
        batch, output.step_advantages, output.token_advantages, strict=True
    ):
        assert steps.shape == (trajectory.length,) and steps.dtype == np.float32
        assert np.all(np.isfinite(steps))
        assert len(tokens) == trajectory.length
        for step, values in zip(trajectory.steps, tokens, strict=True):
            assert values.shape == (len(step.action_token_ids),) and values.dtype == np.float32
            assert np.all(np.isfinite(values))
    assert all(np.isfinite(value) for value in output.metrics.values())
    if any(trajectory.length for trajectory in batch):
        token_batch = TokenBatch.from_trajectories(batch)
        placed = token_batch.scatter(output.token_advantages)
        assert torch.all(placed[token_batch.action_mask == 0] == 0)


@pytest.mark.parametrize("name", CASE_MODULES)
def test_contract_on_mixed_batch_with_extreme_logprobs(name, sharp):
    batch = mixed_batch(sharp)
    check_contract(batch, fresh(name, sharp)(batch))


@pytest.mark.parametrize("name", CASE_MODULES)
def test_empty_batch_and_single_one_step_trajectory(name, tiny):
    check_contract([], fresh(name, tiny)([]))
    single = [tokenised(scripted_trajectory("solo", [1.0], True), tiny)]
    check_contract(single, fresh(name, tiny)(single))


@pytest.mark.parametrize("name", CASE_MODULES)
def test_all_equal_rewards_give_finite_output(name, tiny):
    batch = [tokenised(scripted_trajectory("g", [0.0, 1.0], True), tiny) for _ in range(3)]
    output = fresh(name, tiny)(batch)
    check_contract(batch, output)
    if name in ("grpo", "gigpo"):  # uniform group, identical states: no signal at all
        assert all(not np.any(values) for values in output.step_advantages)


@pytest.mark.parametrize("name", CASE_MODULES)
def test_batch_permutation_equivariance(name, tiny):
    batch = mixed_batch(tiny)
    order = [3, 0, 5, 1, 4, 2]
    original = fresh(name, tiny)(batch)
    permuted = fresh(name, tiny)([batch[i] for i in order])
    for position, i in enumerate(order):
        np.testing.assert_allclose(
            permuted.step_advantages[position], original.step_advantages[i], atol=1e-4
        )
        for ours, reference in zip(
            permuted.token_advantages[position], original.token_advantages[i], strict=True
        ):
            np.testing.assert_allclose(ours, reference, atol=1e-4)


@pytest.mark.parametrize("name", CASE_MODULES)
def test_state_dict_round_trip(name, tiny):
    module = fresh(name, tiny)
    module([scripted_trajectory("g", [1.0], True)])
    restored = fresh(name, tiny)
    restored.load_state_dict(module.state_dict())
    assert restored.state_dict() == module.state_dict()


def test_registry_names_and_errors():
    assert {"grpo", "rule_based", "hcapo", "hp_rlvr", "gigpo"} <= set(REGISTRY)
    assert all(cls.name == name for name, cls in REGISTRY.items())
    with pytest.raises(KeyError, match=r"valid: .*grpo"):
        resolve("gpro")
    assert resolve("creditgym.credit.grpo:GRPO") is REGISTRY["grpo"]
