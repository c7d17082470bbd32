"""Continuous batching: rows join and leave a running generation between decode steps.

Lockstep batching (prefill every row, decode until the longest row stops) leaves a
batch slot idle from the moment its row stops until the whole batch is done, and
multi-step episodes wait for the slowest row at every step. Here a row that stops
leaves at once (its cache rows are dropped) and a row added by `add` joins at the
next `advance`: it is prefilled on its own and its cache appended to the running one,
right-aligned (`models.kv_cache.join_rows`), so the batch stays as full as the work
allows -- the scheduling vLLM calls continuous batching, here on a transformers model
with an explicit sampling loop.

Layout: row b of the cache holds [left padding | prompt | generated tokens]; the 2-D
attention mask marks the padding and each row carries its own next position id, so
rows of any age share one decode step. Columns that are padding for every row left
are trimmed once the rows that needed them are gone. Rows that join together with an
identical prompt (a GRPO group at its first step) are prefilled once.

With `share_prefix`, a prompt prefix shared by the rows joining together (the system and
task text every step of an episode repeats) is also prefilled once -- the automatic
prefix caching of vLLM (Kwon et al. 2023) and SGLang's RadixAttention (Zheng et al.
2024) -- and kept for the rows that join later with the same prefix, so a row arriving
alone runs only its own suffix. Such a row's layout is [prefix | padding | suffix |
generated tokens]: padding in the middle, masked like padding on the left, with the
positions carried explicitly, so attention and positions are those of the full prompt
and only the float rounding of the prefill differs (a prefix run at batch 1).

Sampling is exactly `agents.llm`'s: each row draws Gumbel noise from its own generator
and records log-probs under `models.logprobs.sampling_logprobs`, so a row's tokens do
not depend on which rows share its batch, up to float rounding in the logits.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch
from torch import nn

from creditgym.models.generation_cache import GenerationCache, shared_opening_length
from creditgym.models.kv_cache import (
    cache_keyword,
    fill_holes,
    growing_cache,
    join_rows,
    trim_left,
)
from creditgym.models.logprobs import sampling_logprobs
from creditgym.models.token_trie import TokenTrie

# Shorter common prefixes are prefilled with each prompt: a separate batch-1 forward
# costs more in per-call overhead than a few tokens save.
MIN_SHARED_PREFIX = 16


@dataclass(frozen=True)
class Generation:
    """One generated response: token ids (stop token included) and their log-probs."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass
class _Row:
    key: Hashable
    prompt: tuple[int, ...]
    trie: TokenTrie | None
    rng: torch.Generator
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    hidden: list[torch.Tensor] = field(default_factory=list)  # output-layer inputs [H]


class ContinuousBatch:
    """A generation that rows can join (`add`) and that returns rows as they stop.

    Args:
        model: causal LM (transformers, or a peft wrapper), in eval mode.
        pad_id: id written in padding positions (masked, never attended to).
        temperature, top_p: sampling distribution (`models.logprobs.sampling_logprobs`).
        max_new_tokens: cap on tokens generated per row.
        stop: `stop(tokens, trie)` -> True when a row's response is complete (EOS,
            end of the action, end of its trie path); called after every token.
        generation_cache: where each prefilled prompt's keys and values, and each
            finished response's output-layer inputs, are kept for hindsight scoring
            (`models.generation_cache`); None keeps nothing.
        share_prefix: prefill a prompt prefix shared by joining rows once and reuse it
            for later rows (module docstring); False runs every distinct prompt in full.
    """

    def __init__(
        self,
        model: nn.Module,
        pad_id: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        stop: Callable[[list[int], TokenTrie | None], bool],
        generation_cache: GenerationCache | None = None,
        share_prefix: bool = False,
    ) -> None:
        self.model = model
        self.pad_id = pad_id
        self.temperature, self.top_p = temperature, top_p
        self.max_new_tokens = max_new_tokens
        self.stop = stop
        self.generation_cache = generation_cache
        self.share_prefix = share_prefix
        # The last shared prefix prefilled: (token ids, per layer (keys, values) [1, kv_heads,
        # P, head_dim]); valid for this batch's lifetime, in which the weights do not change.
        self._prefix: tuple[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] | None = None
        # Response hidden states are kept only if the first prefill shows that the output
        # layer alone maps them to the logits (no scaling or capping after it).
        self._keep_hidden: bool | None = None
        self.device = next(model.parameters()).device
        self._rows: list[_Row] = []  # batch order of the cache rows
        self._waiting: list[_Row] = []
        self._cache = None
        self._mask = torch.zeros((0, 0), dtype=torch.long, device=self.device)  # [B, W]
        self._next_position = torch.zeros((0, 1), dtype=torch.long, device=self.device)
        self._logits: torch.Tensor | None = None  # [B, V] next-token logits per row

    def __len__(self) -> int:
        """Rows generating or waiting to join."""
        return len(self._rows) + len(self._waiting)

    def add(
        self, key: Hashable, prompt: tuple[int, ...], trie: TokenTrie | None, rng: torch.Generator
    ) -> None:
        """Queue a row; it joins the batch at the next `advance`."""
        if not prompt:
            raise ValueError(f"row {key!r}: empty prompt")
        self._waiting.append(_Row(key, tuple(prompt), trie, rng))

    @torch.no_grad()
    def advance(self) -> list[tuple[Hashable, Generation]]:
        """Admit waiting rows, sample one token for every row, drop the rows that
        stopped, and run the decode step of the rest. Returns (key, generation) of the
        rows that stopped, in batch order."""
        if self._waiting:
            self._admit()
        if not self._rows:
            return []
        rows, device = self._rows, self.device
        allowed = None
        if any(row.trie is not None for row in rows):
            allowed = torch.ones(self._logits.shape, dtype=torch.bool)
            for k, row in enumerate(rows):
                if row.trie is not None:
                    allowed[k] = False
                    allowed[k, row.trie.allowed(row.tokens)] = True
            allowed = allowed.to(device)
        step_logprobs = sampling_logprobs(self._logits, self.temperature, self.top_p, allowed)
        # Gumbel-max: argmax(log p + G) is a sample of p; -inf (masked) never wins.
        vocab = step_logprobs.shape[-1]
        uniforms = torch.stack([torch.rand(vocab, generator=row.rng) for row in rows])
        gumbel = -torch.log(-torch.log(uniforms.clamp_(min=1e-20, max=1 - 1e-7)))
        sampled = (step_logprobs + gumbel.to(device)).argmax(-1, keepdim=True)
        sampled_logprobs = step_logprobs.gather(-1, sampled).squeeze(-1).tolist()
        keep, done = [], []
        for k, (row, token) in enumerate(zip(rows, sampled.squeeze(-1).tolist(), strict=True)):
            row.tokens.append(token)
            row.logprobs.append(sampled_logprobs[k])
            if len(row.tokens) >= self.max_new_tokens or self.stop(row.tokens, row.trie):
                done.append((row.key, Generation(tuple(row.tokens), tuple(row.logprobs))))
                if self._keep_hidden:  # row.hidden[j] gave the logits of token j
                    hidden = torch.stack(row.hidden)
                    self.generation_cache.put_response(row.prompt, row.tokens, hidden)
            else:
                keep.append(k)
        if len(keep) < len(rows):
            keep = self._select(keep)
            sampled = sampled[torch.tensor(keep, dtype=torch.long, device=device)]
        if keep:
            self._decode(sampled)
        return done

    def _select(self, keep: list[int]) -> list[int]:
        """Keep only rows `keep` (increasing batch indices); trim columns no remaining row
        uses. Returns the rows' new order (`kv_cache.fill_holes`: rows behind the ones
        that left take their places, so the cache moves as few rows as it can)."""
        keep = fill_holes(keep)
        self._rows = [self._rows[k] for k in keep]
        if not keep:
            self._cache, self._logits = None, None
            self._mask = self._mask[:0, :0]
            self._next_position = self._next_position[:0]
            return keep
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self._cache.batch_select_indices(index)
        self._mask, self._next_position = self._mask[index], self._next_position[index]
        self._logits = self._logits[index]
        used = self._mask.any(0)
        unused = int(used.long().argmax()) if bool(used.any()) else 0  # leading all-pad columns
        if unused:
            trim_left(self._cache, unused)
            self._mask = self._mask[:, unused:]
        return keep

    def _decode(self, tokens: torch.Tensor) -> None:
        """One decode step: tokens [B, 1] (the just-sampled ones) -> next-token logits."""
        self._mask = torch.cat([self._mask, self._mask.new_ones((len(self._rows), 1))], -1)
        output, head_inputs = self._forward(
            input_ids=tokens,
            attention_mask=self._mask,
            position_ids=self._next_position,
            use_cache=True,
            **{cache_keyword(self.model): self._cache},
        )
        self._next_position = self._next_position + 1
        self._logits = output.logits[:, -1]
        if self._keep_hidden:
            for row, hidden in zip(self._rows, head_inputs, strict=True):
                row.hidden.append(hidden)

    def _forward(self, **inputs) -> tuple:
        """`model(**inputs)` and, with a generation cache, the last position's input to
        the output layer [B, hidden] (captured by a forward hook)."""
        if self.generation_cache is None:
            return self.model(**inputs), None
        captured = []
        head = self.model.get_output_embeddings()
        hook = head.register_forward_hook(lambda module, args, out: captured.append(args[0]))
        try:
            output = self.model(**inputs)
        finally:
            hook.remove()
        return output, captured[-1][:, -1]

    def _keep_prompts(self, prompts: list[tuple[int, ...]], cache, mask: torch.Tensor) -> None:
        """Copy each prefilled prompt's keys and values (the columns its row of `mask`,
        [len(prompts), W], marks) into the generation cache, if it wants them."""
        first = cache.layers[0].keys
        per_token = 2 * len(cache.layers) * first.shape[1] * first.shape[-1] * first.element_size()
        for k, prompt in enumerate(prompts):
            if self.generation_cache.wants_prompt(prompt, per_token * len(prompt)):
                columns = mask[k].nonzero().squeeze(-1)
                kv = [
                    (layer.keys[k, :, columns], layer.values[k, :, columns])
                    for layer in cache.layers
                ]
                self.generation_cache.put_prompt(prompt, kv)

    def _shared_prefix(
        self, prompts: list[tuple[int, ...]]
    ) -> tuple[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] | None:
        """The prefix to prefill `prompts` after: the kept one if every prompt extends it,
        else their common prefix when several join (prefilled now, then kept), else None.
        Every prompt keeps at least one token of its own (its last gives its logits)."""
        if self._prefix is not None:
            ids = self._prefix[0]
            if all(len(p) > len(ids) and p[: len(ids)] == ids for p in prompts):
                return self._prefix
        if len(prompts) < 2:
            return None
        length = shared_opening_length(prompts)
        if length < MIN_SHARED_PREFIX:
            return None
        ids = prompts[0][:length]
        cache = growing_cache()
        self.model(
            input_ids=torch.tensor([ids], dtype=torch.long, device=self.device),
            use_cache=True,
            logits_to_keep=1,
            **{cache_keyword(self.model): cache},
        )
        self._prefix = (ids, [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers])
        return self._prefix

    def _admit(self) -> None:
        """Prefill the waiting rows (one left-padded forward over their distinct
        prompts) and append them to the running batch."""
        new, self._waiting = self._waiting, []
        distinct: dict[tuple[int, ...], int] = {}
        index = [distinct.setdefault(row.prompt, len(distinct)) for row in new]
        prompts = list(distinct)
        prefix = self._shared_prefix(prompts) if self.share_prefix else None
        shared = len(prefix[0]) if prefix is not None else 0
        # Each row: [prefix | left padding | its suffix]; without a prefix, [padding | prompt].
        width = max(len(p) for p in prompts) - shared
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), shared + width), dtype=torch.long)
        mask[:, :shared] = 1
        for k, prompt in enumerate(prompts):
            suffix = prompt[shared:]
            input_ids[k, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            mask[k, shared + width - len(suffix) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        cache = growing_cache()  # in-place appends: no O(L) copy per token
        if prefix is not None:  # every row starts from the prefix's keys and values
            for layer, (keys, values) in enumerate(prefix[1]):
                rows = len(prompts)
                cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), layer)
        output, head_inputs = self._forward(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp(min=0)[:, shared:],
            use_cache=True,
            logits_to_keep=1,
            **{cache_keyword(self.model): cache},
        )
        logits = output.logits[:, -1]
        if self.generation_cache is not None:
            self._keep_prompts(prompts, cache, mask)
            if self._keep_hidden is None:
                head = self.model.get_output_embeddings()
                self._keep_hidden = torch.allclose(head(head_inputs), logits, 1e-4, 1e-4)
            if self._keep_hidden:
                for row, k in zip(new, index, strict=True):
                    row.hidden.append(head_inputs[k])
        # Rows sharing a prompt share its prefill: the cache's rows are picked on joining.
        picked = index if len(prompts) < len(new) else None
        if picked is not None:
            rows = torch.tensor(index, device=self.device)
            mask, logits = mask[rows], logits[rows]
        next_position = mask.sum(-1, keepdim=True)
        if self._cache is None:
            self._cache, self._mask, self._logits = growing_cache(), mask, logits
            self._next_position = next_position
        else:
            old_width, new_width = self._mask.shape[1], mask.shape[1]
            both = max(old_width, new_width)
            self._mask = torch.cat(
                [
                    nn.functional.pad(self._mask, (both - old_width, 0)),
                    nn.functional.pad(mask, (both - new_width, 0)),
                ]
            )
            self._logits = torch.cat([self._logits, logits])
            self._next_position = torch.cat([self._next_position, next_position])
        join_rows(self._cache, cache, picked)
        self._rows.extend(new)
