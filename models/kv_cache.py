"""A KV cache that grows in place instead of re-concatenating at every decoded token.

transformers' `DynamicLayer.update` runs `torch.cat([cache, new], dim=-2)` for every
layer at every step, copying the whole cache: O(L) bytes per token, O(L^2) per response.
On a CPU that copy is memory-bound and grows with the batch. `GrowingLayer` keeps a
store with spare room along the sequence axis (doubling when full, amortised O(1) per
token) and hands attention views of its filled part, so a step writes only the new keys
and values.

Continuous batching (`models.batching`) also needs rows to leave and join a running
cache and the all-padding columns on its left to go once the rows that needed them have
left: `batch_select_indices` (in `fill_holes` order), `join_rows` and `trim_left`. Rows
come and go every few tokens in an agent's rollout (an action is short), so these work
in place on the rows that change: re-copying the whole cache at each of them took about
a quarter of a smollm2-135m KeyDoor rollout.

Teacher-forced re-scoring (`models.logprobs`) runs a prefix that many rows share once
and lets every row attend to its keys and values: `shared_prefix_cache`, whose layers
store nothing, so activation checkpointing may replay them (`checkpoint_with_cache`).

Every forward that takes a cache names it with `cache_keyword(model)`: transformers
renamed the argument from `past_key_values` to `cache` within the range creditgym
supports (5.10 knows only the old name and silently drops `cache` into its unused
keyword arguments, so the forward ran as if no prefix were there; 5.24 warns on the old
name, which goes in 5.40).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

from creditgym.models.masked_logits import causal_lm

# Spare positions reserved beyond the prompt at the first update (a typical response).
INITIAL_SPARE = 256
# transformers' names of a forward's KV-cache argument, the current one first.
CACHE_KEYWORDS = ("cache", "past_key_values")


@functools.cache
def _cache_keyword_of(forward_owner: type) -> str:
    parameters = inspect.signature(forward_owner.forward).parameters
    for keyword in CACHE_KEYWORDS:
        if keyword in parameters:
            return keyword
    raise TypeError(f"{forward_owner.__name__}.forward takes no KV cache ({CACHE_KEYWORDS})")


def cache_keyword(model: nn.Module) -> str:
    """The keyword `model`'s forward takes its KV cache under ("cache" or
    "past_key_values", whichever the installed transformers names), looked up on the
    causal LM inside a peft wrapper (whose own forward takes **kwargs).

    Raises:
        TypeError: the forward names neither.
    """
    return _cache_keyword_of(type(causal_lm(model)))


class GrowingLayer(DynamicLayer):
    """`DynamicLayer` with amortised in-place appends and in-place row upkeep.

    `keys` / `values` are views [rows, kv_heads, length, head_dim] of stores
    [row_capacity, kv_heads, capacity, head_dim]: spare room along the sequence axis (so
    a decoded token writes only its own keys and values) and along the batch axis (rows
    that left keep their room, so rows joining later are written in place). A store is
    copied only when it is outgrown; when rows leave, only the rows whose position changes
    move (`fill_holes` keeps that to the rows behind them), and only their filled columns.
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._key_store: torch.Tensor | None = None
        self._value_store: torch.Tensor | None = None
        self._rows = 0
        self._length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self._key_store is None:
            self._rows = key_states.shape[0]
        new = key_states.shape[-2]
        needed = self._length + new
        if self._key_store is None or needed > self._key_store.shape[-2]:
            capacity = max(needed + INITIAL_SPARE, 2 * self._length)
            self._key_store = self._grow(self._key_store, key_states, capacity)
            self._value_store = self._grow(self._value_store, value_states, capacity)
        self._key_store[: self._rows, :, self._length : needed] = key_states
        self._value_store[: self._rows, :, self._length : needed] = value_states
        self._length = needed
        self._views()
        return self.keys, self.values

    def _views(self) -> None:
        self.keys = self._key_store[: self._rows, :, : self._length]
        self.values = self._value_store[: self._rows, :, : self._length]

    def _grow(self, store: torch.Tensor | None, states: torch.Tensor, capacity: int):
        grown = states.new_empty((self._rows, *states.shape[1:-2], capacity, states.shape[-1]))
        if store is not None:
            grown[:, :, : self._length] = store[: self._rows, :, : self._length]
        return grown

    def _resync(self) -> None:
        """Adopt `keys` / `values` as the stores after an inherited operation replaced
        them (row repetition, crop, beam reorder); the next append regrows."""
        if self.is_initialized and self.keys is not None and self.keys.numel():
            self._key_store, self._value_store = self.keys, self.values
            self._rows, self._length = self.keys.shape[0], self.keys.shape[-2]

    def join_rows(
        self, keys: torch.Tensor, values: torch.Tensor, rows: Sequence[int] | None = None
    ) -> None:
        """Append rows of `keys` / `values` [b, kv_heads, length, head_dim] along the batch
        axis: `rows` picks which, in order, repeats allowed (rows whose prompts are equal
        share one prefill); None takes all. They are right-aligned with the existing rows:
        whichever side is shorter is left-padded with zeros (finite, and masked out by the
        caller's attention mask). An empty layer takes them as its first rows.

        In place when the store has room for them and they are no longer than the
        existing rows; otherwise both sides go to a new store."""
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        length = keys.shape[-2]
        total = self._rows + (keys.shape[0] if rows is None else len(rows))
        room = self._key_store.shape[0] if self._key_store is not None else 0
        if length <= self._length and total <= room:
            for store, states in ((self._key_store, keys), (self._value_store, values)):
                _place_right_aligned(store[self._rows : total], states, self._length, rows)
        else:
            width = max(self._length, length)
            shape = (total, *keys.shape[1:-2], width + INITIAL_SPARE, keys.shape[-1])
            stores = []
            for old, states in ((self.keys, keys), (self.values, values)):
                store = states.new_empty(shape)
                if self._rows:
                    _place_right_aligned(store[: self._rows], old, width)
                _place_right_aligned(store[self._rows :], states, width, rows)
                stores.append(store)
            self._key_store, self._value_store = stores
            self._length = width
        self._rows = total
        self._views()

    def trim_left(self, columns: int) -> None:
        """Forget the first `columns` positions of every row (views: nothing is copied)."""
        self._key_store = self._key_store[:, :, columns:]
        self._value_store = self._value_store[:, :, columns:]
        self._length -= columns
        self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep rows `indices` (a 1-D index tensor, row k of the result is row
        indices[k]), spare room included, so the rows left do not regrow at the next token.

        Distinct rows are selected in place: only the rows whose position changes move,
        and only their filled columns (`fill_holes` orders a selection so that as few
        move as possible). Repeated rows copy the filled columns into a new store."""
        if getattr(self, "_key_store", None) is None:  # nothing stored yet
            super().batch_select_indices(indices)
            return
        rows = indices.tolist()
        if len(set(rows)) == len(rows) and all(0 <= row < self._rows for row in rows):
            moves = [(k, row) for k, row in enumerate(rows) if row != k]
            overlap = bool({k for k, _ in moves} & {row for _, row in moves})
            for store in (self._key_store, self._value_store):
                filled = store[:, :, : self._length]
                # copied first where a move would overwrite a row a later move reads
                sources = [filled[row].clone() if overlap else filled[row] for _, row in moves]
                for (k, _), source in zip(moves, sources, strict=True):
                    filled[k] = source  # row by row: an indexed write was ~10x slower
        else:
            stores = []
            for store in (self._key_store, self._value_store):
                selected = store.new_empty((len(rows), *store.shape[1:]))
                selected[:, :, : self._length] = store[indices, :, : self._length]
                stores.append(selected)
            self._key_store, self._value_store = stores
        self._rows = len(rows)
        self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._resync()

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        self._resync()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._resync()


def _place_right_aligned(
    out: torch.Tensor, states: torch.Tensor, width: int, rows: Sequence[int] | None = None
) -> None:
    """Write `states` [b, heads, length, dim] (or its rows `rows`, in order) into `out`
    [len, heads, >= width, dim] so that each ends at column `width`, zeroing the columns
    before it (the padding must be finite: a masked score weighs it by 0, and 0 x NaN
    would still be NaN)."""
    pad = width - states.shape[-2]
    out[:, :, :pad].zero_()
    if rows is None:
        out[:, :, pad:width] = states
        return
    for k, row in enumerate(rows):  # row by row: an indexed read copies them twice
        out[k, :, pad:width] = states[row]


def fill_holes(keep: Sequence[int]) -> list[int]:
    """An order of the rows `keep` (increasing batch indices) that moves the fewest rows
    in a cache: a kept row already within the first len(keep) positions stays there, and
    the kept rows beyond fill the positions of the rows that left, in order.

    >>> fill_holes([0, 2, 3, 5])  # rows 1 and 4 leave: row 5 takes position 1
    [0, 5, 2, 3]
    """
    size = len(keep)
    staying = {row for row in keep if row < size}
    tail = iter(row for row in keep if row >= size)
    return [row if row in staying else next(tail) for row in range(size)]


def join_rows(cache: DynamicCache, other: DynamicCache, rows: Sequence[int] | None = None) -> None:
    """Append rows of `other` to `cache` in place (both from `growing_cache`; `other`
    filled, `cache` filled or empty): `rows` picks which, in order, repeats allowed;
    None takes all. The shorter side is left-padded, so the caller left-pads its masks
    alike."""
    while len(cache.layers) < len(other.layers):
        cache.layers.append(cache.layer_class_to_replicate())
    for layer, extra in zip(cache.layers, other.layers, strict=True):
        layer.join_rows(extra.keys, extra.values, rows)


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
    inside this block. transformers that know such caches (a layer's
    `_can_checkpoint_with_cache`) are told so; older ones drop the cache before the
    checkpoint function sees it, so there the block checkpoints those layers itself
    (`_checkpointed_forward`).
    """
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache"):
        told, replaced = layers, []
    else:
        told, replaced = [], [m for m in layers if m.gradient_checkpointing and m.training]
    try:
        for layer in told:
            layer._can_checkpoint_with_cache = True
        for layer in replaced:
            layer.gradient_checkpointing = False
            layer.forward = functools.partial(_checkpointed_forward, layer)
        yield
    finally:
        for layer in told:
            layer.__dict__.pop("_can_checkpoint_with_cache", None)
        for layer in replaced:
            layer.__dict__.pop("forward", None)
            layer.gradient_checkpointing = True


def _checkpointed_forward(layer: nn.Module, *args, **kwargs):
    """`layer`'s own forward under its checkpoint function, every keyword argument (the
    cache among them) kept; backward replays exactly this call."""
    forward = type(layer).forward.__get__(layer)
    return layer._gradient_checkpointing_func(functools.partial(forward, **kwargs), *args)
