"""Shared prompt prefixes in teacher-forced re-scoring: the same log-probs and gradients.

`action_logprobs(..., share_prefix=True)` runs a chunk's common prompt prefix once and
lets every row attend to its keys and values (models/kv_cache.py `shared_prefix_cache`).

Tolerance: both passes compute the same float32 sums in a different order (the prefix's
projections at batch 1 instead of once per row, its attention read from a concatenated
cache instead of a left-padded row, the prefix's gradient summed over rows by autograd
instead of inside each row's matmul). Each such sum lies within a few hundred ulps
(float32 ulp 1.2e-7) of the exact value relative to its scale, so log-probs agree to
1e-5 (they are O(1)-O(10)) and gradients to 1e-5 of their norm -- the bound
tests/test_trainer_pg.py uses for gradient accumulation, far below what a prefix at
wrong positions, a row left out or a prefix cut from the graph would change.
"""

from __future__ import annotations

import pytest
import torch

import tests.rollout_envs  # noqa: F401  (registers Corridor-v0 in this process)
from creditgym.agents import action_logprobs as logprobs_module
from creditgym.agents.action_logprobs import action_logprobs, shared_prefix_length
from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import TokenBatch
from creditgym.models.kv_cache import SharedPrefixLayer, shared_prefix_cache
from creditgym.models.logprobs import MIN_SHARED_PREFIX, length_groups
from creditgym.models.registry import build_tiny
from creditgym.trainers.activation_checkpointing import recompute_activations
from creditgym.trainers.core import LoraSettings, prepare_policy

CORRIDOR = "tests.rollout_envs:Corridor-v0"
LOGPROB_ATOL = 1e-5
GRADIENT_RTOL = 1e-5  # of the gradient's norm


@pytest.fixture(scope="module")
def rollouts():
    torch.set_num_threads(1)
    tiny = build_tiny()
    agent = LLMAgent(tiny, max_new_tokens=16, seed=7)
    trajectories, _ = collect(CORRIDOR, agent, [0, 1], group_size=2, num_envs=4, progress=False)
    batch = TokenBatch.from_trajectories(trajectories, tiny.tokenizer.pad_token_id)
    return trajectories, batch


def logprobs_and_gradient(model, batch, trajectories, share: bool, recompute: bool):
    model.zero_grad(set_to_none=True)
    with recompute_activations(model) if recompute else torch.enable_grad():
        logprobs = action_logprobs(model, batch, trajectories, chunk_size=8, share_prefix=share)
        # a loss that weighs tokens differently, so a permuted row would show
        weights = torch.linspace(0.5, 1.5, logprobs.numel()).reshape(logprobs.shape)
        (weights * logprobs).sum().backward()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logprobs.detach(), gradient


@pytest.mark.parametrize(
    "finetune,recompute", [("full", False), ("full", True), ("lora", False), ("lora", True)]
)
def test_shared_prefix_gives_the_unshared_logprobs_and_gradient(rollouts, finetune, recompute):
    trajectories, batch = rollouts
    model = prepare_policy(build_tiny(), finetune, LoraSettings()).model
    plain_logprobs, plain_gradient = logprobs_and_gradient(
        model, batch, trajectories, share=False, recompute=recompute
    )
    shared_logprobs, shared_gradient = logprobs_and_gradient(
        model, batch, trajectories, share=True, recompute=recompute
    )
    mask = batch.action_mask.bool()
    assert torch.all(shared_logprobs[~mask] == 0)
    torch.testing.assert_close(
        shared_logprobs[mask], plain_logprobs[mask], atol=LOGPROB_ATOL, rtol=0
    )
    scale = plain_gradient.norm()
    assert scale > 0
    assert (shared_gradient - plain_gradient).norm() <= GRADIENT_RTOL * scale


@pytest.mark.parametrize("finetune,recompute", [("full", False), ("lora", True)])
def test_rows_in_length_groups_give_the_one_padded_pass_logprobs_and_gradient(
    rollouts, finetune, recompute, monkeypatch
):
    # Same tolerance as above: each group's sums run in another order (other batch shapes).
    trajectories, batch = rollouts
    model = prepare_policy(build_tiny(), finetune, LoraSettings()).model
    monkeypatch.setattr(logprobs_module, "PADDING_SLACK", 1.0)  # one group per chunk
    padded = logprobs_and_gradient(model, batch, trajectories, share=True, recompute=recompute)
    monkeypatch.setattr(logprobs_module, "PADDING_SLACK", 0.0)  # equal lengths only
    grouped = logprobs_and_gradient(model, batch, trajectories, share=True, recompute=recompute)
    mask = batch.action_mask.bool()
    torch.testing.assert_close(grouped[0][mask], padded[0][mask], atol=LOGPROB_ATOL, rtol=0)
    assert torch.all(grouped[0][~mask] == 0)
    assert (grouped[1] - padded[1]).norm() <= GRADIENT_RTOL * padded[1].norm()


def test_length_groups_bound_the_padding_they_waste():
    rows, lengths = [10, 11, 12, 13, 14], [130, 100, 128, 140, 99]
    assert length_groups(rows, lengths, 0.05) == [[13, 10], [12], [11, 14]]
    assert length_groups(rows, lengths, 1.0) == [[13, 10, 12, 11, 14]]
    assert length_groups(rows, lengths, 0.0) == [[13], [10], [12], [11], [14]]
    assert length_groups([1, 2, 3], [5, 5, 5], 0.0) == [[1, 2, 3]]
    assert length_groups([], [], 0.05) == []
    for slack in (0.0, 0.05, 0.2):
        for group in length_groups(rows, lengths, slack):
            sizes = [lengths[rows.index(row)] for row in group]
            assert len(sizes) * max(sizes) - sum(sizes) <= slack * len(sizes) * max(sizes)


def test_shared_prefix_runs_fewer_tokens(rollouts):
    trajectories, batch = rollouts
    model = build_tiny().model
    seen = []
    hook = model.model.embed_tokens.register_forward_hook(
        lambda module, args, out: seen.append(args[0].numel())
    )
    totals = {}
    try:
        with torch.no_grad():
            for share in (False, True):
                seen.clear()
                action_logprobs(model, batch, trajectories, chunk_size=8, share_prefix=share)
                totals[share] = sum(seen)
    finally:
        hook.remove()
    assert totals[True] < 0.9 * totals[False]  # padded tokens: 12,880 against 14,940


def test_shared_prefix_length_keeps_each_rows_last_prompt_token(rollouts):
    _, batch = rollouts
    rows = list(range(batch.input_ids.shape[0]))
    totals = batch.attention_mask.sum(-1)
    prompt_lengths = (totals - batch.action_mask.sum(-1)).long().tolist()
    length = shared_prefix_length(batch, rows, prompt_lengths)
    assert MIN_SHARED_PREFIX <= length <= min(prompt_lengths) - 1
    assert torch.all(batch.input_ids[:, :length] == batch.input_ids[0, :length])
    assert shared_prefix_length(batch, rows[:1], prompt_lengths[:1]) == 0  # one row: no share
    short = [MIN_SHARED_PREFIX] * len(rows)  # prompts too short to leave a shared prefix
    assert shared_prefix_length(batch, rows, short) == 0


def test_shared_prefix_cache_stores_nothing_so_a_replay_sees_the_same_states():
    keys, values = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    cache = shared_prefix_cache([(keys, values)])
    assert isinstance(cache.layers[0], SharedPrefixLayer) and cache.get_seq_length() == 5
    new = torch.randn(3, 2, 2, 4)
    for _ in range(2):  # a replay in backward calls update again with the same states
        out_keys, out_values = cache.update(new, new, 0)
        assert out_keys.shape == (3, 2, 7, 4) and cache.get_seq_length() == 5
        assert torch.equal(out_keys[:, :, :5], keys.expand(3, -1, -1, -1))
        assert torch.equal(out_values[:, :, 5:], new)
