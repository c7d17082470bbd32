"""LLM policy with the tiny model: token bookkeeping, re-scoring, determinism, parsing."""

import logging
import math

import gymnasium as gym
import pytest
import torch

import tests.rollout_envs  # noqa: F401  (registers Corridor-v0 in this process)
from creditgym.agents.action_logprobs import action_logprobs
from creditgym.agents.base import AgentInput
from creditgym.agents.constrained import action_token_sequences, build_action_trie
from creditgym.agents.episode import play_episode
from creditgym.agents.llm import LLMAgent, encode_prompt
from creditgym.agents.parsing import parse_action
from creditgym.agents.prompts import messages_for_step
from creditgym.agents.rollout import collect
from creditgym.agents.trajectory import TokenBatch
from creditgym.models.logprobs import sampling_logprobs, token_chunks
from creditgym.models.registry import build_tiny
from creditgym.models.token_trie import TokenTrie
from tests.registry_kwargs import REGISTRY_KWARGS

CORRIDOR = "tests.rollout_envs:Corridor-v0"
SETTINGS = {
    "plain": {"temperature": 1.0, "top_p": 1.0, "constrained": False},
    "tempered_nucleus": {"temperature": 0.7, "top_p": 0.9, "constrained": False},
    "constrained": {"temperature": 1.0, "top_p": 1.0, "constrained": True},
}


@pytest.fixture(scope="module")
def tiny(device):
    torch.set_num_threads(1)
    loaded = build_tiny()
    loaded.model.to(device)
    return loaded


@pytest.fixture(scope="module")
def rollouts(tiny):
    """name -> (settings, trajectories, stats) for each sampling setting."""
    results = {}
    for name, settings in SETTINGS.items():
        agent = LLMAgent(tiny, max_new_tokens=32, seed=7, **settings)
        trajectories, stats = collect(
            CORRIDOR, agent, [0, 1], group_size=2, num_envs=4, progress=False
        )
        results[name] = (settings, trajectories, stats)
    return results


def test_rollout_fills_every_field_of_the_contract(tiny, rollouts):
    _, trajectories, stats = rollouts["plain"]
    assert stats.num_trajectories == 4 and not stats.dropped
    assert stats.tokens_generated == sum(t.num_action_tokens for t in trajectories) > 0
    for trajectory in trajectories:
        assert trajectory.env_id == "Corridor-v0" and trajectory.task == "reach cell 3"
        assert trajectory.task_id.startswith("corridor-") and trajectory.feedback
        assert trajectory.metadata == {"agent": "llm:tiny"}
        assert trajectory.initial_observation == trajectory.steps[0].observation
        for step in trajectory.steps:
            assert step.prompt_text and step.prompt_token_ids and step.response_text
            assert 1 <= len(step.action_token_ids) <= 32
            assert len(step.action_logprobs) == len(step.action_token_ids)
            assert all(math.isfinite(x) and x <= 0 for x in step.action_logprobs)
            assert step.admissible_commands == ("go left", "go right", "wait")
            assert tiny.tokenizer.decode(list(step.prompt_token_ids)) == step.prompt_text
            assert step.action == parse_action(step.response_text, step.admissible_commands).action


def test_rebuilt_prompts_tokenise_to_the_recorded_ids(tiny, rollouts):
    for _, trajectories, _ in rollouts.values():
        for trajectory in trajectories:
            for t, step in enumerate(trajectory.steps):
                text, ids = encode_prompt(tiny.tokenizer, messages_for_step(trajectory, t, 2))
                assert (text, ids) == (step.prompt_text, step.prompt_token_ids)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_teacher_forced_rescoring_matches_recorded_logprobs(tiny, rollouts, name):
    settings, trajectories, _ = rollouts[name]
    batch = TokenBatch.from_trajectories(trajectories, tiny.tokenizer.pad_token_id)
    with torch.no_grad():
        rescored = action_logprobs(
            tiny.model, batch, trajectories, tokenizer=tiny.tokenizer, chunk_size=5, **settings
        )
    mask = batch.action_mask.bool()
    assert rescored.shape == batch.input_ids.shape
    assert torch.all(rescored[~mask] == 0)
    torch.testing.assert_close(rescored[mask], batch.old_logprobs[mask], atol=1e-4, rtol=0)


def test_rescoring_is_differentiable(tiny, rollouts):
    _, trajectories, _ = rollouts["plain"]
    batch = TokenBatch.from_trajectories(trajectories[:1], tiny.tokenizer.pad_token_id)
    tiny.model.zero_grad()
    action_logprobs(tiny.model, batch, trajectories[:1]).sum().backward()
    grad = tiny.model.model.embed_tokens.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    tiny.model.zero_grad()


def test_constrained_decoding_acts_validly_from_the_first_step(rollouts):
    _, trajectories, stats = rollouts["constrained"]
    assert stats.valid_action_ratio == 1.0
    for step in (s for t in trajectories for s in t.steps):
        assert step.response_text == f"<action>{step.action}</action>"
    # An untrained model without constraints produces bytes, not commands.
    assert rollouts["plain"][2].valid_action_ratio < 0.5


def test_same_seed_same_rollout_whatever_the_batching(tiny, rollouts):
    _, trajectories, _ = rollouts["plain"]
    agent = LLMAgent(tiny, max_new_tokens=32, seed=7)
    again, _ = collect(CORRIDOR, agent, [0, 1], group_size=2, num_envs=1, progress=False)
    assert [s.action_token_ids for t in again for s in t.steps] == [
        s.action_token_ids for t in trajectories for s in t.steps
    ]
    for first, second in zip(trajectories, again, strict=True):
        for a, b in zip(first.steps, second.steps, strict=True):
            assert a.action_logprobs == pytest.approx(b.action_logprobs, abs=1e-4)
    other, _ = collect(CORRIDOR, LLMAgent(tiny, max_new_tokens=32, seed=8), [0, 1], progress=False)
    assert other[0].steps[0].action_token_ids != trajectories[0].steps[0].action_token_ids
    # Replicas of one task share a group but sample differently.
    assert trajectories[0].group_id == trajectories[1].group_id
    assert trajectories[0].steps[0].action_token_ids != trajectories[1].steps[0].action_token_ids


def test_play_episode_drives_the_llm_agent_too(tiny):
    agent = LLMAgent(tiny, max_new_tokens=32, constrained=True, seed=0)
    trajectory = play_episode(gym.make(CORRIDOR), agent, seed=0)
    assert all(step.action in step.admissible_commands for step in trajectory.steps)


def test_a_generation_cap_that_cuts_constrained_commands_is_said_once(tiny, caplog):
    env = gym.make(CORRIDOR)
    _, info = env.reset(seed=0)
    commands = tuple(info["admissible_commands"])
    longest = max(map(len, action_token_sequences(tiny.tokenizer, commands)))
    x = AgentInput(CORRIDOR, "", (), "", admissible_commands=commands)
    short = LLMAgent(tiny, max_new_tokens=longest - 1, constrained=True, seed=0)
    with caplog.at_level(logging.WARNING, logger="creditgym.agents.llm"):
        short.act([x])
        short.act([x, x])
        LLMAgent(tiny, max_new_tokens=longest, constrained=True, seed=0).act([x])
        LLMAgent(tiny, max_new_tokens=1, seed=0).act([x])  # unconstrained: nothing to cut
    (record,) = caplog.records
    assert f"in {longest} tokens but max_new_tokens is {longest - 1}" in record.getMessage()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("creditgym/SysDiag-v0", {"max_steps": 3}),
        ("creditgym/ALFWorld-v0", {**REGISTRY_KWARGS["creditgym/ALFWorld-v0"], "max_steps": 3}),
        ("creditgym/CodeExec-v1", {"max_steps": 2}),
    ],
)
def test_tiny_policy_rollout_on_project_envs_rescores_exactly(tiny, env_id, kwargs):
    constrained = env_id != "creditgym/CodeExec-v1"  # CodeExec's writes are free text
    agent = LLMAgent(tiny, max_new_tokens=128, constrained=constrained, seed=3)
    trajectories, stats = collect(
        env_id, agent, [0], group_size=2, num_envs=2, env_kwargs=kwargs, progress=False
    )
    assert stats.num_trajectories == 2 and not stats.dropped
    assert all(t.truncated or t.terminated for t in trajectories)
    assert stats.valid_action_ratio == 1.0 or not constrained
    for trajectory in trajectories:
        for t, step in enumerate(trajectory.steps):
            _, ids = encode_prompt(tiny.tokenizer, messages_for_step(trajectory, t, 2))
            assert ids == step.prompt_token_ids
    batch = TokenBatch.from_trajectories(trajectories, tiny.tokenizer.pad_token_id)
    with torch.no_grad():
        rescored = action_logprobs(
            tiny.model,
            batch,
            trajectories,
            constrained=agent.config.constrained,
            tokenizer=tiny.tokenizer,
        )
    mask = batch.action_mask.bool()
    torch.testing.assert_close(rescored[mask], batch.old_logprobs[mask], atol=1e-4, rtol=0)


def test_sampling_logprobs_mask_temperature_and_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    full = sampling_logprobs(logits)
    torch.testing.assert_close(full.exp(), torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    nucleus = sampling_logprobs(logits, top_p=0.75).exp()
    torch.testing.assert_close(nucleus, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    allowed = torch.tensor([[False, True, True, False]])
    masked = sampling_logprobs(logits, temperature=1.0, allowed=allowed).exp()
    torch.testing.assert_close(masked, torch.tensor([[0.0, 2 / 3, 1 / 3, 0.0]]))
    hot = sampling_logprobs(logits, temperature=2.0).exp()
    expected = torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt()
    torch.testing.assert_close(hot[0], expected / expected.sum())


def test_token_trie_walks_and_rejects_prefix_sets(tiny):
    trie = TokenTrie([[1, 2, 9], [1, 3, 9], [4, 9]])
    assert trie.allowed([]) == [1, 4] and trie.allowed([1]) == [2, 3]
    assert trie.allowed([1, 2, 9]) == []
    masks = trie.masks([1, 3, 9], vocab_size=10)
    assert masks[1].nonzero().flatten().tolist() == [2, 3]
    with pytest.raises(ValueError, match="not an allowed"):
        trie.masks([1, 4], vocab_size=10)
    with pytest.raises(ValueError, match="prefix"):
        TokenTrie([[1, 2], [1, 2, 3]])
    commands = ("open drawer 1", "open door")
    trie = build_action_trie(tiny.tokenizer, commands)
    first = tiny.tokenizer("<action>open d", add_special_tokens=False)["input_ids"]
    assert [tiny.tokenizer.decode([i]) for i in trie.allowed(first)] == ["o", "r"]


@pytest.mark.parametrize(
    ("response", "action", "well_formed"),
    [
        ("<think>look first</think><action>go right</action>", "go right", True),
        ("<think>hmm</think>\n<action> Go   Right </action> extra", "go right", True),
        ("<action>wait</action><action>go left</action>", "go left", True),
        ("<think>cut off</think><action>go le", "go le", False),
        ("I will go right\n", "go right", False),
        ("<think>never finished", "", False),
        ("<action>'go right'</action>", "go right", True),
        ("<action>I pick go left, then wait</action>", "wait", True),
        ("<action>fly away</action>", "fly away", True),
        ("<action></action>", "", False),
    ],
)
def test_parse_action_is_tolerant(response, action, well_formed):
    parsed = parse_action(response, ("go left", "go right", "wait"))
    assert (parsed.action, parsed.well_formed) == (action, well_formed)


def test_llm_agent_rejects_bad_settings(tiny):
    with pytest.raises(ValueError, match="temperature"):
        LLMAgent(tiny, temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        LLMAgent(tiny, top_p=1.5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        LLMAgent(tiny, max_new_tokens=0)
    with pytest.raises(ValueError, match="tokenizer"):
        action_logprobs(tiny.model, TokenBatch.from_trajectories([]), [], constrained=True)


def test_prompt_keeps_only_the_last_history_pairs(tiny):
    agent = LLMAgent(tiny, history_len=2)
    history = tuple((f"obs {k}", f"act {k}") for k in range(4))
    content = agent.messages(AgentInput("e", "task", history, "now"))[0]["content"]
    assert "obs 2" in content and "obs 3" in content and "obs 1" not in content


def test_token_chunks_cover_the_rows_in_order_within_the_budget():
    lengths = {0: 10, 1: 10, 2: 30, 3: 5, 4: 100, 5: 1}
    rows = list(lengths)
    assert token_chunks(rows, lengths, 40) == [[0, 1], [2], [3], [4], [5]]
    # padded size counts: [0, 1, 2] would be 3 x 30 = 90 > 60; [2, 3] is 2 x 30 = 60
    assert token_chunks(rows, lengths, 60) == [[0, 1], [2, 3], [4], [5]]
    assert token_chunks(rows, lengths, 10**6, max_rows=4) == [[0, 1, 2, 3], [4, 5]]
    assert token_chunks(rows, lengths, 1) == [[row] for row in rows]  # too long: alone
    with pytest.raises(ValueError, match="budgets"):
        token_chunks(rows, lengths, 0)


def test_action_tries_are_built_once_per_tokenizer_and_command_set(tiny):
    commands = ["open door", "go north"]
    first = build_action_trie(tiny.tokenizer, commands)
    assert build_action_trie(tiny.tokenizer, tuple(commands)) is first
    other = build_action_trie(tiny.tokenizer, ["go north", "open door"])  # order matters
    assert other is not first
    sequences = action_token_sequences(tiny.tokenizer, commands)
    fresh = TokenTrie(sequences)
    for sequence in sequences:  # the cached trie allows what a fresh one does, everywhere
        for end in range(len(sequence) + 1):
            assert first.allowed(sequence[:end]) == fresh.allowed(sequence[:end])
