"""Constrained decoding: a prefix trie over the token ids of the admissible commands.

In constrained mode the policy may only emit `<action>` + one admissible command +
`</action>` + EOS, token by token: at each position the allowed next tokens are the
children of the trie node reached so far (`models.token_trie.TokenTrie`). The think block
is skipped in this mode, on purpose: constraining free-form reasoning is impossible, and
letting it run unconstrained first costs many tokens per step for a model (tiny, or
untrained) whose reasoning is noise. This lets an untrained model act validly from the
first step.

The same trie is rebuilt from `Step.admissible_commands` by `agents.action_logprobs` to
re-score recorded actions under the exact distribution they were sampled from.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from creditgym.agents.parsing import ACTION_CLOSE, ACTION_OPEN
from creditgym.models.token_trie import TokenTrie


def action_token_sequences(
    tokenizer: PreTrainedTokenizerBase, commands: Sequence[str]
) -> list[list[int]]:
    """Token ids of `<action>{command}</action>` + EOS for each distinct command."""
    if tokenizer.eos_token_id is None:
        raise ValueError("constrained decoding needs a tokenizer with an EOS token")
    unique = list(dict.fromkeys(commands))
    texts = [f"{ACTION_OPEN}{command}{ACTION_CLOSE}" for command in unique]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [[*ids, tokenizer.eos_token_id] for ids in encoded]


# Tries built per tokenizer, least recently used first. The sampler builds one per step and
# the trainer rebuilds the same ones to re-score: tokenising the commands cost ~0.6 s of a
# 3.4 s KeyDoor iteration of `small` (benchmarks/perf/bench_small.py) before this cache.
_TRIES: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, OrderedDict] = (
    weakref.WeakKeyDictionary()
)
TRIE_CACHE_SIZE = 4096


def build_action_trie(tokenizer: PreTrainedTokenizerBase, commands: Sequence[str]) -> TokenTrie:
    """The constrained-decoding trie for one state's admissible commands.

    Cached per tokenizer on the command tuple (and the vocabulary size, so a tokenizer that
    gains tokens is not served stale tries); a TokenTrie is never mutated after it is built.
    """
    key = (len(tokenizer), tuple(commands))
    cache = _TRIES.setdefault(tokenizer, OrderedDict())
    trie = cache.get(key)
    if trie is None:
        trie = TokenTrie(action_token_sequences(tokenizer, commands))
        cache[key] = trie
        if len(cache) > TRIE_CACHE_SIZE:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return trie
