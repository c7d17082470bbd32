"""A byte-level BPE tokenizer trained here on the environments' own text, for `small`.

The byte tokenizer of `tiny` spells a KeyDoor prompt in ~720 tokens and an action in ~30,
so a policy-gradient iteration spends its time on tokens that carry no decision. This
tokenizer is trained with the `tokenizers` library (byte-level BPE, Sennrich et al.
2016, ACL, arXiv 1508.07909; GPT-2's byte alphabet) on the text the policy actually
reads and writes (the corpus: `agents.tokenizer_corpus`). Merges may cross spaces (no
regex pre-split), so recurring phrases ("take the key", the fixed instruction) become
single tokens: the same KeyDoor prompt takes ~90 tokens and an action `<action>`,
`take the key`, `</action>`, EOS.

Every string round-trips: the 256 byte symbols are in the vocabulary whatever the
corpus held, so text no env produced (a typed command, another env's feedback) still
encodes, only in more tokens.

The trained tokenizer is a committed, versioned file, `models/small_tokenizer_v1.json`
(`TOKENIZER_FILE`), not a cache built on first use: registering an env never changes the
vocabulary of `small`, and every run records the file's fingerprint (`vocabulary()`) in
its config.json, so `benchmarks.run` refuses to resume a run under another vocabulary.
When the corpus changes, bump `TOKENIZER_VERSION`, rebuild (agents/tokenizer_corpus.py
says how) and set `TOKENIZER_SHA256` to what the rebuild prints.

A new vocabulary means `small`'s runs start afresh (a run under the old one is refused)
and `small-warm`'s cache is rebuilt (its key holds the fingerprint).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from creditgym.models.chat_tokenizer import SPECIAL_TOKENS, chatml_tokenizer

# Bump with every rebuilt file (a new file name: the old one stays readable in git).
TOKENIZER_VERSION = 1
TOKENIZER_FILE = Path(__file__).with_name(f"small_tokenizer_v{TOKENIZER_VERSION}.json")
# sha256 of the committed file (tests/test_small_model.py checks it against the file).
TOKENIZER_SHA256 = "1d58cfb43bfddbb6550c8c9617f8fda403a54d2705754a72538a7b3eb84bbb47"
VOCAB_SIZE = 2048


def train_backend(texts: Sequence[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train byte-level BPE on `texts`; specials get ids 0-2, then the 256 bytes, merges.

    No regex pre-split (`use_regex=False`): merges may span spaces and punctuation, so
    fixed phrases become one token. The special tokens are matched before BPE, so the
    chat template's markers are always single tokens.
    """
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    return backend


def wrap(backend: Tokenizer) -> PreTrainedTokenizerFast:
    """The transformers tokenizer the policy uses (`models.chat_tokenizer.chatml_tokenizer`)."""
    return chatml_tokenizer(backend)


def load_local_tokenizer() -> PreTrainedTokenizerFast:
    """`small`'s tokenizer, read from the committed `TOKENIZER_FILE`."""
    return wrap(Tokenizer.from_file(str(TOKENIZER_FILE)))


def vocabulary() -> dict[str, object]:
    """What a run records of `small`'s vocabulary: the tokenizer's version and the sha256
    of its file as read now (a rebuilt or edited file reads differently)."""
    return {
        "tokenizer": TOKENIZER_FILE.name,
        "version": TOKENIZER_VERSION,
        "sha256": hashlib.sha256(TOKENIZER_FILE.read_bytes()).hexdigest(),
    }
