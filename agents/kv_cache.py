"""A KV cache that grows in place instead of re-concatenating at every decoded token.

transformers' `DynamicLayer.update` runs `torch.cat([cache, new], dim=-2)` for every
layer at every step, copying the whole cache: O(L) bytes per token, O(L^2) per response.
On a CPU that copy is memory-bound and grows with the batch. `GrowingLayer` keeps a
buffer with spare room along the sequence
axis (doubling when full, amortised O(1) per token) and hands attention views of its
filled part, so a step writes only the new keys and values.
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
        them (row selection or repetition, crop, beam reorder); the next append regrows."""
        if self.is_initialized and self.keys is not None and self.keys.numel():
            self._key_buffer, self._value_buffer = self.keys, self.values
            self._length = self.keys.shape[-2]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._resync()

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._resync()

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        self._resync()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._resync()


def growing_cache() -> DynamicCache:
    """An empty `DynamicCache` whose layers are `GrowingLayer`s (created on first use)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache
