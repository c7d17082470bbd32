"""What generation computed that hindsight scoring can reuse: prompt keys and values, and
the final hidden state before every generated token.

HCAPO and HP-RLVR re-score every step with teacher-forced passes of the policy that
generated it (`models.scoring`):
- each view's context starts with the step's own prompt (the hindsight block sits just
  before the instruction, `agents.prompts`). Generation already computed that prompt's
  keys and values: kept here, the scoring engine loads them and runs only the tokens
  after the shared prefix -- the automatic prefix caching of vLLM (Kwon et al. 2023)
  and SGLang's RadixAttention (Zheng et al. 2024), applied across rollout -> credit;
- HP-RLVR's causal view is the step exactly as generated, so its next-token
  distributions are the ones generation computed. The logits themselves are too big to
  keep ([A, V], ~200 KB per token for a 49k vocabulary), but the hidden states that
  the output layer turned into them are small ([A, hidden], 2.3 KB per token for
  smollm2-135m): the engine re-applies the output layer instead of re-running the model.

Prompts are keyed by token ids and found by longest common prefix: a chain of hashes
over 16-token blocks (as in vLLM's block hashing) finds the candidate, then an exact
token comparison gives the usable length, so a hash collision can only shorten a match,
never give wrong keys and values. Responses are keyed by (prompt ids, response ids).

Stale entries are never served: the cache records the model's parameter fingerprint
(each parameter's identity and in-place version counter, which optimiser steps,
`load_state_dict` and adapter injection all change) and empties itself when it differs.
Memory is bounded by `budget_bytes`, an upper bound and not an allocation: the cache
holds what the rollout generated and no more. Once full, new entries are refused (first
come, first kept) and scoring recomputes those steps, so a small budget costs speed, never
correctness. An entry is also refused when storing it would leave the device (the host's
`MemAvailable`, or the GPU's free memory) with less than `RESERVE_FRACTION` of its total:
the budget must not take the memory the rest of the iteration needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

BLOCK_TOKENS = 16
# 8 GiB: the users' ALFWorld command (`benchmarks.run --env alfworld --credit hp_rlvr`,
# smollm2-135m) generates about 400 steps of about 350 prompt tokens, at 46 KB of keys and
# values per token 6.4 GB; at the earlier 2 GiB two thirds of its steps were recomputed
# and the scoring took longer than the rollout (benchmarks/perf/bench_alfworld_hindsight.py).
DEFAULT_GENERATION_CACHE_BYTES = 8 << 30
# An entry is refused when it would leave less than this fraction of the device's memory
# available (`GenerationCache._admits`).
RESERVE_FRACTION = 0.25


@dataclass(frozen=True)
class CachedPrompt:
    """One prompt's keys and values.

    Attributes:
        token_ids: the prompt, shape [P].
        kv: float tensor [layers, 2, kv_heads, P, head_dim] (keys at index 0, values at 1).
    """

    token_ids: tuple[int, ...]
    kv: torch.Tensor


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _block_hashes(token_ids: Sequence[int]) -> list[int]:
    """Chained hashes of the full 16-token blocks: hash k covers tokens [0, 16 (k + 1))."""
    hashes, chained = [], 0
    for start in range(0, len(token_ids) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
        # int tuples hash deterministically (only str / bytes hashing is salted)
        chained = hash((chained, tuple(token_ids[start : start + BLOCK_TOKENS])))
        hashes.append(chained)
    return hashes


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def shared_opening_length(sequences: Sequence[Sequence[int]]) -> int:
    """Leading tokens every one of `sequences` (>= 1) starts with, leaving each at least
    one token of its own (the position whose output a forward after the opening needs)."""
    length = min(len(sequence) for sequence in sequences) - 1
    for other in sequences[1:]:
        length = min(length, common_prefix_length(sequences[0], other))
    return max(length, 0)


def _meminfo_bytes() -> tuple[int, int] | None:
    """(MemAvailable, MemTotal) of the host in bytes, or None where /proc/meminfo is not
    readable (not Linux)."""
    fields = {}
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                name, _, value = line.partition(":")
                if name in ("MemAvailable", "MemTotal"):
                    fields[name] = int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError):
        return None
    if len(fields) < 2:
        return None
    return fields["MemAvailable"], fields["MemTotal"]


def device_memory(device: torch.device) -> tuple[int, int] | None:
    """(available, total) bytes of the memory `device`'s tensors live in: a CUDA device's
    free and total memory, else the host's; None when it cannot be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)
    if device.type == "cpu":
        return _meminfo_bytes()
    return None


def parameter_fingerprint(model: nn.Module) -> tuple[tuple[int, int], ...]:
    """(identity, in-place version) of every parameter: changes with any weight update."""
    return tuple((id(p), p._version) for p in model.parameters())


class GenerationCache:
    """Prompt keys / values and response hidden states of one policy's generations.

    Args:
        model: the policy whose forward passes fill the cache (a peft wrapper included).
        budget_bytes: most bytes held; 0 keeps nothing.
    """

    def __init__(
        self, model: nn.Module, budget_bytes: int = DEFAULT_GENERATION_CACHE_BYTES
    ) -> None:
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        self.model = model
        self.budget_bytes = budget_bytes
        parameter = next(model.parameters(), None)
        self.device = parameter.device if parameter is not None else torch.device("cpu")
        self._prompts: dict[tuple[int, ...], CachedPrompt] = {}
        self._by_block: dict[int, CachedPrompt] = {}
        self._responses: dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}
        self._fingerprint = parameter_fingerprint(model)
        self.nbytes = 0
        self.stats = {
            "prompts_stored": 0,
            "responses_stored": 0,
            "refused": 0,
            "refused_for_memory": 0,
            "prompt_hits": 0,
            "prompt_misses": 0,
            "reused_tokens": 0,
            "response_hits": 0,
        }

    def __len__(self) -> int:
        """Entries held (prompts and responses)."""
        return len(self._prompts) + len(self._responses)

    def serves(self, model: nn.Module) -> bool:
        """Whether `model` computes with exactly this cache's parameters (a peft wrapper
        of the same modules does), so what it generates may be stored here."""
        return {id(p) for p in model.parameters()} == {id(p) for p in self.model.parameters()}

    def clear(self) -> None:
        """Drop every entry (the counters in `stats` are kept)."""
        self._prompts.clear()
        self._by_block.clear()
        self._responses.clear()
        self.nbytes = 0

    def _check_fresh(self) -> None:
        fingerprint = parameter_fingerprint(self.model)
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint

    def _admits(self, nbytes: int) -> bool:
        """Whether an entry of `nbytes` fits the budget and leaves the device
        `RESERVE_FRACTION` of its memory; counts a refusal in `stats` (`refused`, and
        `refused_for_memory` when the device's memory was the reason)."""
        if self.nbytes + nbytes > self.budget_bytes:
            self.stats["refused"] += 1
            return False
        memory = device_memory(self.device)
        if memory is not None and memory[0] - nbytes < RESERVE_FRACTION * memory[1]:
            self.stats["refused"] += 1
            self.stats["refused_for_memory"] += 1
            return False
        return True

    def wants_prompt(self, token_ids: tuple[int, ...], nbytes: int) -> bool:
        """Whether `put_prompt` of a prompt of `nbytes` would store it (new, at least one
        block long, within budget); lets the caller skip copies that would be refused."""
        self._check_fresh()
        if token_ids in self._prompts or len(token_ids) < BLOCK_TOKENS:
            return False
        return self._admits(nbytes)

    def put_prompt(
        self, token_ids: Sequence[int], layers: Sequence[tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        """Store a prompt's keys and values, copied out of the caller's buffers.

        Args:
            token_ids: the prompt, [P].
            layers: per layer (keys, values), each [kv_heads, P, head_dim].
        """
        token_ids = tuple(token_ids)
        kv = torch.stack([torch.stack(pair) for pair in layers])  # one copy
        if kv.shape[-2] != len(token_ids):
            raise ValueError(f"{kv.shape[-2]} cached positions for a {len(token_ids)}-token prompt")
        if not self.wants_prompt(token_ids, _nbytes(kv)):
            return
        entry = CachedPrompt(token_ids, kv)
        self._prompts[token_ids] = entry
        for block in _block_hashes(token_ids):
            self._by_block.setdefault(block, entry)
        self.nbytes += _nbytes(kv)
        self.stats["prompts_stored"] += 1

    def lookup_prompt(
        self, context_ids: Sequence[int], limit: int
    ) -> tuple[int, CachedPrompt | None]:
        """The cached prompt sharing the longest prefix with `context_ids`.

        Block hashes find the candidate to within one block; its exact common prefix
        with the context is then counted token by token.

        Args:
            context_ids: the tokens about to be run.
            limit: most tokens the caller will take from the cache.
        Returns:
            (usable length n <= limit, entry): positions [0, n) of `entry.kv` equal what
            the model computes for `context_ids[:n]`; (0, None) when nothing is usable.
        """
        self._check_fresh()
        entry = None
        for block in _block_hashes(context_ids[: max(limit, 0)]):
            found = self._by_block.get(block)
            if found is None:
                break
            entry = found
        if entry is None:
            self.stats["prompt_misses"] += 1
            return 0, None
        length = min(common_prefix_length(entry.token_ids, context_ids), limit)
        self.stats["prompt_hits"] += 1
        self.stats["reused_tokens"] += length
        return length, entry

    def put_response(
        self, prompt_ids: Sequence[int], response_ids: Sequence[int], hidden: torch.Tensor
    ) -> None:
        """Store the output layer's inputs that produced a response's token distributions.

        Args:
            prompt_ids: the prompt, [P].
            response_ids: the generated tokens, [A].
            hidden: [A, hidden]; row j is what the output layer turned into the logits
                of token j (given the prompt and tokens < j).
        """
        if hidden.shape[0] != len(response_ids):
            raise ValueError(f"{hidden.shape[0]} hidden states for {len(response_ids)} tokens")
        self._check_fresh()
        key = (tuple(prompt_ids), tuple(response_ids))
        if key in self._responses or not self._admits(_nbytes(hidden)):
            return
        self._responses[key] = hidden.clone()
        self.nbytes += _nbytes(hidden)
        self.stats["responses_stored"] += 1

    def response_hidden(
        self, prompt_ids: Sequence[int], response_ids: Sequence[int]
    ) -> torch.Tensor | None:
        """The [A, hidden] states stored for exactly this prompt and response, or None."""
        self._check_fresh()
        hidden = self._responses.get((tuple(prompt_ids), tuple(response_ids)))
        self.stats["response_hits"] += hidden is not None
        return hidden
