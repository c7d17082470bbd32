"""Generation cache: prompt keys / values and response hidden states kept by generation,
reused by hindsight scoring, never stale."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from creditgym.agents.llm import LLMAgent
from creditgym.agents.rollout import collect
from creditgym.credit.hcapo import outcome_hindsight
from creditgym.credit.hp_rlvr import HPRLVR, future_hindsight
from creditgym.credit.views import causal_view, hindsight_view
from creditgym.models import generation_cache
from creditgym.models.generation_cache import BLOCK_TOKENS, GenerationCache
from creditgym.models.registry import build_tiny
from creditgym.models.scoring import (
    ScoreMemo,
    TeacherForced,
    score_alternatives,
    score_divergence,
    score_logprobs,
    shared_context_cache,
)
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)

ENV_ID = "creditgym/SysDiag-v0"


@pytest.fixture(scope="module")
def tiny(device):
    torch.set_num_threads(1)
    loaded = build_tiny()
    loaded.model.to(device)
    return loaded


def fake_layers(length: int, value: float = 1.0, layers: int = 2):
    """Per layer (keys, values) [kv_heads=1, length, head_dim=2], position-coded."""
    states = value * torch.arange(length, dtype=torch.float32)[None, :, None].repeat(1, 1, 2)
    return [(states, -states) for _ in range(layers)]


def test_lookup_finds_the_longest_cached_prefix_exactly():
    cache = GenerationCache(nn.Linear(2, 2), budget_bytes=1 << 20)
    short, long = tuple(range(40)), tuple(range(40)) + tuple(range(100, 140))
    cache.put_prompt(short, fake_layers(len(short)))
    cache.put_prompt(long, fake_layers(len(long), value=2.0))
    # Shares 75 tokens with `long` (past the 40 of `short`, mid-block): the exact count.
    context = long[:75] + (999,) * 20
    length, entry = cache.lookup_prompt(context, limit=len(context) - 1)
    assert (length, entry.token_ids) == (75, long)
    assert torch.equal(entry.kv[0, 0, 0, :3, 0], torch.tensor([0.0, 2.0, 4.0]))
    assert cache.lookup_prompt(context, limit=50)[0] == 50  # the caller's cap
    assert cache.lookup_prompt((7,) * 40, limit=39) == (0, None)  # first block differs
    assert cache.lookup_prompt(short[: BLOCK_TOKENS - 1], limit=10) == (0, None)  # under one block
    assert cache.stats["prompt_hits"] == 2 and cache.stats["prompt_misses"] == 2


def test_budget_refuses_new_prompts_and_short_prompts_are_not_kept():
    one = fake_layers(32)
    nbytes = sum(k.numel() + v.numel() for k, v in one) * 4
    cache = GenerationCache(nn.Linear(2, 2), budget_bytes=nbytes)
    cache.put_prompt(tuple(range(32)), one)
    cache.put_prompt(tuple(range(1, 33)), fake_layers(32))  # over budget: refused
    cache.put_prompt(tuple(range(5)), fake_layers(5))  # shorter than a block: not worth keeping
    assert len(cache) == 1 and cache.nbytes == nbytes and cache.stats["refused"] == 1
    with pytest.raises(ValueError, match="positions"):
        cache.put_prompt(tuple(range(200, 240)), fake_layers(39))


def test_an_entry_that_would_leave_the_device_short_of_memory_is_refused(monkeypatch):
    one = fake_layers(32)
    nbytes = sum(k.numel() + v.numel() for k, v in one) * 4
    total = 100 * nbytes
    # Available memory as the device reports it: exactly a quarter of the total plus one
    # entry admits that entry; a byte less refuses it, whatever the budget, and with only
    # the reserve left even a small response is refused.
    available = [generation_cache.RESERVE_FRACTION * total + nbytes]
    monkeypatch.setattr(generation_cache, "device_memory", lambda device: (available[0], total))
    cache = GenerationCache(nn.Linear(2, 2), budget_bytes=1 << 30)
    cache.put_prompt(tuple(range(32)), one)
    assert len(cache) == 1 and cache.stats["refused_for_memory"] == 0
    available[0] -= 1
    cache.put_prompt(tuple(range(1, 33)), fake_layers(32))
    available[0] = generation_cache.RESERVE_FRACTION * total
    cache.put_response((1, 2), (3,), torch.zeros(1, 4))
    assert len(cache) == 1 and cache.nbytes == nbytes
    assert cache.stats["refused"] == cache.stats["refused_for_memory"] == 2
    # Where the memory cannot be read, only the budget bounds the cache.
    monkeypatch.setattr(generation_cache, "device_memory", lambda device: None)
    cache.put_prompt(tuple(range(1, 33)), fake_layers(32))
    assert len(cache) == 2


def test_host_memory_is_read_from_meminfo():
    memory = generation_cache.device_memory(torch.device("cpu"))
    if memory is None:
        pytest.skip("no /proc/meminfo on this system")
    available, total = memory
    assert 0 < available <= total
    # the figure free(1) prints, within what other processes change between the reads
    with open("/proc/meminfo") as meminfo:
        kib = {line.split(":")[0]: int(line.split()[1]) for line in meminfo}
    assert total == kib["MemTotal"] * 1024
    assert abs(available - kib["MemAvailable"] * 1024) < total // 10


def test_a_weight_update_empties_the_cache():
    model = nn.Linear(2, 2)
    cache = GenerationCache(model, budget_bytes=1 << 20)
    cache.put_prompt(tuple(range(32)), fake_layers(32))
    assert cache.lookup_prompt(tuple(range(32)), limit=31)[0] == 31
    model(torch.ones(1, 2)).sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert cache.lookup_prompt(tuple(range(32)), limit=31) == (0, None)
    assert len(cache) == 0 and cache.nbytes == 0


def rollouts(tiny, generation_cache, share_prefix=False):
    agent = LLMAgent(
        tiny,
        max_new_tokens=24,
        seed=5,
        generation_cache=generation_cache,
        share_prefix=share_prefix,
    )
    trajectories, _ = collect(
        ENV_ID, agent, seeds=[11, 12], env_kwargs={"max_steps": 2}, num_envs=2, progress=False
    )
    return trajectories


def test_response_hidden_states_are_keyed_by_prompt_and_response():
    cache = GenerationCache(nn.Linear(2, 2), budget_bytes=1 << 20)
    cache.put_response((1, 2, 3), (4, 5), torch.ones(2, 8))
    assert torch.equal(cache.response_hidden((1, 2, 3), (4, 5)), torch.ones(2, 8))
    assert cache.response_hidden((1, 2, 3), (4,)) is None
    assert cache.response_hidden((1, 2), (4, 5)) is None
    with pytest.raises(ValueError, match="hidden states"):
        cache.put_response((1,), (4, 5, 6), torch.ones(2, 8))


# With a shared prefix, the kept prompts come from rows laid out [prefix | padding |
# suffix]: what is kept must be the prompt's own columns all the same.
@pytest.mark.parametrize("share_prefix", [False, True], ids=["full-prefill", "shared-prefix"])
def test_scoring_with_the_generation_cache_equals_recomputing(tiny, share_prefix):
    cache = GenerationCache(tiny.model)
    batch = rollouts(tiny, cache, share_prefix)
    steps = [(traj, t) for traj in batch for t in range(traj.length)]
    # every generated prompt and response kept
    assert cache.stats["prompts_stored"] == cache.stats["responses_stored"] == len(steps) >= 3
    hindsight = [
        hindsight_view(tiny.tokenizer, traj, t, outcome_hindsight(traj)) for traj, t in steps
    ]
    recomputed = score_logprobs(tiny, hindsight)
    reused = score_logprobs(tiny, hindsight, memory_budget_bytes=1, generation_cache=cache)
    assert cache.stats["prompt_hits"] == len(steps)
    # the hindsight block sits after the observation: most of each prompt is reused
    assert cache.stats["reused_tokens"] > 0.6 * sum(len(v.context_ids) for v in hindsight)
    for a, b in zip(recomputed, reused, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5)

    causal = [causal_view(tiny.tokenizer, traj, t) for traj, t in steps]
    future = [
        hindsight_view(tiny.tokenizer, traj, t, future_hindsight(traj, t)) for traj, t in steps
    ]
    plain = score_divergence(tiny, causal, future)
    kept = score_divergence(tiny, causal, future, generation_cache=cache)
    assert cache.stats["response_hits"] == len(steps)  # causal views from hidden states
    for a, b, (traj, t) in zip(plain, kept, steps, strict=True):
        np.testing.assert_allclose(a.causal_logprobs, b.causal_logprobs, atol=2e-5)
        np.testing.assert_allclose(a.hindsight_logprobs, b.hindsight_logprobs, atol=2e-5)
        np.testing.assert_allclose(a.jsd, b.jsd, atol=1e-5)
        # temperature 1, no top-p: the causal view re-scores what was sampled
        np.testing.assert_allclose(b.causal_logprobs, traj.steps[t].action_logprobs, atol=1e-4)

    # The engine really reads the cache: corrupted entries change the scores.
    for entry in cache._prompts.values():
        entry.kv.mul_(0.0)
    for hidden in cache._responses.values():
        hidden.mul_(0.0)
    corrupted = score_logprobs(tiny, hindsight, generation_cache=cache)
    assert max(np.abs(a - b).max() for a, b in zip(recomputed, corrupted, strict=True)) > 1e-3
    corrupted = score_divergence(tiny, causal, future, generation_cache=cache)
    assert max(np.abs(a.jsd - b.jsd).max() for a, b in zip(plain, corrupted, strict=True)) > 1e-3


def test_cache_of_another_model_is_refused(tiny):
    with pytest.raises(ValueError, match="another model's"):
        LLMAgent(tiny, generation_cache=GenerationCache(build_tiny().model))


def test_trainer_hands_the_credit_modules_cache_to_its_rollouts(tmp_path):
    tiny = build_tiny()  # trained here: not the shared fixture
    credit = HPRLVR(tiny)
    config = PolicyGradientConfig(
        steps=1,
        group_size=1,
        tasks_per_step=2,
        num_envs=2,
        learning_rate=1e-3,
        seed=3,
        finetune="lora",  # the adapter is injected after the credit module made its cache
    )
    agent = AgentConfig(constrained=True, max_new_tokens=64, history_len=0)
    trainer = PolicyGradientTrainer(tiny, credit, ENV_ID, {"max_steps": 2}, agent, config, tmp_path)
    records = trainer.train()
    stats = credit.generation_cache.stats
    assert stats["prompts_stored"] >= 2 and stats["response_hits"] == stats["responses_stored"]
    assert len(credit.generation_cache) == 0  # freed once the batch was scored
    # the iteration's metrics say what scoring took from generation
    assert records[0]["cache/prompts_stored"] == stats["prompts_stored"]
    assert records[0]["cache/response_hits"] == stats["response_hits"] > 0
    assert records[0]["cache/refused"] == 0
    assert np.isfinite(records[0]["credit/mean_jsd"])


def test_a_shared_context_run_once_scores_as_the_whole_views(tiny):
    # An exact policy table's views: one opening, then each state's own tail and command.
    rng = np.random.default_rng(0)
    opening = tuple(int(t) for t in rng.integers(3, 200, 40))
    views = [
        TeacherForced(
            opening + tuple(int(t) for t in rng.integers(3, 200, tail)),
            tuple(int(t) for t in rng.integers(3, 200, 4)),
        )
        for tail in (1, 5, 17, 30)
    ]
    cache = shared_context_cache(tiny, views)
    assert cache is not None and cache.stats["prompts_stored"] == 1
    with_prefix = score_logprobs(tiny, views, generation_cache=cache)
    assert cache.stats["prompt_hits"] == len(views)  # every view ran from the opening
    # the opening: the shortest view (one token of its own) keeps that token to run
    assert cache.stats["reused_tokens"] == 40 * len(views)
    for shared, whole in zip(with_prefix, score_logprobs(tiny, views), strict=True):
        np.testing.assert_allclose(shared, whole, atol=1e-5, rtol=0)


def test_no_shared_context_cache_below_one_block_or_for_one_view(tiny):
    short = [TeacherForced((5,) * (BLOCK_TOKENS - 1) + (t,), (7, 8)) for t in (9, 10)]
    assert shared_context_cache(tiny, short) is None
    assert shared_context_cache(tiny, [TeacherForced((5,) * 40, (7,))]) is None


def test_alternatives_under_shared_prompts_score_as_the_whole_views(tiny):
    # An exact table: each prompt (one opening, its own tail) with 1-3 commands.
    rng = np.random.default_rng(1)
    opening = tuple(int(t) for t in rng.integers(3, 200, 30))
    prompts = [
        (
            opening + tuple(int(t) for t in rng.integers(3, 200, tail)),
            [tuple(int(t) for t in rng.integers(3, 200, n)) for n in sizes],
        )
        for tail, sizes in ((1, (3, 5)), (9, (2, 2)), (20, (4,)), (4, (1, 6, 3)), (12, (5, 1)))
    ]
    memo = ScoreMemo()
    scores = score_alternatives(tiny, prompts, memo=memo)
    for (prompt, sequences), per_sequence in zip(prompts, scores, strict=True):
        whole = score_logprobs(tiny, [TeacherForced(prompt, s) for s in sequences])
        for got, want in zip(per_sequence, whole, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert len(memo.logprobs) == 10
    memo.logprobs = {view: scores + 1.0 for view, scores in memo.logprobs.items()}
    again = score_alternatives(tiny, prompts, memo=memo)  # all kept: read, not rerun
    np.testing.assert_array_equal(again[0][0], scores[0][0] + 1.0)


def test_alternatives_need_a_prompt_and_nonempty_sequences(tiny):
    with pytest.raises(ValueError, match="every prompt needs"):
        score_alternatives(tiny, [((5, 6, 7), [(8,), ()])])
    with pytest.raises(ValueError, match="every prompt needs"):
        score_alternatives(tiny, [((5,), [(8,)])])


def test_shared_opening_leaves_every_sequence_a_token_of_its_own():
    assert generation_cache.shared_opening_length([(1, 2, 3, 4), (1, 2, 3, 5, 6)]) == 3
    assert generation_cache.shared_opening_length([(1, 2, 3), (1, 2, 3, 4)]) == 2  # not 3
    assert generation_cache.shared_opening_length([(1, 2), (3, 2)]) == 0
    assert generation_cache.shared_opening_length([(7,)]) == 0
