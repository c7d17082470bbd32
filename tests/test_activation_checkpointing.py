"""Activation checkpointing of the policy update: same gradients, layers recomputed,
the model's modes untouched."""

from __future__ import annotations

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from creditgym.agents.models import build_small, build_tiny
from creditgym.trainers.activation_checkpointing import (
    RECOMPUTE_ABOVE_BYTES,
    activation_bytes,
    needs_recompute,
    recompute_activations,
)


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


def test_auto_recomputes_only_where_the_activations_would_be_large():
    small_config = build_small().model.config  # 64 wide, 2 layers, 4 heads
    keydoor_micro_batch = [95] * 330  # a 32-rollout KeyDoor update: 330 steps of ~95 tokens
    kept = activation_bytes(small_config, keydoor_micro_batch)
    # by hand: 4 bytes x 2 layers x 330 x (95 x (16 x 64 + 4 x 128) + 2 x 4 x 95^2)
    assert kept == 4 * 2 * 330 * (95 * (16 * 64 + 4 * 128) + 2 * 4 * 95 * 95)
    assert kept < RECOMPUTE_ABOVE_BYTES
    assert not needs_recompute(None, build_small().model, keydoor_micro_batch)
    # `tiny`'s byte-level SysDiag rows (~3,400 tokens): one 6-step trajectory is over 1 GiB
    assert needs_recompute(None, build_tiny().model, [3400] * 6)
    assert needs_recompute(True, build_small().model, [1]) is True
    assert needs_recompute(False, build_tiny().model, [3400] * 6) is False
    # a model whose config does not say its sizes is always recomputed under auto
    assert needs_recompute(None, torch.nn.Linear(2, 2), [1])
