"""Log-probs under the sampling distribution, shared by the sampler and the trainer.

The behaviour log-prob of an action token is taken under the distribution the token
was actually drawn from, not the raw softmax: logits masked to the constrained-decoding
trie (when on), divided by the temperature, truncated to the top-p nucleus, and
renormalised. PPO-style ratios (verl-agent, TRL) are only exact when the trainer's new
log-probs use the same transform, so both sides call `sampling_logprobs`
(`agents.action_logprobs` re-scores recorded steps with it).

Teacher-forced passes share prefixes: every step of a rollout batch starts with the same
system and task text (about 80 of 210 tokens on KeyDoor), so a chunk's common prefix can
run once, with gradient (`prefix_cache`), and every row attend to its keys and values
(`models.kv_cache.shared_prefix_cache`) -- the prefix sharing of vLLM's automatic prefix
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

import torch
from torch import nn
from transformers import DynamicCache

from creditgym.models.kv_cache import cache_keyword, shared_prefix_cache


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
    after it attends to (`models.kv_cache.shared_prefix_cache`: it stores nothing, so it
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
