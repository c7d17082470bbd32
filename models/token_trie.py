"""A prefix trie over token-id sequences: the allowed next tokens of constrained decoding.

At each position of a constrained generation the allowed next tokens are the children of
the node reached so far; `masks` gives the same choices along a recorded sequence, so a
re-scored token is read under the distribution it was drawn from. Which sequences the trie
holds (the `<action>command</action>` format) is the agent's business: `agents.constrained`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)


class TokenTrie:
    """Prefix trie over token-id sequences; every sequence ends at a leaf.

    Sequences must be prefix-free (the constrained format ends each with EOS, which
    guarantees it), so "no children" means "done".
    """

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        if not sequences:
            raise ValueError("a token trie needs at least one sequence")
        self.root = _Node()
        for sequence in sequences:
            if not sequence:
                raise ValueError("empty token sequence in trie")
            node = self.root
            for token in sequence:
                node = node.children.setdefault(int(token), _Node())
        for sequence in sequences:
            if self.walk(sequence).children:
                raise ValueError(f"token sequence {list(sequence)} is a prefix of another")
        # The longest sequence: a generation cap below it would cut a command off.
        self.longest = max(len(sequence) for sequence in sequences)

    def walk(self, prefix: Sequence[int]) -> _Node:
        """Node reached by `prefix`; KeyError if the prefix is not in the trie."""
        node = self.root
        for token in prefix:
            node = node.children[int(token)]
        return node

    def allowed(self, prefix: Sequence[int]) -> list[int]:
        """Token ids allowed after `prefix` (empty when `prefix` is complete)."""
        return sorted(self.walk(prefix).children)

    def masks(self, tokens: Sequence[int], vocab_size: int) -> torch.Tensor:
        """Allowed-token masks along a recorded sequence.

        Returns:
            [len(tokens), vocab_size] bool; row k marks the tokens allowed before
            `tokens[k]` was chosen. ValueError if `tokens` leaves the trie.
        """
        masks = torch.zeros((len(tokens), vocab_size), dtype=torch.bool)
        node = self.root
        for k, token in enumerate(tokens):
            masks[k, list(node.children)] = True
            if int(token) not in node.children:
                raise ValueError(f"token {token} at position {k} is not an allowed continuation")
            node = node.children[int(token)]
        return masks
