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
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

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
