"""Logits at chosen positions only, on any transformers version creditgym supports.

Teacher-forced scoring needs the output distribution at a few positions per row (the
action tokens), never at every position: a [B, L, V] logits tensor is most of the memory
of a scoring forward (V is 49,152 for smollm2). transformers from 5.21 projects only at a
boolean [B, L] `logits_to_keep` mask; older releases (verl 0.9.1 caps transformers below
5.11) take only an integer there. `masked_logits` gets the same [sum of kept, V] result
on every release: it runs the causal LM's decoder (`get_decoder()`, with LoRA layers in
place under peft) for the final hidden states [B, L, H], gathers the kept positions and
applies the output layer to those alone.

This is exactly the causal LM's own forward for models whose logits are the output layer
applied to the decoder's last hidden state (Llama, the family of every registered model:
`models.registry`). A model that transforms the logits after the output layer (a final
soft-capping or a logit scale in its config) is refused in one line rather than scored
differently from how it generates.
"""

from __future__ import annotations

import torch

# Config fields of causal LMs whose logits are not the output layer's output alone.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale")


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The causal LM inside a peft wrapper (LoRA is injected into its layers, so running
    it runs the adapter), or `model` itself."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def masked_logits(
    model: torch.nn.Module,
    keep: torch.Tensor,
    **forward_kwargs,
) -> torch.Tensor:
    """Logits [K, V] at the True positions of `keep` [B, L] (row-major order, K = keep.sum()).

    `forward_kwargs` are the decoder's inputs (`input_ids`, `attention_mask`, and where
    used `position_ids`, `past_key_values`, `use_cache`); a cache passed in is updated in
    place as the causal LM's forward would update it.

    Raises:
        ValueError: the model transforms its logits after the output layer.
    """
    lm = causal_lm(model)
    config = getattr(lm, "config", None)
    transforms = [name for name in LOGIT_TRANSFORMS if getattr(config, name, None)]
    if transforms:
        raise ValueError(
            f"{type(lm).__name__} transforms its logits after the output layer "
            f"({', '.join(transforms)}): masked scoring supports plain output layers only"
        )
    hidden = lm.get_decoder()(**forward_kwargs).last_hidden_state  # [B, L, H]
    return lm.get_output_embeddings()(hidden[keep])  # [K, V]
