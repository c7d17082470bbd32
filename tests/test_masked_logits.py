"""`models.masked_logits`: the causal LM's own logits at the kept positions, with and
without a LoRA wrapper and a key/value cache, on a random-weight Llama."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import DynamicCache

from creditgym.models.kv_cache import cache_keyword
from creditgym.models.masked_logits import masked_logits
from creditgym.models.registry import build_tiny
from creditgym.trainers.core import peft_quietly

# Both sides run the same float32 layers on the same inputs; only the output layer's
# matmul shape differs ([K, H] against [B*L, H]), which may change its summation order.
ATOL = 1e-5


def batch(seed: int = 0):
    """Right-padded rows of lengths 9, 6 and 12 with a ragged keep mask."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [9, 6, 12]
    width = max(lengths)
    input_ids = torch.randint(1, 200, (len(lengths), width), generator=generator)
    attention_mask = torch.zeros_like(input_ids)
    keep = torch.zeros_like(input_ids, dtype=torch.bool)
    for row, length in enumerate(lengths):
        attention_mask[row, :length] = 1
        keep[row, length - 4 : length - 1] = True
    return input_ids, attention_mask, keep


def lora(model):
    with peft_quietly():
        wrapped = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a non-zero adapter, so that running it shows in the logits
        for name, parameter in wrapped.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    return wrapped


@pytest.mark.parametrize("wrap", [False, True], ids=["plain", "lora"])
def test_the_kept_logits_are_the_full_forwards_at_those_positions(wrap):
    model = build_tiny(seed=3).model
    model = lora(model) if wrap else model
    input_ids, attention_mask, keep = batch()
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask).logits
        kept = masked_logits(model, keep, input_ids=input_ids, attention_mask=attention_mask)
    assert kept.shape == (int(keep.sum()), full.shape[-1])
    torch.testing.assert_close(kept, full[keep], atol=ATOL, rtol=0)


def test_lora_changes_the_kept_logits():
    """The adapter is run, not bypassed: the wrapped model scores differently."""
    input_ids, attention_mask, keep = batch()
    with torch.no_grad():
        plain = masked_logits(
            build_tiny(seed=3).model, keep, input_ids=input_ids, attention_mask=attention_mask
        )
        wrapped = masked_logits(
            lora(build_tiny(seed=3).model), keep, input_ids=input_ids, attention_mask=attention_mask
        )
    assert (plain - wrapped).abs().max() > 1e-3


def test_a_suffix_after_a_cached_prefix_matches_the_whole_sequence():
    model = build_tiny(seed=5).model
    input_ids, _, _ = batch(seed=2)
    input_ids = input_ids[:1]  # one row of 12 tokens, no padding
    prefix, suffix = input_ids[:, :7], input_ids[:, 7:]
    keep = torch.zeros_like(suffix, dtype=torch.bool)
    keep[0, 1:] = True
    with torch.no_grad():
        full = model(input_ids=input_ids).logits[:, 7:][keep]
        cache = DynamicCache()
        model(input_ids=prefix, use_cache=True, **{cache_keyword(model): cache})
        kept = masked_logits(
            model,
            keep,
            input_ids=suffix,
            attention_mask=torch.ones_like(input_ids),
            position_ids=torch.arange(7, 12)[None],
            use_cache=True,
            **{cache_keyword(model): cache},
        )
    torch.testing.assert_close(kept, full, atol=ATOL, rtol=0)
    assert cache.get_seq_length() == 12  # the cache was extended as a forward extends it


def test_a_model_that_scales_its_logits_is_refused():
    model = build_tiny(seed=0).model
    model.config.final_logit_softcapping = 30.0
    input_ids, attention_mask, keep = batch()
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        masked_logits(model, keep, input_ids=input_ids, attention_mask=attention_mask)
