"""The in-place KV cache gives the same logits as transformers' concatenating cache."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from creditgym.agents import kv_cache
from creditgym.agents.models import build_tiny


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
            past_key_values=cache,
            use_cache=True,
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
                past_key_values=cache,
                use_cache=True,
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
    assert layer._key_buffer.shape[-2] > layer.keys.shape[-2]  # spare room kept
