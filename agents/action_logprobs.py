"""Re-scoring recorded actions: teacher-forced log-probs under the sampling distribution.

The trainer's new log-probs of a batch of recorded steps (`TokenBatch`), taken under the
same transform the sampler drew them from (`models.logprobs.sampling_logprobs`: the
constrained-decoding trie rebuilt from `Step.admissible_commands`, temperature, top-p),
so PPO-style ratios are exact. The forward passes are `models.logprobs`': chunks to a
token budget, an optional shared prompt prefix run once, rows in groups of like length.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from creditgym.agents.constrained import build_action_trie
from creditgym.agents.trajectory import TokenBatch, Trajectory
from creditgym.models.generation_cache import shared_opening_length
from creditgym.models.kv_cache import checkpoint_with_cache
from creditgym.models.logprobs import (
    CHUNK_TOKENS,
    MIN_SHARED_PREFIX,
    PADDING_SLACK,
    check_sampling_params,
    length_groups,
    prefix_cache,
    sampling_logprobs,
    teacher_forced_logits,
    token_chunks,
)


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
