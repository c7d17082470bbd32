"""The in-place KV cache gives the same logits as transformers' concatenating cache."""

from __future__ import annotations

import inspect

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import DynamicCache

from creditgym.models import kv_cache
from creditgym.models.registry import build_tiny
from creditgym.trainers.core import peft_quietly


def decode_logits(model, cache, steps: int, drop_at: int) -> list[torch.Tensor]:
    """Prefill 3 left-padded rows, decode greedily, drop row 1 at step `drop_at`."""
    torch.manual_seed(0)
    input_ids = torch.randint(3, 200, (3, 20)).to(model.device)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :5] = 0  # left padding, as the sampler lays rows out
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    next_position = attention_mask.sum(-1, keepdim=True)
    with torch.no_grad():
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{kv_cache.cache_keyword(model): cache},
        )
        logits = [out.logits[:, -1]]
        for step in range(steps):
            token = out.logits[:, -1:].argmax(-1)
            if step == drop_at:
                keep = torch.tensor([0, 2], device=model.device)
                cache.batch_select_indices(keep)
                attention_mask, next_position, token = (
                    attention_mask[keep],
                    next_position[keep],
                    token[keep],
                )
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(token), 1)], -1)
            out = model(
                input_ids=token,
                attention_mask=attention_mask,
                position_ids=next_position,
                use_cache=True,
                **{kv_cache.cache_keyword(model): cache},
            )
            next_position = next_position + 1
            logits.append(out.logits[:, -1])
    return logits


def test_growing_cache_matches_dynamic_cache_through_growth_and_row_drops(monkeypatch, device):
    monkeypatch.setattr(kv_cache, "INITIAL_SPARE", 4)  # force several regrowths
    model = build_tiny().model.to(device)
    cache = kv_cache.growing_cache()
    reference = decode_logits(model, DynamicCache(), steps=40, drop_at=17)
    grown = decode_logits(model, cache, steps=40, drop_at=17)
    for expected, actual in zip(reference, grown, strict=True):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    layer = cache.layers[0]
    assert isinstance(layer, kv_cache.GrowingLayer)
    assert layer.keys.shape[0] == 2 and layer.keys.shape[-2] == 20 + 40
    assert layer._key_store.shape[-2] > layer.keys.shape[-2]  # spare room kept


def test_fill_holes_moves_only_rows_behind_the_ones_that_left():
    assert kv_cache.fill_holes([0, 2, 3, 5]) == [0, 5, 2, 3]
    assert kv_cache.fill_holes([1, 2]) == [2, 1]
    assert kv_cache.fill_holes([0, 1]) == [0, 1]  # the last rows left: nothing moves
    assert kv_cache.fill_holes([3, 4, 5]) == [3, 4, 5]
    assert kv_cache.fill_holes([]) == []


def states(rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random keys and values [rows, 2 heads, length, 4]."""
    return torch.randn(rows, 2, length, 4), torch.randn(rows, 2, length, 4)


def right_aligned(states: torch.Tensor, width: int) -> torch.Tensor:
    """`states` [b, h, length, d] left-padded with zeros to `width` columns."""
    return torch.nn.functional.pad(states, (0, 0, width - states.shape[-2], 0))


def test_rows_leave_and_join_in_place_with_finite_padding(monkeypatch):
    monkeypatch.setattr(kv_cache, "INITIAL_SPARE", 4)
    layer = kv_cache.GrowingLayer()
    prompt_keys, prompt_values = states(3, 5)
    token_keys, token_values = states(3, 1)
    layer.update(prompt_keys, prompt_values)
    layer.update(token_keys, token_values)  # a decoded token
    keys = torch.cat([prompt_keys, token_keys], -2)
    values = torch.cat([prompt_values, token_values], -2)
    store = layer._key_store.data_ptr()

    # Row 0 leaves: row 2 takes its place, row 1 stays; nothing is reallocated.
    layer.batch_select_indices(torch.tensor(kv_cache.fill_holes([1, 2])))
    assert layer._key_store.data_ptr() == store
    torch.testing.assert_close(layer.keys, keys[[2, 1]], rtol=0, atol=0)
    torch.testing.assert_close(layer.values, values[[2, 1]], rtol=0, atol=0)

    # A shorter row joins the room row 0 left, over stale NaNs: padded with zeros, in place.
    layer._key_store[2:] = float("nan")
    layer._value_store[2:] = float("nan")
    joining_keys, joining_values = states(2, 4)
    layer.join_rows(joining_keys, joining_values, rows=[1])
    assert layer._key_store.data_ptr() == store
    torch.testing.assert_close(layer.keys[2], right_aligned(joining_keys, 6)[1], rtol=0, atol=0)
    torch.testing.assert_close(layer.values[2], right_aligned(joining_values, 6)[1], rtol=0, atol=0)
    torch.testing.assert_close(layer.keys[:2], keys[[2, 1]], rtol=0, atol=0)

    # Longer rows, picked with repeats, need a wider store: the old rows are padded now.
    long_keys, long_values = states(1, 8)
    before = layer.keys.clone()
    layer.join_rows(long_keys, long_values, rows=[0, 0])
    assert layer.keys.shape == (5, 2, 8, 4)
    torch.testing.assert_close(layer.keys[:3], right_aligned(before, 8), rtol=0, atol=0)
    torch.testing.assert_close(layer.keys[3:], long_keys.expand(2, -1, -1, -1), rtol=0, atol=0)
    assert torch.isfinite(layer.keys).all() and torch.isfinite(layer.values).all()


def test_a_permutation_of_rows_is_selected_in_place_without_reading_overwritten_rows():
    layer = kv_cache.GrowingLayer()
    keys, values = states(3, 5)
    layer.update(keys, values)
    layer.batch_select_indices(torch.tensor([2, 0, 1]))  # every move reads a later target
    torch.testing.assert_close(layer.keys, keys[[2, 0, 1]], rtol=0, atol=0)
    torch.testing.assert_close(layer.values, values[[2, 0, 1]], rtol=0, atol=0)
    layer.batch_select_indices(torch.tensor([1, 1]))  # a repeated row: a new store
    torch.testing.assert_close(layer.keys, keys[[0, 0]], rtol=0, atol=0)


def test_joining_an_empty_cache_takes_the_picked_rows():
    cache, prefilled = kv_cache.growing_cache(), kv_cache.growing_cache()
    keys, values = states(2, 5)
    prefilled.update(keys, values, 0)
    kv_cache.join_rows(cache, prefilled, rows=[1, 0, 1])
    torch.testing.assert_close(cache.layers[0].keys, keys[[1, 0, 1]], rtol=0, atol=0)
    torch.testing.assert_close(cache.layers[0].values, values[[1, 0, 1]], rtol=0, atol=0)


def test_cache_keyword_is_the_one_the_installed_forward_takes_through_peft_too():
    # transformers renamed `past_key_values` to `cache`; the old name warns on 5.24, and
    # 5.10 (the verl environment) drops `cache` unused, so a wrong pick runs no prefix.
    model = build_tiny(seed=0).model
    keyword = kv_cache.cache_keyword(model)
    assert keyword in inspect.signature(type(model).forward).parameters
    with peft_quietly():
        wrapped = get_peft_model(
            build_tiny(seed=0).model, LoraConfig(r=4, target_modules=["q_proj"])
        )
    assert kv_cache.cache_keyword(wrapped) == keyword  # PeftModel's own forward takes **kwargs
    input_ids = torch.randint(3, 200, (1, 9))
    with torch.no_grad():
        whole = model(input_ids=input_ids).logits[:, 5:]
        cache = DynamicCache()
        model(input_ids=input_ids[:, :5], use_cache=True, **{keyword: cache})
        rest = model(
            input_ids=input_ids[:, 5:],
            position_ids=torch.arange(5, 9)[None],
            use_cache=True,
            **{keyword: cache},
        ).logits
    assert cache.get_seq_length() == 9  # the forward wrote into the cache it was given
    torch.testing.assert_close(rest, whole, atol=1e-5, rtol=0)


def test_a_forward_without_a_cache_argument_is_refused():
    with pytest.raises(TypeError, match="takes no KV cache"):
        kv_cache.cache_keyword(torch.nn.Linear(2, 2))
