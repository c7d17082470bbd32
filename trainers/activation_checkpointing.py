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

For a model as small as `small` (64 wide, 2 layers) the recompute buys nothing: a
32-rollout KeyDoor micro-batch keeps ~80 MB, and the extra forward was a fifth of the
iteration (benchmarks/perf/bench_small.py). `needs_recompute` estimates what a micro-batch
would keep and recomputes only above `RECOMPUTE_ABOVE_BYTES` (the trainers' "auto").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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


# Recompute when a micro-batch's kept activations would exceed this (the "auto" setting).
RECOMPUTE_ABOVE_BYTES = 1 << 30


def activation_bytes(config: object, row_lengths: Sequence[int], dtype_bytes: int = 4) -> int:
    """Rough bytes a forward with gradients keeps for backward, over rows of these lengths.

    Per decoder layer and token, ~16 hidden-size and 4 intermediate-size values (the
    projections, norms and MLP inputs), plus 2 x heads x L attention values per token
    where the kernel keeps the probabilities. An estimate to choose recompute by, not a
    measurement; None-valued or missing config fields make it infinite (recompute).

    Args:
        config: a transformers model config (hidden_size, intermediate_size,
            num_hidden_layers, num_attention_heads).
        row_lengths: tokens of each row of the micro-batch.
        dtype_bytes: bytes per activation value.
    """
    names = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    values = [getattr(config, name, None) for name in names]
    if any(not isinstance(value, int) for value in values):
        return 1 << 62
    hidden, intermediate, layers, heads = values
    per_layer = sum(
        length * (16 * hidden + 4 * intermediate) + 2 * heads * length * length
        for length in row_lengths
    )
    return dtype_bytes * layers * per_layer


def needs_recompute(setting: bool | None, model: nn.Module, row_lengths: Sequence[int]) -> bool:
    """Whether to recompute activations for one micro-batch: `setting` when given, else
    ("auto") whether `activation_bytes` exceeds RECOMPUTE_ABOVE_BYTES."""
    if setting is not None:
        return setting
    config = getattr(model, "config", None)
    return activation_bytes(config, row_lengths) > RECOMPUTE_ABOVE_BYTES
