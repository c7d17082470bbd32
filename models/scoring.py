"""Teacher-forced scoring engine shared by HCAPO and HP-RLVR: views in, per-token scores out.

Both methods re-score each step's action tokens with the policy that produced them, once
under the causal prompt and once under a hindsight prompt (HCAPO, arXiv 2603.08754:
outcome injected into the step's prompt; HP-RLVR, Chen et al. 2026: realized future and
verifier feedback). The engine does this for many steps at once:

- one forward per view per step (all action tokens of a step are scored by the same
  teacher-forced pass, never one pass per token);
- rows right-padded, sorted by context length and chunked greedily to a memory budget,
  so similar lengths share a chunk and padding stays small;
- logits are only projected at the action positions (`models.masked_logits`: the
  decoder's hidden states at a boolean [B, L] mask through the output layer give
  [sum_r A_r, V]), so no batch x length x vocabulary tensor exists;
  JSD is reduced to one value per token inside the chunk and the distributions dropped;
- with the policy's generation cache (`models.generation_cache`), what generation
  already computed is not computed again: a hindsight view loads the keys and values of
  the prompt prefix it shares with its step and runs only the rest; a causal view kept
  from generation takes its distributions from the kept output-layer inputs;
- `torch.no_grad`, `model.eval()` during scoring and the previous mode restored after, so
  it works on a model that is being trained, and on peft (LoRA) wrappers, whose adapter
  layers sit inside the wrapped causal LM's decoder;
- a call that lasts more than two seconds shows a bar on stderr, views scored of the
  total, advanced chunk by chunk, its elapsed time redrawn every second
  (`models.progress.LiveBar`): HP-RLVR's scoring of one ALFWorld batch takes minutes on
  a CPU.

A `ScoreMemo` keeps every view's scores across calls for one set of weights, so modules
that score the same views (variants of one method that only post-process the scores,
or HCAPO's causal view and HP-RLVR's) pay for each forward once; `prefetch` fills it for
many views of each step at once (measuring credit calls it through
`measure.prefetch.prefetch_modules`).

Views (`TeacherForced`: context ids, then the action ids to score) are built by the credit
modules (`credit.views`); this module only runs the model on them. A view longer than the
model's positions loses its oldest context tokens (`fit_to_model`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel

from creditgym.models.generation_cache import (
    BLOCK_TOKENS,
    CachedPrompt,
    GenerationCache,
    common_prefix_length,
    parameter_fingerprint,
    shared_opening_length,
)
from creditgym.models.kv_cache import cache_keyword
from creditgym.models.masked_logits import masked_logits
from creditgym.models.progress import SHOW_AFTER_S, LiveBar
from creditgym.models.registry import LoadedModel

# 1 GiB: comfortably inside a 24 GiB machine shared by several processes.
DEFAULT_MEMORY_BUDGET_BYTES = 1 << 30
LN2 = math.log(2.0)
# Padded tokens allowed per real token in one chunk (see `_chunks`).
MAX_PADDING = 1.1
# The progress bar of a scoring call; its unit is one view run through the model (in
# `score_divergence` a step's pair counts once: its hindsight view, the causal one with it).
SCORING_LABEL = "hindsight scoring"


@dataclass(frozen=True)
class TeacherForced:
    """One sequence to score: context tokens, then the action tokens whose log-probs we want.

    Attributes:
        context_ids: prompt token ids, shape [P], P >= 1 (the first action token needs a
            predecessor).
        action_ids: action token ids, shape [A] (A = 0 is allowed and scores nothing).
    """

    context_ids: tuple[int, ...]
    action_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.context_ids and self.action_ids:
            raise ValueError("a scored sequence needs at least one context token")

    @property
    def length(self) -> int:
        return len(self.context_ids) + len(self.action_ids)


@dataclass(frozen=True)
class PairedScores:
    """Both views of one step, per action token (each array float32 of shape [A]).

    Attributes:
        causal_logprobs: log pi(y_j | causal context, y_<j).
        hindsight_logprobs: log pi(y_j | hindsight context, y_<j).
        jsd: JS(p_causal_j || p_hind_j) / ln 2 over the full vocabulary, in [0, 1].
    """

    causal_logprobs: np.ndarray
    hindsight_logprobs: np.ndarray
    jsd: np.ndarray


class ScoreMemo:
    """Scores of views already computed with one set of weights, kept across calls.

    Keyed by the views themselves (token ids), so a hit is exact. The memo records the
    model's parameter fingerprint (`models.generation_cache.parameter_fingerprint`) and
    empties itself when the weights change, so it never serves stale scores. Nothing
    bounds its size: it is for an evaluation over a fixed set of trajectories, not for
    training.
    """

    def __init__(self) -> None:
        self.logprobs: dict[TeacherForced, np.ndarray] = {}
        self.pairs: dict[tuple[TeacherForced, TeacherForced], PairedScores] = {}
        self.fingerprint: tuple | None = None

    def check(self, loaded: LoadedModel) -> None:
        """Empty the memo if `loaded`'s weights are not the ones its scores came from."""
        fingerprint = parameter_fingerprint(loaded.model)
        if fingerprint != self.fingerprint:
            self.logprobs.clear()
            self.pairs.clear()
            self.fingerprint = fingerprint


class _EvalMode:
    """`model.eval()` + `torch.no_grad()` for the block; restores the training flag after."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.was_training = model.training
        self.no_grad = torch.no_grad()

    def __enter__(self) -> None:
        self.model.eval()
        self.no_grad.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.no_grad.__exit__(*exc)
        self.model.train(self.was_training)


def _scoring_bar(total: int) -> LiveBar:
    """Views scored of `total`, on stderr once a call has lasted `SHOW_AFTER_S`."""
    return LiveBar(total=total, desc=SCORING_LABEL, unit="view", leave=False, delay=SHOW_AFTER_S)


def _row_cost_bytes(model: PreTrainedModel, length: int, num_actions: int) -> int:
    """Rough peak bytes one row adds to a chunk (float32 activations, attention, logits).

    Activations ~ a few [L, hidden] buffers, attention scores [heads, L, L] (the CPU sdpa
    path materialises them), and ~6 [A, V] float buffers for logits, log-softmax and JSD.
    """
    config = model.config
    hidden = config.hidden_size
    heads = config.num_attention_heads
    vocab = model.get_output_embeddings().weight.shape[0]
    return 4 * (length * hidden * 8 + heads * length * length + num_actions * vocab * 6)


def _cache_cost_bytes(model: PreTrainedModel, length: int) -> int:
    """Upper bound on the KV cache (keys and values, every layer) of one row."""
    config = model.config
    return 4 * 2 * config.num_hidden_layers * config.hidden_size * length


def _chunks(
    costs: Sequence[int],
    segments: Sequence[tuple[int, ...]],
    order: Sequence[int],
    budget: int,
) -> Iterator[list[int]]:
    """Greedy consecutive chunks of `order` under a memory budget and a padding limit.

    A chunk closes when adding the next row would push its summed cost over `budget`, or
    its padded tokens over `MAX_PADDING` x its real tokens. `segments[i]` are row i's
    token lengths per padded forward (e.g. prefix, causal suffix, hindsight suffix); each
    forward pads to its longest row. On a CPU a single row already fills the matrix
    units, so padding is pure waste there; on a GPU rows of similar length still batch.
    A single row over budget still forms its own chunk (it cannot be split further).
    """
    chunk: list[int] = []
    used = 0
    for index in order:
        if chunk:
            grown = [*chunk, index]
            real = sum(sum(segments[i]) for i in grown)
            padded = len(grown) * sum(map(max, zip(*(segments[i] for i in grown), strict=True)))
            if used + costs[index] > budget or padded > MAX_PADDING * real:
                yield chunk
                chunk, used = [], 0
        chunk.append(index)
        used += costs[index]
    if chunk:
        yield chunk


def _action_log_softmax(loaded: LoadedModel, views: Sequence[TeacherForced]) -> list[torch.Tensor]:
    """One padded forward over `views`; per view the float32 log-softmax [A_r, V].

    The logit predicting action token j sits at position P + j - 1.
    """
    model = loaded.model
    device = model.get_output_embeddings().weight.device
    width = max(view.length for view in views)
    pad_id = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(views), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(views), width), dtype=torch.long)
    keep = torch.zeros((len(views), width), dtype=torch.bool)
    for row, view in enumerate(views):
        input_ids[row, : view.length] = torch.tensor(view.context_ids + view.action_ids)
        attention_mask[row, : view.length] = 1
        prompt_len = len(view.context_ids)
        keep[row, prompt_len - 1 : view.length - 1] = True
    logits = masked_logits(
        model,
        keep.to(device),
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        use_cache=False,
    )
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return list(torch.split(log_probs, [len(view.action_ids) for view in views]))


def fit_to_model(loaded: LoadedModel, views: Sequence[TeacherForced]) -> list[TeacherForced]:
    """Views cut to the model's positions by dropping the oldest context tokens.

    A policy's own steps always fit (it generated them from that prompt); rebuilt prompts
    of scripted steps, or hindsight prompts, can be longer. Keeping the most recent
    context (the current observation, the hindsight block and the instruction) is what
    the action's log-probs depend on most; the cut drops the intro and oldest history.

    Raises:
        ValueError: an action alone does not fit next to one context token.
    """
    limit = loaded.model.config.max_position_embeddings
    fitted = []
    for view in views:
        if view.length > limit:
            keep = limit - len(view.action_ids)
            if keep < 1:
                raise ValueError(
                    f"an action of {len(view.action_ids)} tokens does not fit in the "
                    f"model's {limit} positions"
                )
            view = TeacherForced(view.context_ids[-keep:], view.action_ids)
        fitted.append(view)
    return fitted


def _lookup(
    generation_cache: GenerationCache | None, view: TeacherForced
) -> tuple[int, CachedPrompt | None]:
    """Cached prompt tokens usable for `view`, leaving >= 1 context token to recompute
    (the position that predicts the first action token)."""
    if generation_cache is None or not view.action_ids:
        return 0, None
    return generation_cache.lookup_prompt(view.context_ids, limit=len(view.context_ids) - 1)


def _generated(
    generation_cache: GenerationCache | None, view: TeacherForced
) -> torch.Tensor | None:
    """The output-layer inputs [A, hidden] generation kept for exactly this view, if any."""
    if generation_cache is None or not view.action_ids:
        return None
    return generation_cache.response_hidden(view.context_ids, view.action_ids)


def _log_softmax_from_hidden(loaded: LoadedModel, hidden: torch.Tensor) -> torch.Tensor:
    """float32 log-softmax [A, V] of the output layer applied to kept hidden states [A, H]
    (generation checked that the output layer alone gives its logits)."""
    head = loaded.model.get_output_embeddings()
    return torch.log_softmax(head(hidden.to(head.weight.device)).float(), dim=-1)


def _single_view_log_softmax(
    loaded: LoadedModel,
    views: Sequence[TeacherForced],
    indices: Sequence[int],
    stored: Sequence[tuple[int, CachedPrompt | None]],
    memory_budget_bytes: int,
) -> Iterator[list[tuple[int, torch.Tensor]]]:
    """Chunk by chunk, (index, float32 log-softmax [A, V]) of views[indices].

    A view with a cached prompt prefix (`stored[i][0] > 0`) loads it and runs only the
    rest (`_prefixed_log_softmax`); the others get plain padded forwards.
    """
    order = sorted(indices, key=lambda i: (len(views[i].context_ids), views[i].length))
    model = loaded.model
    plain = [i for i in order if not stored[i][0]]
    costs = [_row_cost_bytes(model, view.length, len(view.action_ids)) for view in views]
    for chunk in _chunks(costs, [(view.length,) for view in views], plain, memory_budget_bytes):
        log_probs = _action_log_softmax(loaded, [views[i] for i in chunk])
        yield list(zip(chunk, log_probs, strict=True))
    cached = [i for i in order if stored[i][0]]
    costs = [c + _cache_cost_bytes(model, v.length) for c, v in zip(costs, views, strict=True)]
    segments = [(n, view.length - n) for (n, _), view in zip(stored, views, strict=True)]
    for chunk in _chunks(costs, segments, cached, memory_budget_bytes):
        rows = [_Prefixed((views[i],), 0, *stored[i]) for i in chunk]
        log_probs = [pair[0] for pair in _prefixed_log_softmax(loaded, rows)]
        yield list(zip(chunk, log_probs, strict=True))


def score_logprobs(
    loaded: LoadedModel,
    views: Sequence[TeacherForced],
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    generation_cache: GenerationCache | None = None,
    memo: ScoreMemo | None = None,
) -> list[np.ndarray]:
    """Per-action-token log-probs of every view, batched and chunked.

    With `memo`, views scored before (alone or in a pair) are not scored again, and the
    new scores are kept.

    With `generation_cache` (`models.generation_cache`): a view that is a step exactly as
    generated takes its distributions from the kept hidden states (output layer only); a
    view whose context starts with a kept prompt (a hindsight view starts with its step's
    own prompt) loads those keys and values and runs only the tokens after them.

    Returns:
        per view, float32 array [A_r] of log pi(y_j | context, y_<j).
    """
    if memo is not None:
        memo.check(loaded)
        missing = list(dict.fromkeys(view for view in views if view not in memo.logprobs))
        fresh = score_logprobs(loaded, missing, memory_budget_bytes, generation_cache)
        memo.logprobs.update(zip(missing, fresh, strict=True))
        return [memo.logprobs[view] for view in views]
    views = fit_to_model(loaded, views)
    results = [np.zeros(len(view.action_ids), dtype=np.float32) for view in views]
    hidden = [_generated(generation_cache, view) for view in views]
    stored = [
        _lookup(generation_cache, view) if kept is None else (0, None)
        for view, kept in zip(views, hidden, strict=True)
    ]
    run = [i for i, view in enumerate(views) if view.action_ids and hidden[i] is None]
    with _EvalMode(loaded.model), _scoring_bar(len(run)) as bar:
        for i, kept in enumerate(hidden):
            if kept is not None:
                results[i] = _gather(_log_softmax_from_hidden(loaded, kept), views[i].action_ids)
        for chunk in _single_view_log_softmax(loaded, views, run, stored, memory_budget_bytes):
            for i, log_probs in chunk:
                results[i] = _gather(log_probs, views[i].action_ids)
            bar.update(len(chunk))
    return results


def shared_context_cache(
    loaded: LoadedModel, views: Sequence[TeacherForced]
) -> GenerationCache | None:
    """A generation cache holding the context prefix all `views` share, run once.

    Handed to `score_logprobs`, every view loads that prefix's keys and values and runs
    only its own tokens after it (`_prefixed_log_softmax`), the same arithmetic as the
    generation cache's hindsight views. For views that differ only near their ends that
    is much of the work (KeyDoor's exact tables at delay 4: prompts of 169-213 tokens
    open with the same 83; `score_alternatives`). None when fewer than two views have
    actions or they share less than one cache block (`models.generation_cache.BLOCK_TOKENS`).
    """
    contexts = [view.context_ids for view in fit_to_model(loaded, views) if view.action_ids]
    if len(contexts) < 2:
        return None
    # Each view keeps >= 1 context token of its own (the position predicting its first
    # action token), as `_lookup` asks.
    length = shared_opening_length(contexts)
    if length < BLOCK_TOKENS:
        return None
    model = loaded.model
    device = model.get_output_embeddings().weight.device
    prefix = contexts[0][:length]
    kv = DynamicCache()
    with _EvalMode(model):
        model(
            input_ids=torch.tensor([prefix], dtype=torch.long, device=device),
            use_cache=True,
            logits_to_keep=1,
            **{cache_keyword(model): kv},
        )
    cache = GenerationCache(model)
    cache.put_prompt(prefix, [(layer.keys[0], layer.values[0]) for layer in kv.layers])
    return cache


def _gather(log_probs: torch.Tensor, action_ids: Sequence[int]) -> np.ndarray:
    """log_probs [A, V] at the action ids -> float32 [A]."""
    targets = torch.tensor(action_ids, device=log_probs.device)[:, None]
    return log_probs.gather(1, targets).squeeze(1).cpu().numpy()


def jensen_shannon(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """Normalised Jensen-Shannon divergence JS(p || q) / ln 2 per row, in [0, 1].

    Args:
        log_p, log_q: [N, V] log-probabilities (natural log) of two distributions.
    Returns:
        [N] float32, 0 iff the rows are equal, 1 for disjoint supports.
    """
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - LN2
    # xlogy-style terms: p * (log p - log m) is 0 where p == 0, and exp(-inf) == 0 keeps it so.
    kl_pm = (log_p.exp() * (log_p - log_m)).nan_to_num(0.0).sum(-1)
    kl_qm = (log_q.exp() * (log_q - log_m)).nan_to_num(0.0).sum(-1)
    return (0.5 * (kl_pm + kl_qm) / LN2).clamp(0.0, 1.0)


def shared_prefix_length(causal: TeacherForced, hindsight: TeacherForced) -> int:
    """Tokens both contexts start with, leaving each at least one context token after it
    (the position that predicts the first action token must be recomputed per view)."""
    limit = min(len(causal.context_ids), len(hindsight.context_ids)) - 1
    return min(common_prefix_length(causal.context_ids, hindsight.context_ids), max(limit, 0))


@dataclass(frozen=True)
class _Prefixed:
    """One row of `_prefixed_log_softmax`: views that share a prompt prefix.

    Attributes:
        views: 1 or 2 views; all start with the same `shared` tokens.
        shared: prefix length common to every view (computed once for them).
        stored: prefix length of views[0] loaded from `entry` (0: nothing cached).
        entry: the cached prompt whose first `stored` positions are views[0]'s.
    """

    views: tuple[TeacherForced, ...]
    shared: int
    stored: int
    entry: CachedPrompt | None

    @property
    def held(self) -> int:
        """Prefix positions in the row's cache: loaded, then extended to `shared`."""
        return max(self.stored, self.shared)

    def start(self, view_index: int) -> int:
        """Where view `view_index`'s own forward begins: views[0] continues after the
        whole held prefix, the others after the part they share with it."""
        return self.held if view_index == 0 else self.shared


def _prefix_cache(loaded: LoadedModel, rows: Sequence[_Prefixed]):
    """KV cache of every row's held prefix and the position of each cache column.

    Cached keys and values are copied in right-padded ([B, kv_heads, max stored,
    head_dim] per layer, padding zeros); one forward then extends rows whose shared
    prefix reaches past what was cached. Returns (cache or None, column positions
    [B, W] with -1 for padding).
    """
    model = loaded.model
    device = model.get_output_embeddings().weight.device
    cache, columns = None, torch.zeros((len(rows), 0), dtype=torch.long)
    width = max(row.stored for row in rows)
    if width:
        kv = next(row.entry.kv for row in rows if row.entry is not None)
        layers, _, heads, _, dim = kv.shape
        loaded_kv = kv.new_zeros((layers, 2, len(rows), heads, width, dim))
        columns = torch.full((len(rows), width), -1, dtype=torch.long)
        for r, row in enumerate(rows):
            if row.stored:
                loaded_kv[:, :, r, :, : row.stored] = row.entry.kv[..., : row.stored, :]
                columns[r, : row.stored] = torch.arange(row.stored)
        loaded_kv = loaded_kv.to(device)
        cache = DynamicCache()
        for layer in range(layers):
            cache.update(loaded_kv[layer, 0], loaded_kv[layer, 1], layer)
    extension = max(row.held - row.stored for row in rows)
    if extension:
        pad_id = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(rows), extension), pad_id, dtype=torch.long)
        new_columns = torch.full((len(rows), extension), -1, dtype=torch.long)
        for r, row in enumerate(rows):
            tokens = row.views[0].context_ids[row.stored : row.held]
            ids[r, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            new_columns[r, : len(tokens)] = row.stored + torch.arange(len(tokens))
        positions = torch.tensor([row.stored for row in rows])[:, None] + torch.arange(extension)
        cache = DynamicCache() if cache is None else cache  # extended in place
        model(
            input_ids=ids.to(device),
            attention_mask=torch.cat([columns, new_columns], dim=1).ge(0).long().to(device),
            position_ids=positions.to(device),
            use_cache=True,
            logits_to_keep=1,
            **{cache_keyword(model): cache},
        )
        columns = torch.cat([columns, new_columns], dim=1)
    return cache, columns


def _prefixed_log_softmax(
    loaded: LoadedModel, rows: Sequence[_Prefixed]
) -> list[tuple[torch.Tensor, ...]]:
    """The views of each row with their common prefix held once in a KV cache.

    The prefix is loaded from the generation cache and/or computed by one batched forward
    (`_prefix_cache`); then one batched forward per view index runs each view's tokens
    after its start (explicit position ids; the cache columns it must not see -- padding,
    or cached positions past where this view departs from views[0] -- masked), and the
    cache is cropped back to the prefixes for the next view. Every row needs a held
    prefix of >= 1 token and every view >= 1 context token after its start.

    Returns:
        per row, per view, float32 log-softmax [A_r, V].
    """
    model = loaded.model
    device = model.get_output_embeddings().weight.device
    pad_id = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    cache, columns = _prefix_cache(loaded, rows)
    per_view = []
    for view_index in range(len(rows[0].views)):
        views = [row.views[view_index] for row in rows]
        starts = torch.tensor([row.start(view_index) for row in rows])
        width = max(view.length - int(start) for view, start in zip(views, starts, strict=True))
        suffix_ids = torch.full((len(views), width), pad_id, dtype=torch.long)
        suffix_mask = torch.zeros_like(suffix_ids)
        keep = torch.zeros((len(views), width), dtype=torch.bool)
        for r, (view, start) in enumerate(zip(views, starts.tolist(), strict=True)):
            tokens = view.context_ids[start:] + view.action_ids
            suffix_ids[r, : len(tokens)] = torch.tensor(tokens)
            suffix_mask[r, : len(tokens)] = 1
            first = len(view.context_ids) - start - 1  # predicts the first action token
            keep[r, first : first + len(view.action_ids)] = True
        visible = (columns >= 0) & (columns < starts[:, None])
        logits = masked_logits(
            model,
            keep.to(device),
            input_ids=suffix_ids.to(device),
            attention_mask=torch.cat([visible.long(), suffix_mask], dim=1).to(device),
            position_ids=(starts[:, None] + torch.arange(width)).to(device),
            use_cache=True,
            **{cache_keyword(model): cache},
        )
        cache.crop(-width)  # back to the prefixes for the next view
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        per_view.append(torch.split(log_probs, [len(view.action_ids) for view in views]))
    return list(zip(*per_view, strict=True))


def prefetch(
    memo: ScoreMemo,
    loaded: LoadedModel,
    steps: Sequence[tuple[TeacherForced, Sequence[TeacherForced]]],
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
) -> None:
    """Fill `memo` for many hindsight views of each step, their common prefix run once.

    Each item is a step's causal view and its hindsight views (e.g. one per option of an
    ablation), all with the step's action ids. The prompt prefix every view of the step
    shares (`shared_prefix_length`) is computed once, then each view's own tokens after
    it (`_prefixed_log_softmax`), so k variants cost one prompt plus k suffixes instead
    of k prompts. Afterwards `score_logprobs` of any of these views and `score_divergence`
    of any (causal, hindsight) pair are memo hits. Steps of equal view counts are chunked
    together; a step whose views share no prefix is left to those functions.
    """
    memo.check(loaded)
    rows: dict[int, list[tuple[TeacherForced, tuple[TeacherForced, ...], int]]] = {}
    queued: set[tuple[TeacherForced, TeacherForced]] = set()
    for causal, hindsight in steps:
        # Steps repeat (rollouts of one group that took the same actions): each pair is
        # scored once, whether the memo had it or an earlier step of this call queued it.
        hindsight = tuple(
            dict.fromkeys(
                h for h in hindsight if (causal, h) not in memo.pairs and (causal, h) not in queued
            )
        )
        if not hindsight or not causal.action_ids:
            continue
        queued.update((causal, h) for h in hindsight)
        if any(h.action_ids != causal.action_ids for h in hindsight):
            raise ValueError("a step's causal and hindsight views carry different action ids")
        fitted = fit_to_model(loaded, [causal, *hindsight])
        shared = min(shared_prefix_length(fitted[0], h) for h in fitted[1:])
        if shared:
            rows.setdefault(len(hindsight), []).append((causal, hindsight, shared))
    total = sum(len(hindsight) for group in rows.values() for _, hindsight, _ in group)
    with _EvalMode(loaded.model), _scoring_bar(total) as bar:
        for group in rows.values():
            fitted = [tuple(fit_to_model(loaded, [c, *hs])) for c, hs, _ in group]
            costs = [
                sum(_row_cost_bytes(loaded.model, v.length, len(v.action_ids)) for v in views)
                + _cache_cost_bytes(loaded.model, views[0].length)
                for views in fitted
            ]
            segments = [
                (shared, *(v.length - shared for v in views))
                for views, (_, _, shared) in zip(fitted, group, strict=True)
            ]
            order = sorted(range(len(group)), key=lambda index: segments[index])
            for chunk in _chunks(costs, segments, order, memory_budget_bytes):
                prefixed = [_Prefixed(fitted[i], group[i][2], 0, None) for i in chunk]
                for i, distributions in zip(
                    chunk, _prefixed_log_softmax(loaded, prefixed), strict=True
                ):
                    causal, hindsight, _ = group[i]
                    log_p = distributions[0]
                    memo.logprobs.setdefault(causal, _gather(log_p, causal.action_ids))
                    for view, log_q in zip(hindsight, distributions[1:], strict=True):
                        scores = _paired_scores(log_p, log_q, causal.action_ids)
                        memo.pairs[(causal, view)] = scores
                        memo.logprobs.setdefault(view, scores.hindsight_logprobs)
                    bar.update(len(hindsight))


def _paired_scores(log_p: torch.Tensor, log_q: torch.Tensor, action_ids) -> PairedScores:
    return PairedScores(
        causal_logprobs=_gather(log_p, action_ids),
        hindsight_logprobs=_gather(log_q, action_ids),
        jsd=jensen_shannon(log_p, log_q).cpu().numpy().astype(np.float32),
    )


def score_divergence(
    loaded: LoadedModel,
    causal: Sequence[TeacherForced],
    hindsight: Sequence[TeacherForced],
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    generation_cache: GenerationCache | None = None,
    memo: ScoreMemo | None = None,
) -> list[PairedScores]:
    """Score both views of every step and the per-token JSD of their next-token distributions.

    With `memo`, pairs scored before are not scored again; the new pairs are kept, and
    each of their views' log-probs too (for `score_logprobs`).

    Views are paired by index and must carry the same action ids. With
    `generation_cache`, a causal view kept from generation takes its distributions from
    the kept hidden states and only its hindsight view runs (from the kept prompt
    prefix). Otherwise each chunk scores both views of its steps, their common prompt
    prefix held once (`_prefixed_log_softmax`: loaded from the cache where the prompt was
    kept, computed otherwise; steps whose views share no prefix get two plain forwards).
    The [A, V] distributions are reduced to per-token values and freed chunk by chunk.
    """
    if len(causal) != len(hindsight):
        raise ValueError(f"{len(causal)} causal views but {len(hindsight)} hindsight views")
    for index, (causal_item, hindsight_item) in enumerate(zip(causal, hindsight, strict=True)):
        if causal_item.action_ids != hindsight_item.action_ids:
            raise ValueError(f"view pair {index}: causal and hindsight action ids differ")
    if memo is not None:
        memo.check(loaded)
        pairs = list(zip(causal, hindsight, strict=True))
        missing = list(dict.fromkeys(pair for pair in pairs if pair not in memo.pairs))
        fresh = score_divergence(
            loaded,
            [c for c, _ in missing],
            [h for _, h in missing],
            memory_budget_bytes,
            generation_cache,
        )
        for (c, h), scores in zip(missing, fresh, strict=True):
            memo.pairs[(c, h)] = scores
            memo.logprobs.setdefault(c, scores.causal_logprobs)
            memo.logprobs.setdefault(h, scores.hindsight_logprobs)
        return [memo.pairs[pair] for pair in pairs]
    causal, hindsight = fit_to_model(loaded, causal), fit_to_model(loaded, hindsight)
    empty = np.zeros(0, dtype=np.float32)
    results = [PairedScores(empty, empty, empty) for _ in causal]
    scored = [index for index, view in enumerate(causal) if view.action_ids]
    hidden = [_generated(generation_cache, view) for view in causal]
    generated = [i for i in scored if hidden[i] is not None]
    costs = [
        _row_cost_bytes(loaded.model, c.length, len(c.action_ids))
        + _row_cost_bytes(loaded.model, h.length, len(h.action_ids))
        + _cache_cost_bytes(loaded.model, c.length)
        for c, h in zip(causal, hindsight, strict=True)
    ]
    prefixes = [shared_prefix_length(c, h) for c, h in zip(causal, hindsight, strict=True)]
    segments = [
        (prefix, c.length - prefix, h.length - prefix)
        for prefix, c, h in zip(prefixes, causal, hindsight, strict=True)
    ]
    order = sorted((i for i in scored if hidden[i] is None), key=lambda index: segments[index])
    # The prompt prefix to load: a kept causal view's hindsight view runs alone, from its
    # own lookup; a pair runs from the causal context's; a pair sharing nothing with its
    # partner gets plain forwards, no cache.
    stored = [
        _lookup(generation_cache, h)
        if kept is not None
        else _lookup(generation_cache, c)
        if prefix
        else (0, None)
        for c, h, kept, prefix in zip(causal, hindsight, hidden, prefixes, strict=True)
    ]
    with _EvalMode(loaded.model), _scoring_bar(len(scored)) as bar:
        for chunk in _single_view_log_softmax(
            loaded, hindsight, generated, stored, memory_budget_bytes
        ):
            for i, log_q in chunk:
                log_p = _log_softmax_from_hidden(loaded, hidden[i])
                results[i] = _paired_scores(log_p, log_q, causal[i].action_ids)
            bar.update(len(chunk))
        for chunk in _chunks(costs, segments, order, memory_budget_bytes):
            shared = [i for i in chunk if prefixes[i] > 0]
            unshared = [i for i in chunk if prefixes[i] == 0]
            distributions: dict[int, tuple[torch.Tensor, ...]] = {}
            if shared:
                rows = [
                    _Prefixed((causal[i], hindsight[i]), prefixes[i], *stored[i]) for i in shared
                ]
                distributions.update(zip(shared, _prefixed_log_softmax(loaded, rows), strict=True))
            if unshared:
                causal_rows = _action_log_softmax(loaded, [causal[i] for i in unshared])
                hindsight_rows = _action_log_softmax(loaded, [hindsight[i] for i in unshared])
                distributions.update(
                    zip(unshared, zip(causal_rows, hindsight_rows, strict=True), strict=True)
                )
            for i, (log_p, log_q) in distributions.items():
                results[i] = _paired_scores(log_p, log_q, causal[i].action_ids)
            bar.update(len(chunk))
    return results


def score_alternatives(
    loaded: LoadedModel,
    prompts: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    memo: ScoreMemo | None = None,
) -> list[list[np.ndarray]]:
    """Per-token log-probs of several action sequences under each of many prompts.

    An exact policy table scores every command of every state (`measure.ground_truth`):
    alternatives under one prompt, prompts that open alike. So the prompts' common
    opening runs once (`shared_context_cache`), each prompt's own tokens after it run
    once for all its alternatives (`_prefixed_log_softmax`, one batched forward over
    many prompts), and each alternative runs only its own tokens (the prompt's last
    token, which predicts its first, and the sequence). The same log-probs as
    `score_logprobs` of the whole views, to float rounding. One smollm2-135m KeyDoor
    table at delay 4 (29 prompts of 169-213 tokens opening with the same 83, 60
    commands), 1 thread beside two sweeps: 62.0 -> 19.6 s in float32 (3.2x; log-probs
    within 2.2e-5), 31.6 -> 10.4 s with bfloat16 products (3.0x; each path's log-probs
    within 0.17 of float32's at tokens of probability ~0.004, the commands' probabilities
    within 5e-5); the opening alone shared gave 2.0x (probes).

    Args:
        prompts: (prompt ids [P], action sequences [A_k]) per prompt; P >= 2.
        memo: scores kept for these weights (`ScoreMemo`); views it holds are not rerun.
    Returns:
        per prompt, per sequence, float32 array [A_k] of log pi(y_j | prompt, y_<j).
    """
    views = [
        tuple(TeacherForced(tuple(prompt), tuple(sequence)) for sequence in sequences)
        for prompt, sequences in prompts
    ]
    if any(
        len(group[0].context_ids) < 2 or not all(v.action_ids for v in group) for group in views
    ):
        raise ValueError("every prompt needs >= 2 tokens and every sequence >= 1")
    if memo is not None:
        memo.check(loaded)
    kept = memo.logprobs if memo is not None else {}
    todo = [i for i, group in enumerate(views) if any(view not in kept for view in group)]
    opening = shared_context_cache(loaded, [view for i in todo for view in views[i]])
    fresh: dict[TeacherForced, np.ndarray] = {}
    by_size: dict[int, list[int]] = {}
    for i in todo:
        by_size.setdefault(len(views[i]), []).append(i)
    model = loaded.model
    with _EvalMode(model), _scoring_bar(sum(len(views[i]) for i in todo)) as bar:
        for members in by_size.values():
            held = {i: len(views[i][0].context_ids) - 1 for i in members}
            stored = {
                i: opening.lookup_prompt(views[i][0].context_ids, limit=held[i])
                if opening is not None
                else (0, None)
                for i in members
            }
            costs = {
                i: sum(_row_cost_bytes(model, v.length, len(v.action_ids)) for v in views[i])
                + _cache_cost_bytes(model, views[i][0].length)
                for i in members
            }
            segments = {
                i: (
                    stored[i][0],
                    held[i] - stored[i][0],
                    *(len(v.action_ids) + 1 for v in views[i]),
                )
                for i in members
            }
            order = sorted(range(len(members)), key=lambda k: segments[members[k]])
            for chunk in _chunks(
                [costs[i] for i in members],
                [segments[i] for i in members],
                order,
                memory_budget_bytes,
            ):
                rows = [members[k] for k in chunk]
                prefixed = [_Prefixed(views[i], held[i], *stored[i]) for i in rows]
                for i, distributions in zip(
                    rows, _prefixed_log_softmax(loaded, prefixed), strict=True
                ):
                    for view, log_probs in zip(views[i], distributions, strict=True):
                        fresh[view] = _gather(log_probs, view.action_ids)
                bar.update(sum(len(views[i]) for i in rows))
    if memo is not None:
        memo.logprobs.update(fresh)
    return [[fresh[view] if view in fresh else kept[view] for view in group] for group in views]
