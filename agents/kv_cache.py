"""A KV cache that grows in place instead of re-concatenating at every decoded token.

transformers' `DynamicLayer.update` runs `torch.cat([cache, new], dim=-2)` for every
layer at every step, copying the whole cache: O(L) bytes per token, O(L^2) per response.
On a CPU that copy is memory-bound and grows with the batch. `GrowingLayer` keeps a
buffer with spare room along the sequence
axis (doubling when full, amortised O(1) per token) and hands attention views of its
filled part, so a step writes only the new keys and values.

Continuous batching (`agents.batching`) also needs rows to join a running cache and
the all-padding columns on its left to go once the rows that needed them have left:
`join_rows` and `trim_left`.

Teacher-forced re-scoring (`agents.logprobs`) runs a prefix that many rows share once
and lets every row attend to its keys and values: `shared_prefix_cache`, whose layers
store nothing, so activation checkpointing may replay them (`checkpoint_with_cache`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

# Spare positions reserved beyond the prompt at the first update (a typical response).
INITIAL_SPARE = 256


class GrowingLayer(DynamicLayer):
    """`DynamicLayer` with amortised in-place appends; `keys` / `values` are views
    [batch, kv_heads, length, head_dim] of buffers [batch, kv_heads, capacity, head_dim]."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new = key_states.shape[-2]
        needed = self._length + new
        if self._key_buffer is None or needed > self._key_buffer.shape[-2]:
            capacity = max(needed + INITIAL_SPARE, 2 * self._length)
            self._key_buffer = self._grow(self._key_buffer, key_states, capacity)
            self._value_buffer = self._grow(self._value_buffer, value_states, capacity)
        self._key_buffer[..., self._length : needed, :] = key_states
        self._value_buffer[..., self._length : needed, :] = value_states
        self._length = needed
        self.keys = self._key_buffer[..., :needed, :]
        self.values = self._value_buffer[..., :needed, :]
        return self.keys, self.values

    def _grow(self, buffer: torch.Tensor | None, states: torch.Tensor, capacity: int):
        shape = (*states.shape[:-2], capacity, states.shape[-1])
        grown = states.new_empty(shape)
        if buffer is not None:
            grown[..., : self._length, :] = buffer[..., : self._length, :]
        return grown

    def _resync(self) -> None:
        """Adopt `keys` / `values` as the buffers after an inherited operation replaced
        them (row repetition, crop, beam reorder); the next append regrows."""
        if self.is_initialized and self.keys is not None and self.keys.numel():
            self._key_buffer, self._value_buffer = self.keys, self.values
            self._length = self.keys.shape[-2]

    def join_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Append rows [b, kv_heads, length, head_dim] along the batch axis, right-aligned
        with the existing rows: whichever side is shorter is left-padded with zeros
        (finite, and masked out by the caller's attention mask)."""
        width = max(self._length, keys.shape[-2])
        capacity = width + INITIAL_SPARE
        self._key_buffer = _stack_right_aligned(self.keys, keys, width, capacity)
        self._value_buffer = _stack_right_aligned(self.values, values, width, capacity)
        self._length = width
        self.keys = self._key_buffer[..., :width, :]
        self.values = self._value_buffer[..., :width, :]

    def trim_left(self, columns: int) -> None:
        """Forget the first `columns` positions of every row (views: nothing is copied)."""
        self._key_buffer = self._key_buffer[..., columns:, :]
        self._value_buffer = self._value_buffer[..., columns:, :]
        self._length -= columns
        self.keys = self._key_buffer[..., : self._length, :]
        self.values = self._value_buffer[..., : self._length, :]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep rows `indices`, spare room included, so the rows left do not regrow (a
        second copy of the cache) at the next token: rows leave often mid-generation."""
        if getattr(self, "_key_buffer", None) is None:  # nothing stored yet
            super().batch_select_indices(indices)
            return
        self._key_buffer = self._key_buffer[indices]
        self._value_buffer = self._value_buffer[indices]
        self.keys = self._key_buffer[..., : self._length, :]
        self.values = self._value_buffer[..., : self._length, :]

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._resync()

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        self._resync()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._resync()


def _stack_right_aligned(
    top: torch.Tensor, bottom: torch.Tensor, width: int, capacity: int
) -> torch.Tensor:
    """[b1 + b2, heads, capacity, dim] zeros holding `top` then `bottom`, each ending at
    column `width`."""
    out = top.new_zeros((top.shape[0] + bottom.shape[0], *top.shape[1:-2], capacity, top.shape[-1]))
    out[: top.shape[0], ..., width - top.shape[-2] : width, :] = top
    out[top.shape[0] :, ..., width - bottom.shape[-2] : width, :] = bottom
    return out


def join_rows(cache: DynamicCache, other: DynamicCache) -> None:
    """Append the rows of `other` to `cache` in place (both from `growing_cache`, both
    filled); the shorter side is left-padded, so the caller left-pads its masks alike."""
    for layer, extra in zip(cache.layers, other.layers, strict=True):
        layer.join_rows(extra.keys, extra.values)


def trim_left(cache: DynamicCache, columns: int) -> None:
    """Drop the first `columns` positions of every layer of a `growing_cache`."""
    if columns > 0:
        for layer in cache.layers:
            layer.trim_left(columns)


def growing_cache() -> DynamicCache:
    """An empty `DynamicCache` whose layers are `GrowingLayer`s (created on first use)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache


class SharedPrefixLayer(DynamicLayer):
    """A cache layer that stores nothing: `update` returns a fixed prefix's keys and
    values, shared by every row of the batch, followed by the new ones.

    Because an update changes no state, a decoder layer that activation checkpointing
    replays in backward sees the same cache as in its forward pass, and gradients flow
    through `prefix_keys` / `prefix_values` into whatever computed them, summed over the
    rows that attended to them. `last_keys` / `last_values` hold the states of the last
    update (what a pass over the prefix itself records).

    Args:
        keys, values: the prefix, [1, kv_heads, P, head_dim] each; None for no prefix.
    """

    def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None):
        super().__init__()
        self.prefix_keys, self.prefix_values = keys, values
        self.last_keys: torch.Tensor | None = None
        self.last_values: torch.Tensor | None = None
        if keys is not None:
            self.keys, self.values = keys, values
            self.device, self.is_initialized = keys.device, True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.last_keys, self.last_values = key_states, value_states
        if self.prefix_keys is None:
            return key_states, value_states
        rows = key_states.shape[0]
        keys = torch.cat([self.prefix_keys.expand(rows, -1, -1, -1), key_states], dim=-2)
        values = torch.cat([self.prefix_values.expand(rows, -1, -1, -1), value_states], dim=-2)
        return keys, values


def shared_prefix_cache(
    prefix: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> DynamicCache:
    """A `DynamicCache` of `SharedPrefixLayer`s: per layer the prefix's (keys, values),
    each [1, kv_heads, P, head_dim]; None gives empty layers (created on first use)
    that record what a pass writes."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = SharedPrefixLayer
    if prefix is not None:
        cache.layers = [SharedPrefixLayer(keys, values) for keys, values in prefix]
    return cache


@contextmanager
def checkpoint_with_cache(model: nn.Module) -> Iterator[None]:
    """Within the block, decoder layers that recompute their activations in backward
    (`trainers.activation_checkpointing`) keep their cache argument instead of dropping it.

    transformers drops the cache under checkpointing because a writing cache would be
    written twice when backward replays the layer; a `shared_prefix_cache` writes nothing
    the replay depends on, so it is safe to keep -- and only such caches may be passed
    inside this block.
    """
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    try:
        for layer in layers:
            layer._can_checkpoint_with_cache = True
        yield
    finally:
        for layer in layers:
            layer.__dict__.pop("_can_checkpoint_with_cache", None)
