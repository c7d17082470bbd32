"""Log-probs under the sampling distribution, shared by the sampler and the trainer.

The behaviour log-prob of an action token is taken under the distribution the token
was actually drawn from, not the raw softmax: logits masked to the constrained-decoding
trie (when on), divided by the temperature, truncated to the top-p nucleus, and
renormalised. PPO-style ratios (verl-agent, TRL) are only exact when the trainer's new
log-probs use the same transform, so both sides call `sampling_logprobs`, and
`action_logprobs` re-scores recorded steps teacher-forced with the masks rebuilt from
`Step.admissible_commands`.

Re-scoring shares prefixes: every step of a rollout batch starts with the same system and
task text (about 80 of 210 tokens on KeyDoor), so with `share_prefix` a chunk's common
prefix runs once, with gradient, and every row attends to its keys and values
(`agents.kv_cache.shared_prefix_cache`) -- the prefix sharing of vLLM's automatic prefix
caching (Kwon et al. 2023, arXiv:2309.06180) and SGLang's RadixAttention (Zheng et al.
2024, arXiv:2312.07104) applied to a differentiable pass. The prefix's gradient is the sum
of every row's, so log-probs and gradients equal the unshared pass's up to float rounding
(tests/test_shared_prefix.py).

After the prefix, a chunk's rows run in groups of like length (`length_groups`), each
left-padded to its own longest row: padding a KeyDoor trajectory's steps to the longest
one wasted 24 % of the update's tokens (observations differ in length). Grouping cut a
smollm2-135m update over 8 trajectories from 63-66 s to 51-54 s (one thread); log-probs
and gradients equal the one-group pass's up to float rounding (tests/test_shared_prefix.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch
from torch import nn
from transformers import DynamicCache, PreTrainedTokenizerBase

from creditgym.agents.constrained import build_action_trie
from creditgym.agents.generation_cache import shared_opening_length
from creditgym.agents.kv_cache import cache_keyword, checkpoint_with_cache, shared_prefix_cache
from creditgym.agents.trajectory import TokenBatch, Trajectory


def check_sampling_params(temperature: float, top_p: float) -> None:
    """ValueError unless 0 < temperature and 0 < top_p <= 1."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (got {temperature}); greedy has no log-probs")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (got {top_p})")


def sampling_logprobs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_p: float = 1.0,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probs of the distribution tokens are sampled from.

    Order: constraint mask, temperature, top-p, renormalise. Masking first means top-p
    acts on the allowed tokens only, so it can never empty the support.

    Args:
        logits: [..., V] raw next-token logits (any float dtype; computed in fp32).
        temperature: softmax temperature, > 0.
        top_p: nucleus mass in (0, 1]; the most likely tokens whose cumulative mass
            first reaches `top_p` are kept (at least one).
        allowed: optional [..., V] bool, True where a token may be emitted.
    Returns:
        [..., V] fp32 log-probs, -inf outside the support; differentiable in `logits`.
    """
    scaled = logits.float() / temperature
    if allowed is not None:
        scaled = scaled.masked_fill(~allowed, float("-inf"))
    logprobs = torch.log_softmax(scaled, dim=-1)
    if top_p < 1.0:
        sorted_logprobs, order = logprobs.detach().sort(dim=-1, descending=True)
        sorted_probs = sorted_logprobs.exp()
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop = torch.zeros_like(mass_before, dtype=torch.bool).scatter(
            -1, order, mass_before >= top_p
        )
        logprobs = torch.log_softmax(logprobs.masked_fill(drop, float("-inf")), dim=-1)
    return logprobs


# Padded tokens per teacher-forced forward pass. Per-call overhead dominates a small model
# (`small`'s 10-step KeyDoor update was ~70 % Python and kernel launches at 8 rows per
# pass); for a long-prompt LLM the budget still holds a chunk to a few rows.
CHUNK_TOKENS = 4096

# A common prefix shorter than this runs with each row: a second forward call would cost
# more than the tokens it saves.
MIN_SHARED_PREFIX = 16

# The padded fraction a forward pass's rows may waste (`length_groups`). Rows of one
# chunk run in groups of like length against its shared prefix; a group more costs a
# forward call's overhead, so a few percent of padding stays.
PADDING_SLACK = 0.05


def token_chunks(
    rows: Sequence[int], lengths: Sequence[int], max_tokens: int, max_rows: int | None = None
) -> list[list[int]]:
    """Consecutive runs of `rows` whose padded size (count x longest) fits `max_tokens`.

    Args:
        rows: row indices, in order.
        lengths: lengths[row] = tokens of that row.
        max_tokens: budget of one chunk; a row longer than it forms a chunk alone.
        max_rows: optional cap on rows per chunk.
    Returns:
        the chunks, covering `rows` in order.
    """
    if max_tokens < 1 or (max_rows is not None and max_rows < 1):
        raise ValueError(f"chunk budgets must be >= 1 (got {max_tokens} tokens, {max_rows} rows)")
    chunks: list[list[int]] = []
    current: list[int] = []
    widest = 0
    for row in rows:
        width = max(widest, lengths[row])
        full = max_rows is not None and len(current) >= max_rows
        if current and (full or (len(current) + 1) * width > max_tokens):
            chunks.append(current)
            current, width = [], lengths[row]
        current.append(row)
        widest = width
    if current:
        chunks.append(current)
    return chunks


def shared_prefix_length(
    batch: TokenBatch, rows: Sequence[int], prompt_lengths: Sequence[int]
) -> int:
    """Tokens every row of `rows` starts with, if worth sharing (else 0).

    Capped one short of the shortest prompt, so that each row keeps the position that
    predicts its first action token; below `MIN_SHARED_PREFIX`, or for a single row, 0.
    """
    if len(rows) < 2:
        return 0
    prompts = [
        batch.input_ids[row, :length].tolist()
        for row, length in zip(rows, prompt_lengths, strict=True)
    ]
    length = shared_opening_length(prompts)
    return length if length >= MIN_SHARED_PREFIX else 0


def length_groups(rows: Sequence[int], lengths: Sequence[int], slack: float) -> list[list[int]]:
    """`rows` grouped so that left-padding each group to its longest row wastes at most
    `slack` of the group's padded tokens: longest first, a row joins the current group
    while the group stays within the slack.

    Args:
        rows: row indices.
        lengths: lengths[k] = tokens of rows[k].
        slack: the padded fraction a group may waste, in [0, 1).
    Returns:
        the groups, covering `rows`, each longest first.
    """
    order = sorted(range(len(rows)), key=lambda k: -lengths[k])
    groups: list[list[int]] = []
    longest = used = 0
    for k in order:
        if groups and (len(groups[-1]) + 1) * longest * (1 - slack) <= used + lengths[k]:
            groups[-1].append(rows[k])
            used += lengths[k]
            continue
        groups.append([rows[k]])
        longest = used = lengths[k]
    return groups


def prefix_cache(model: nn.Module, prefix_ids: torch.Tensor) -> DynamicCache:
    """Run a prefix [P] once (batch of one, with gradient) and return a cache every row
    after it attends to (`agents.kv_cache.shared_prefix_cache`: it stores nothing, so it
    serves any number of passes, and its keys and values collect their gradients). Call
    inside `checkpoint_with_cache(model)`, as the passes that use it."""
    device = next(model.parameters()).device
    recorded = shared_prefix_cache()
    model(
        input_ids=prefix_ids[None].to(device),
        position_ids=torch.arange(len(prefix_ids), device=device)[None],
        **{cache_keyword(model): recorded},
        logits_to_keep=1,
        use_cache=False,  # the cache records; nothing is generated after this pass
    )
    return shared_prefix_cache([(layer.last_keys, layer.last_values) for layer in recorded.layers])


def teacher_forced_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    logits_to_keep: int,
    prefix: DynamicCache | None = None,
) -> torch.Tensor:
    """Logits of the last `logits_to_keep` columns of left-padded rows that may all
    continue one shared prefix.

    With `prefix`, row r's column j attends to the prefix's keys and values and to its own
    columns <= j, as it would in the unshared pass; the prefix's gradient is the sum of
    the rows'.

    Args:
        model: the causal LM (possibly peft-wrapped).
        input_ids, attention_mask, position_ids: [R, W] (cpu), the rows after the prefix;
            positions count from the prefix's length.
        logits_to_keep: columns at the right end that produce logits.
        prefix: `prefix_cache(model, prefix_ids)`, or None.
    Returns:
        [R, logits_to_keep, V] logits, differentiable.
    """
    device = next(model.parameters()).device
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    position_ids = position_ids.to(device)
    inputs = {"input_ids": input_ids, "position_ids": position_ids, "use_cache": False}
    if prefix is None:
        return model(attention_mask=attention_mask, logits_to_keep=logits_to_keep, **inputs).logits
    length = prefix.get_seq_length()
    full_mask = torch.cat([attention_mask.new_ones((len(input_ids), length)), attention_mask], -1)
    inputs[cache_keyword(model)] = prefix
    output = model(attention_mask=full_mask, logits_to_keep=logits_to_keep, **inputs)
    return output.logits


def action_logprobs(
    model: nn.Module,
    batch: TokenBatch,
    trajectories: Sequence[Trajectory],
    temperature: float = 1.0,
    top_p: float = 1.0,
    constrained: bool = False,
    tokenizer: PreTrainedTokenizerBase | None = None,
    chunk_size: int | None = None,
    chunk_tokens: int = CHUNK_TOKENS,
    share_prefix: bool = False,
) -> torch.Tensor:
    """Teacher-forced log-probs of every action token under the sampling distribution.

    Each row is re-packed with left padding (the layout the sampler used) and run
    through `model` with `logits_to_keep`, so only the action positions produce
    vocabulary-sized logits; consecutive rows go through together in chunks of at most
    `chunk_tokens` padded tokens (and at most `chunk_size` rows), which bounds memory for
    long prompts and keeps a small model's many short rows to a few forward passes.
    With `share_prefix`, rows of like length run together within a chunk
    (`length_groups`, at most `PADDING_SLACK` of a pass's tokens padding), after the
    chunk's shared prefix.

    Args:
        model: the causal LM (a Hugging Face model, possibly peft-wrapped), any device.
        batch: `TokenBatch.from_trajectories(trajectories)`.
        trajectories: the same trajectories, in the same order (for admissible
            commands when `constrained`).
        temperature, top_p, constrained: the sampling settings the steps were drawn with.
        tokenizer: required when `constrained` (rebuilds the command trie).
        chunk_size: most rows per forward pass (None: only `chunk_tokens` bounds it).
        chunk_tokens: most padded tokens (rows x longest row) per forward pass; a row
            longer than this goes alone.
        share_prefix: run the prompt prefix a chunk's rows share (at least
            `MIN_SHARED_PREFIX` tokens) once and let every row attend to it, and the rows
            after it in groups of like length; off, each chunk is one padded pass.
    Returns:
        [N, L] fp32, log pi(token) at action positions of `batch`, 0 elsewhere;
        differentiable with respect to the model's parameters.
    """
    check_sampling_params(temperature, top_p)
    if constrained and tokenizer is None:
        raise ValueError("constrained re-scoring needs the tokenizer to rebuild the trie")
    steps = [step for trajectory in trajectories for step in trajectory.steps]
    num_rows = batch.input_ids.shape[0]
    if len(steps) != num_rows:
        raise ValueError(f"batch has {num_rows} rows but the trajectories have {len(steps)} steps")
    device = next(model.parameters()).device
    totals = batch.attention_mask.sum(-1).tolist()
    action_lengths = batch.action_mask.sum(-1).long().tolist()
    policy_rows = [row for row in range(num_rows) if action_lengths[row] > 0]
    row_index, col_index, values = [], [], []
    for chunk in token_chunks(policy_rows, totals, chunk_tokens, chunk_size):
        prompt_lengths = [totals[row] - action_lengths[row] for row in chunk]
        prefix = shared_prefix_length(batch, chunk, prompt_lengths) if share_prefix else 0
        suffixes = [totals[row] - prefix for row in chunk]
        # Grouping belongs to the shared-prefix path: off, a chunk stays one padded pass
        # (the arithmetic of the runs made before either).
        slack = PADDING_SLACK if share_prefix else 1.0
        with checkpoint_with_cache(model) if prefix else nullcontext():
            cache = prefix_cache(model, batch.input_ids[chunk[0], :prefix]) if prefix else None
            # Rows of like length go together: left padding to a chunk's longest row
            # wasted about a quarter of a KeyDoor update's tokens.
            for rows in length_groups(chunk, suffixes, slack):
                # Each row's tokens after the shared prefix, left-padded to the longest.
                width = max(totals[row] for row in rows) - prefix
                keep = max(action_lengths[row] for row in rows)
                input_ids = torch.zeros((len(rows), width), dtype=torch.long)
                attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
                for k, row in enumerate(rows):
                    input_ids[k, width - totals[row] + prefix :] = batch.input_ids[
                        row, prefix : totals[row]
                    ]
                    attention_mask[k, width - totals[row] + prefix :] = 1
                position_ids = prefix + (attention_mask.cumsum(-1) - 1).clamp(min=0)
                logits = teacher_forced_logits(
                    model, input_ids, attention_mask, position_ids, keep + 1, cache
                )
                # logits[:, i] is the prediction for column width - keep + i.
                logits = logits[:, :keep]
                allowed = None
                if constrained:
                    allowed = torch.ones(logits.shape, dtype=torch.bool)
                    for k, row in enumerate(rows):
                        step = steps[row]
                        if step.admissible_commands:
                            trie = build_action_trie(tokenizer, step.admissible_commands)
                            length = action_lengths[row]
                            allowed[k, keep - length :] = trie.masks(
                                step.action_token_ids, logits.shape[-1]
                            )
                    allowed = allowed.to(device)
                logprobs = sampling_logprobs(logits, temperature, top_p, allowed)
                targets = input_ids[:, width - keep :].to(device)
                token_logprobs = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
                for k, row in enumerate(rows):
                    length = action_lengths[row]
                    prompt_length = totals[row] - length
                    row_index.append(torch.full((length,), row, dtype=torch.long))
                    col_index.append(torch.arange(prompt_length, totals[row]))
                    values.append(token_logprobs[k, keep - length :])
    result = torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=device)
    if not values:
        return result
    indices = (torch.cat(row_index).to(device), torch.cat(col_index).to(device))
    return result.index_put(indices, torch.cat(values))
