"""The chat scaffolding every local model shares: ChatML, its special tokens, and the
byte-level tokenizer of `tiny`.

Kept apart from models/registry.py (which loads models) and models/local_tokenizer.py
(`small`'s trained tokenizer), which both build on it, so neither imports the other's
module to get at these.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

# ChatML, the template SmolLM2-Instruct and Qwen use.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level tokenizer: ids 0-255 are bytes (GPT-2 byte alphabet), then specials."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_to_symbol = sorted(alphabet)  # deterministic order of the 256 byte symbols
    vocab = {symbol: index for index, symbol in enumerate(byte_to_symbol)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return chatml_tokenizer(backend)


def chatml_tokenizer(backend: Tokenizer) -> PreTrainedTokenizerFast:
    """The transformers tokenizer a local model uses: ChatML template, EOS `<|im_end|>`."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer
