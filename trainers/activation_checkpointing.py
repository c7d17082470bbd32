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
iteration (benchmarks/perf/bench_small.py). For a pretrained policy it is about a third of
the update, so the trainers' "auto" prefers smaller micro-batches to it: it measures what
the model keeps per token (`measure_activation_cost`), splits micro-batches to keep under
`RECOMPUTE_ABOVE_BYTES`, and recomputes only a trajectory over it alone
(`needs_recompute`). Gradient accumulation over micro-batches is exact, so either way the
gradient is the same up to float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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


# Most bytes of kept activations a micro-batch may hold without recompute (the "auto"
# setting): under it a micro-batch keeps them, over it a micro-batch of more than one
# trajectory is split, and a single trajectory over it recomputes.
RECOMPUTE_ABOVE_BYTES = 1 << 30

# Lengths of the probe rows `measure_activation_cost` runs (three: a quadratic fit).
PROBE_LENGTHS = (32, 64, 128)


@dataclass(frozen=True)
class ActivationCost:
    """Bytes a forward with gradients keeps for backward, as a function of row length:
    per_token x L + per_token_squared x L^2 per row (the square term is attention that
    keeps its [heads, L, L] probabilities; flash kernels keep none)."""

    per_token: float
    per_token_squared: float

    def bytes(self, row_lengths: Iterable[int]) -> float:
        """Estimated kept bytes of rows of these lengths."""
        return sum(
            self.per_token * length + self.per_token_squared * length * length
            for length in row_lengths
        )


def _kept_bytes(model: nn.Module, length: int) -> float:
    """Bytes per row that a forward of `length`-token rows saves for backward, each
    storage counted once and the parameters' own storages not at all. Two rows, one
    left-padded, with an attention mask: the update's layout, whose masked attention
    may keep what an unmasked row's flash kernel does not (on `tiny`, 2 x 2,048 masked
    tokens kept 107 MB, a linear fit of unmasked rows said 42 MB)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    device = next(model.parameters()).device
    input_ids = torch.ones((2, length), dtype=torch.long, device=device)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, 0] = 0
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1, use_cache=False)
    return sum(storages.values()) / 2


def measure_activation_cost(model: nn.Module) -> ActivationCost:
    """What `model` keeps for backward per row, measured, not modelled: forwards of
    padded rows at `PROBE_LENGTHS` with the saved tensors counted (`_kept_bytes`), and the
    linear and square terms fitted through the three (a constant, the output layer's
    one position, drops out). Measured, because precision and fusion decide it:
    smollm2-135m + LoRA keeps about 1.0 MB per token in float32 and 0.64 MB with
    bfloat16 products and the fused gated MLP (`models.precision`). A model whose
    forward cannot run on a plain row of ids (not a causal LM) gets an infinite cost:
    auto then recomputes, as it would for any model it cannot size.
    """
    try:
        kept = [_kept_bytes(model, length) for length in PROBE_LENGTHS]
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return ActivationCost(math.inf, 0.0)
    (a, b, c), (ka, kb, kc) = PROBE_LENGTHS, kept
    first, second = (kb - ka) / (b - a), (kc - kb) / (c - b)  # slopes over two spans
    square = max(0.0, (second - first) / (c - a))
    return ActivationCost(max(0.0, first - square * (a + b)), square)


def needs_recompute(
    setting: bool | None, cost: ActivationCost | None, row_lengths: Sequence[int]
) -> bool:
    """Whether to recompute activations for one micro-batch: `setting` when given, else
    ("auto") whether its estimated kept bytes exceed RECOMPUTE_ABOVE_BYTES (`cost` is
    read only then: the trainer measures it only for auto)."""
    if setting is not None:
        return setting
    if cost is None:
        raise ValueError("auto activation checkpointing needs the policy's measured cost")
    return cost.bytes(row_lengths) > RECOMPUTE_ABOVE_BYTES
