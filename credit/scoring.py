"""Teacher-forced scoring engine shared by HCAPO and HP-RLVR.

Both methods re-score each step's action tokens with the policy that produced them, once
under the causal prompt and once under a hindsight prompt (HCAPO, arXiv 2603.08754:
outcome injected into the step's prompt; HP-RLVR, Chen et al. 2026: realized future and
verifier feedback). The engine does this for many steps at once:

- one forward per view per step (all action tokens of a step are scored by the same
  teacher-forced pass, never one pass per token);
- rows right-padded, sorted by context length and chunked greedily to a memory budget,
  so similar lengths share a chunk and padding stays small;
- logits are only projected at the action positions (`logits_to_keep` with a boolean
  [B, L] mask gives [sum_r A_r, V]), so no batch x length x vocabulary tensor exists;
  JSD is reduced to one value per token inside the chunk and the distributions dropped;
- `torch.no_grad`, `model.eval()` during scoring and the previous mode restored after, so
  it works on a model that is being trained, and on peft (LoRA) wrappers, which forward
  `logits_to_keep` to the wrapped causal LM.

Views of a step (`causal_view`, `hindsight_view`): a policy step's causal view is its
recorded `prompt_token_ids + action_token_ids`, exactly. The hindsight view rebuilds the
step's prompt with `agents.prompts.messages_for_step(..., hindsight=text)` rendered by the
tokenizer's chat template with the generation prompt, followed by the same action ids.
Scripted steps (no tokens; e.g. the expert trajectories of `credit.evaluate`) tokenise
`step.prompt_text` (or, when empty, the rebuilt prompt) and `step.action`. A view longer
than the model's positions loses its oldest context tokens (`fit_to_model`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.models import LoadedModel
from agents.prompts import messages_for_step
from agents.trajectory import Trajectory

# 1 GiB: comfortably inside a 24 GiB machine shared by several processes.
DEFAULT_MEMORY_BUDGET_BYTES = 1 << 30
LN2 = math.log(2.0)
# Padded tokens allowed per real token in one chunk (see `_chunks`).
MAX_PADDING = 1.1


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


def render_prompt_ids(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]
) -> tuple[int, ...]:
    """Chat-template `messages` with the generation prompt, as token ids [P]."""
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def action_ids_of(tokenizer: PreTrainedTokenizerBase, trajectory: Trajectory, t: int) -> tuple:
    """The exact generated ids of step t, or the tokenised action text for scripted steps."""
    step = trajectory.steps[t]
    if step.action_token_ids:
        return tuple(step.action_token_ids)
    return tuple(tokenizer(step.action, add_special_tokens=False)["input_ids"])


def causal_view(
    tokenizer: PreTrainedTokenizerBase, trajectory: Trajectory, t: int, history_len: int = 2
) -> TeacherForced:
    """Step t as the policy saw it (recorded tokens when present, see module docstring)."""
    step = trajectory.steps[t]
    if step.prompt_token_ids:
        context = tuple(step.prompt_token_ids)
    elif step.prompt_text:
        context = tuple(tokenizer(step.prompt_text, add_special_tokens=False)["input_ids"])
    else:
        context = render_prompt_ids(tokenizer, messages_for_step(trajectory, t, history_len))
    return TeacherForced(context, action_ids_of(tokenizer, trajectory, t))


def hindsight_view(
    tokenizer: PreTrainedTokenizerBase,
    trajectory: Trajectory,
    t: int,
    hindsight: str,
    history_len: int = 2,
) -> TeacherForced:
    """Step t's prompt rebuilt with a hindsight block, followed by the same action ids."""
    messages = messages_for_step(trajectory, t, history_len, hindsight=hindsight)
    return TeacherForced(
        render_prompt_ids(tokenizer, messages), action_ids_of(tokenizer, trajectory, t)
    )


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
    logits = model(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        logits_to_keep=keep.to(device),
        use_cache=False,
    ).logits
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


def score_logprobs(
    loaded: LoadedModel,
    views: Sequence[TeacherForced],
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
) -> list[np.ndarray]:
    """Per-action-token log-probs of every view, batched and chunked.

    Returns:
        per view, float32 array [A_r] of log pi(y_j | context, y_<j).
    """
    views = fit_to_model(loaded, views)
    results = [np.zeros(len(view.action_ids), dtype=np.float32) for view in views]
    scored = [index for index, view in enumerate(views) if view.action_ids]
    costs = [_row_cost_bytes(loaded.model, view.length, len(view.action_ids)) for view in views]
    order = sorted(scored, key=lambda index: (len(views[index].context_ids), views[index].length))
    with _EvalMode(loaded.model):
        segments = [(view.length,) for view in views]
        for chunk in _chunks(costs, segments, order, memory_budget_bytes):
            log_probs = _action_log_softmax(loaded, [views[index] for index in chunk])
            for index, rows in zip(chunk, log_probs, strict=True):
                targets = torch.tensor(views[index].action_ids, device=rows.device)
                results[index] = rows.gather(1, targets[:, None]).squeeze(1).cpu().numpy()
    return results


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
    length = 0
    while length < limit and causal.context_ids[length] == hindsight.context_ids[length]:
        length += 1
    return length


def _paired_log_softmax(
    loaded: LoadedModel, pairs: Sequence[tuple[TeacherForced, TeacherForced]]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Both views of each step, their common prompt prefix computed once.

    The hindsight block sits just before the instruction (`agents.prompts`), so the two
    views of a step share most of their prompt. One batched forward over the shared
    prefixes fills a KV cache; then one batched forward over the causal suffixes and,
    after cropping the cache back to the prefixes, one over the hindsight suffixes
    (explicit position ids, the prefix padding masked). Every pair needs a shared prefix
    of >= 1 token.

    Returns:
        per pair, (causal, hindsight) float32 log-softmax, each [A_r, V].
    """
    model = loaded.model
    device = model.get_output_embeddings().weight.device
    pad_id = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    prefix_lengths = [shared_prefix_length(c, h) for c, h in pairs]
    prefix_ids = torch.full((len(pairs), max(prefix_lengths)), pad_id, dtype=torch.long)
    prefix_mask = torch.zeros_like(prefix_ids)
    for row, ((causal_item, _), length) in enumerate(zip(pairs, prefix_lengths, strict=True)):
        prefix_ids[row, :length] = torch.tensor(causal_item.context_ids[:length])
        prefix_mask[row, :length] = 1
    cache = model(
        input_ids=prefix_ids.to(device),
        attention_mask=prefix_mask.to(device),
        use_cache=True,
        logits_to_keep=1,
    ).past_key_values
    per_view = []
    for view_index in (0, 1):
        views = [pair[view_index] for pair in pairs]
        width = max(
            view.length - length for view, length in zip(views, prefix_lengths, strict=True)
        )
        suffix_ids = torch.full((len(views), width), pad_id, dtype=torch.long)
        suffix_mask = torch.zeros_like(suffix_ids)
        keep = torch.zeros((len(views), width), dtype=torch.bool)
        position_ids = torch.zeros_like(suffix_ids)
        for row, (view, length) in enumerate(zip(views, prefix_lengths, strict=True)):
            tokens = view.context_ids[length:] + view.action_ids
            suffix_ids[row, : len(tokens)] = torch.tensor(tokens)
            suffix_mask[row, : len(tokens)] = 1
            first = len(view.context_ids) - length - 1  # predicts the first action token
            keep[row, first : first + len(view.action_ids)] = True
            position_ids[row] = length + torch.arange(width)
        logits = model(
            input_ids=suffix_ids.to(device),
            attention_mask=torch.cat([prefix_mask, suffix_mask], dim=1).to(device),
            position_ids=position_ids.to(device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=keep.to(device),
        ).logits
        cache.crop(-width)  # back to the shared prefixes for the other view
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        per_view.append(torch.split(log_probs, [len(view.action_ids) for view in views]))
    return list(zip(*per_view, strict=True))


def score_divergence(
    loaded: LoadedModel,
    causal: Sequence[TeacherForced],
    hindsight: Sequence[TeacherForced],
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
) -> list[PairedScores]:
    """Score both views of every step and the per-token JSD of their next-token distributions.

    Views are paired by index and must carry the same action ids. Each chunk scores both
    views of its steps (sharing their common prompt prefix, `_paired_log_softmax`; steps
    whose views share no prefix get two plain forwards), reduces the [A, V] distributions
    to per-token values and frees them before the next chunk.
    """
    if len(causal) != len(hindsight):
        raise ValueError(f"{len(causal)} causal views but {len(hindsight)} hindsight views")
    for index, (causal_item, hindsight_item) in enumerate(zip(causal, hindsight, strict=True)):
        if causal_item.action_ids != hindsight_item.action_ids:
            raise ValueError(f"view pair {index}: causal and hindsight action ids differ")
    causal, hindsight = fit_to_model(loaded, causal), fit_to_model(loaded, hindsight)
    empty = np.zeros(0, dtype=np.float32)
    results = [PairedScores(empty, empty, empty) for _ in causal]
    costs = [
        _row_cost_bytes(loaded.model, c.length, len(c.action_ids))
        + _row_cost_bytes(loaded.model, h.length, len(h.action_ids))
        + _cache_cost_bytes(loaded.model, c.length)
        for c, h in zip(causal, hindsight, strict=True)
    ]
    scored = [index for index, view in enumerate(causal) if view.action_ids]
    prefixes = [shared_prefix_length(c, h) for c, h in zip(causal, hindsight, strict=True)]
    segments = [
        (prefix, c.length - prefix, h.length - prefix)
        for prefix, c, h in zip(prefixes, causal, hindsight, strict=True)
    ]
    order = sorted(scored, key=lambda index: segments[index])
    with _EvalMode(loaded.model):
        for chunk in _chunks(costs, segments, order, memory_budget_bytes):
            shared = [i for i in chunk if prefixes[i] > 0]
            unshared = [i for i in chunk if prefixes[i] == 0]
            distributions: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
            if shared:
                pairs = [(causal[i], hindsight[i]) for i in shared]
                distributions.update(zip(shared, _paired_log_softmax(loaded, pairs), strict=True))
            if unshared:
                causal_rows = _action_log_softmax(loaded, [causal[i] for i in unshared])
                hindsight_rows = _action_log_softmax(loaded, [hindsight[i] for i in unshared])
                distributions.update(
                    zip(unshared, zip(causal_rows, hindsight_rows, strict=True), strict=True)
                )
            for index, (log_p, log_q) in distributions.items():
                targets = torch.tensor(causal[index].action_ids, device=log_p.device)[:, None]
                results[index] = PairedScores(
                    causal_logprobs=log_p.gather(1, targets).squeeze(1).cpu().numpy(),
                    hindsight_logprobs=log_q.gather(1, targets).squeeze(1).cpu().numpy(),
                    jsd=jensen_shannon(log_p, log_q).cpu().numpy().astype(np.float32),
                )
    return results
