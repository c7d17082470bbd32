"""Activation checkpointing for the policy update, with the model left in eval mode.

A forward with gradients keeps every decoder layer's activations for the backward pass:
about 2 MB per token for smollm2-135m with LoRA (one 2,200-token SysDiag trajectory
took ~4.5 GB; a default HP-RLVR run was OOM-killed at 22 GB in its second iteration).
Checkpointing keeps only each layer's input (hidden_size floats per token and layer)
and recomputes the layer during backward: one more forward, the same gradients (Chen et
al. 2016, "Training Deep Nets with Sublinear Memory Cost"; verl and TRL enable it for
actor updates).

transformers checkpoints a `GradientCheckpointingLayer` only while that layer's
`training` flag is set, but the trainers keep the policy in eval mode (no dropout
anywhere, so re-scored log-probs match the sampled ones). `recompute_activations` sets
the flag on the decoder layers alone -- their submodules (attention dropout, LoRA
dropout) stay in eval mode -- and restores every layer as it was afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer


@contextmanager
def recompute_activations(model: nn.Module) -> Iterator[int]:
    """Within the block, `model`'s decoder layers recompute their activations in backward.

    Yields the number of checkpointed layers (0 for a model without transformers'
    checkpointable layers, which then runs unchanged).
    """
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    saved = [
        (
            layer.training,
            layer.gradient_checkpointing,
            layer.__dict__.get("_gradient_checkpointing_func"),
        )
        for layer in layers
    ]
    # non-reentrant: works with inputs that need no grad (frozen embeddings under LoRA)
    # and keyword arguments, and restores the RNG state for the recompute
    checkpoint = partial(torch.utils.checkpoint.checkpoint, use_reentrant=False)
    try:
        for layer in layers:
            layer.training = True  # the flag alone: submodules keep their own mode
            layer.gradient_checkpointing = True
            layer._gradient_checkpointing_func = checkpoint
        yield len(layers)
    finally:
        for layer, (training, enabled, func) in zip(layers, saved, strict=True):
            layer.training = training
            layer.gradient_checkpointing = enabled
            if func is None:
                layer.__dict__.pop("_gradient_checkpointing_func", None)
            else:
                layer._gradient_checkpointing_func = func
