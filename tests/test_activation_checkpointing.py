"""Activation checkpointing of the policy update: same gradients, layers recomputed,
the model's modes untouched."""

from __future__ import annotations

import pytest
import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from creditgym.models.precision import use_bfloat16_matmuls
from creditgym.models.registry import build_tiny
from creditgym.trainers.activation_checkpointing import (
    RECOMPUTE_ABOVE_BYTES,
    ActivationCost,
    _kept_bytes,
    measure_activation_cost,
    needs_recompute,
    recompute_activations,
)
from creditgym.trainers.core import LoraSettings, prepare_policy


def loss_and_grads(model, input_ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=input_ids, use_cache=False).logits
    loss = torch.log_softmax(logits.float(), -1)[..., 7].mean()
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters() if p.requires_grad]


def test_checkpointed_update_recomputes_layers_and_gives_the_same_gradients():
    torch.manual_seed(0)
    loaded = build_tiny()
    model = loaded.model
    model.requires_grad_(True)
    model.eval()  # as the trainers keep it
    input_ids = torch.randint(0, 200, (2, 40))
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    calls = []
    for layer in layers:  # count runs of a submodule inside the checkpointed `forward`
        forward = layer.mlp.forward
        layer.mlp.forward = lambda x, forward=forward: calls.append(1) or forward(x)

    plain_loss, plain_grads = loss_and_grads(model, input_ids)
    plain_calls, calls[:] = len(calls), []
    with recompute_activations(model) as checkpointed:
        assert checkpointed == len(layers) > 0
        loss, grads = loss_and_grads(model, input_ids)
        # submodules stay in eval mode: only the layers' own flag is set
        assert not any(m.training for m in model.modules() if m not in layers)
    assert plain_calls == len(layers)
    assert len(calls) == 2 * len(layers)  # each layer ran again during backward
    assert loss == plain_loss
    for a, b in zip(plain_grads, grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert not model.training and not any(layer.training for layer in layers)
    assert not any(layer.gradient_checkpointing for layer in layers)


def test_measured_cost_predicts_what_a_padded_forward_keeps():
    # the fit comes from three probe lengths; a fourth length and another row count are
    # predicted to within 2 % (the constant, the output layer's position, is left out)
    model = prepare_policy(build_tiny(), "auto", LoraSettings()).model
    cost = measure_activation_cost(model)
    assert cost.per_token > 0 and cost.per_token_squared > 0  # masked attention is quadratic
    for length in (200, 1024):
        assert _kept_bytes(model, length) == pytest.approx(cost.bytes([length]), rel=0.02)
    assert cost.bytes([300, 500]) == cost.bytes([300]) + cost.bytes([500])


def test_fused_bfloat16_mlp_keeps_less_per_token():
    unfused = prepare_policy(build_tiny(), "lora", LoraSettings()).model
    loaded = build_tiny()
    use_bfloat16_matmuls(loaded.model)
    fused = prepare_policy(loaded, "lora", LoraSettings()).model
    # tiny's MLP is 4x its width: three float32 copies became two bfloat16 inputs
    assert (
        measure_activation_cost(fused).per_token < 0.8 * measure_activation_cost(unfused).per_token
    )


def test_auto_recomputes_only_a_micro_batch_over_the_budget():
    cost = ActivationCost(per_token=1000.0, per_token_squared=8.0)
    keydoor_micro_batch = [95] * 330
    assert cost.bytes(keydoor_micro_batch) < RECOMPUTE_ABOVE_BYTES
    assert not needs_recompute(None, cost, keydoor_micro_batch)
    assert needs_recompute(None, cost, [3400] * 200)
    assert needs_recompute(True, cost, [1]) is True
    assert needs_recompute(False, cost, [3400] * 200) is False
    # a model that is not a causal LM cannot be sized: auto always recomputes it
    unsized = measure_activation_cost(torch.nn.Linear(2, 2))
    assert needs_recompute(None, unsized, [1])
