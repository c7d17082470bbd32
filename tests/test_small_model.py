"""The fast regime (docs/small_model.md): `small`'s env-text tokenizer, the exact-token
contract under it, the warm start's determinism, and learning on KeyDoor at delay 1.

The learning test mirrors tests/test_learning.py: `small` (random weights) with
constrained decoding on KeyDoor at delay 1 (one room step, one orchard step, three turns
at the door; step limit 5), GRPO at G = 8 over 4 tasks (32 rollouts per iteration),
evaluated on 64 held-out tasks at the training temperature before and after; a
one-sided Fisher exact test against the untrained policy plus a floor on the trained
rate. Untrained, the policy takes the key 1 time in 4 and opens the door in time most
of the time.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import gymnasium as gym
import pytest
import torch

from creditgym import envs
from creditgym.agents import tokenizer_corpus
from creditgym.agents.action_logprobs import action_logprobs
from creditgym.agents.base import RandomAgent
from creditgym.agents.constrained import action_token_sequences
from creditgym.agents.episode import play_episode
from creditgym.agents.llm import LLMAgent, encode_prompt
from creditgym.agents.prompts import build_messages, messages_for_step
from creditgym.agents.rollout import collect
from creditgym.agents.tokenizer_corpus import corpus_env_ids
from creditgym.agents.trajectory import TokenBatch
from creditgym.credit.grpo import GRPO
from creditgym.envs.registry import ENVS, EnvInfo, register_env
from creditgym.models import local_tokenizer
from creditgym.models.registry import LoadedModel, build_small
from creditgym.trainers.policy_gradient import (
    AgentConfig,
    PolicyGradientConfig,
    PolicyGradientTrainer,
)
from creditgym.trainers.warm_start import (
    WarmStartConfig,
    WarmStartTask,
    cache_key,
    config_examples,
    warm_start,
)
from tests.test_learning import fisher_one_sided

KEYDOOR = "creditgym/KeyDoor-v0"


@pytest.fixture(scope="module")
def small() -> LoadedModel:
    return build_small()


def test_small_tokenizer_round_trips_env_text_in_few_tokens(small):
    tokenizer = small.tokenizer
    for env_id in corpus_env_ids():
        env = gym.make(env_id)
        try:
            # Seeds past the corpus's (0..7): text the tokenizer was not trained on.
            trajectory = play_episode(env, RandomAgent(seed=101), seed=101)
        finally:
            env.close()
        for t, step in enumerate(trajectory.steps[:3]):
            for history_len in (0, 2):
                text, ids = encode_prompt(tokenizer, messages_for_step(trajectory, t, history_len))
                assert tokenizer.decode(ids) == text, (env_id, t)
            for command in step.admissible_commands:
                (sequence,) = action_token_sequences(tokenizer, [command])
                assert tokenizer.decode(sequence) == f"<action>{command}</action><|im_end|>"
    odd = "héllo ✓ \x00 tab\t ~§ 日本"  # no env writes this: the byte fallback carries it
    assert tokenizer.decode(tokenizer(odd, add_special_tokens=False)["input_ids"]) == odd
    env = gym.make(KEYDOOR)
    observation, info = env.reset(seed=3)
    messages = build_messages(KEYDOOR, info["task"], (), observation, info["admissible_commands"])
    _, ids = encode_prompt(tokenizer, messages)
    # The byte-level `tiny` needs ~720 tokens for this prompt and ~30 per action.
    assert len(ids) < 150
    sequences = action_token_sequences(tokenizer, info["admissible_commands"])
    assert max(len(sequence) for sequence in sequences) <= 8


def test_small_recorded_ids_are_what_the_policy_generated(small):
    agent = LLMAgent(small, constrained=True, history_len=0, seed=7)
    env = gym.make(KEYDOOR, delay=2)
    try:
        trajectory = play_episode(env, agent, seed=11)
    finally:
        env.close()
    tokenizer = small.tokenizer
    for t, step in enumerate(trajectory.steps):
        _, prompt_ids = encode_prompt(tokenizer, messages_for_step(trajectory, t, 0))
        assert step.prompt_token_ids == prompt_ids
        (expected,) = action_token_sequences(tokenizer, [step.action])
        assert list(step.action_token_ids) == expected
        assert tokenizer.decode(list(step.action_token_ids), skip_special_tokens=True) == (
            step.response_text
        )
    batch = TokenBatch.from_trajectories([trajectory], tokenizer.pad_token_id)
    with torch.no_grad():
        rescored = action_logprobs(
            small.model, batch, [trajectory], constrained=True, tokenizer=tokenizer
        )
    recorded = torch.tensor([lp for step in trajectory.steps for lp in step.action_logprobs])
    torch.testing.assert_close(rescored[batch.action_mask.bool()], recorded, atol=1e-5, rtol=0)


@pytest.mark.slow  # two fresh interpreters each training the BPE tokenizer (59 s)
def test_tokenizer_training_is_the_same_in_another_process():
    # Rust's HashMap seeds differ per process; BPE must not depend on iteration order.
    script = (
        "import hashlib;"
        "from creditgym.models.local_tokenizer import train_backend;"
        "from creditgym.agents.tokenizer_corpus import corpus_texts;"
        "texts = list(corpus_texts(['creditgym/KeyDoor-v0', 'creditgym/Umbrella-v0']));"
        "print(hashlib.sha256(train_backend(texts, 512).to_str().encode()).hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(digests) == 1 and len(next(iter(digests))) == 64


def test_the_committed_tokenizer_is_the_recorded_file_of_the_current_recipe():
    # Fails when the file is edited without its fingerprint, or when an env in the corpus
    # changes its id, intro or episodes (then rebuild: agents/tokenizer_corpus.py).
    data = local_tokenizer.TOKENIZER_FILE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == local_tokenizer.TOKENIZER_SHA256
    assert tokenizer_corpus.corpus_key() == tokenizer_corpus.CORPUS_KEY
    assert f"_v{local_tokenizer.TOKENIZER_VERSION}." in local_tokenizer.TOKENIZER_FILE.name
    assert local_tokenizer.vocabulary()["sha256"] == local_tokenizer.TOKENIZER_SHA256


def test_registering_an_env_leaves_the_tokenizer_corpus_alone():
    before = (corpus_env_ids(), tokenizer_corpus.corpus_key())
    register_env(
        EnvInfo(id="tokenizer-test/KeyDoorCopy-v0", short_name="kdcopy", max_episode_steps=5),
        entry_point="creditgym.envs.keydoor.env:KeyDoorEnv",
    )
    try:
        assert (corpus_env_ids(), tokenizer_corpus.corpus_key()) == before
    finally:
        gym.registry.pop("tokenizer-test/KeyDoorCopy-v0", None)
        ENVS.pop("tokenizer-test/KeyDoorCopy-v0", None)


@pytest.mark.slow
def test_the_current_corpus_trains_to_the_committed_tokenizer_file(tmp_path):
    # About 15 s on an idle 2-core machine: the corpus is played, then BPE trained.
    rebuilt = tmp_path / "tokenizer.json"
    assert tokenizer_corpus.rebuild(rebuilt) == local_tokenizer.TOKENIZER_SHA256
    assert rebuilt.read_bytes() == local_tokenizer.TOKENIZER_FILE.read_bytes()


def test_resuming_a_run_under_another_vocabulary_is_refused_in_one_line(tmp_path, capsys):
    from creditgym.benchmarks.run import main

    argv = ["--env", "keydoor", "--model", "small", "--credit", "none", "--eval-episodes", "1"]
    argv += ["--sample-group-size", "0", "--out", str(tmp_path)]
    assert main(argv) == 0
    (config_file,) = tmp_path.glob("*/config.json")
    config = json.loads(config_file.read_text())
    assert config["vocabulary"] == local_tokenizer.vocabulary()
    config["vocabulary"] = {**config["vocabulary"], "sha256": "0" * 64}
    config_file.write_text(json.dumps(config))
    capsys.readouterr()
    assert main([*argv, "--eval-episodes", "2"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "vocabulary" in error and "000000000000" in error


def test_the_warm_start_cache_key_follows_the_tokenizer_and_the_corpus(small, monkeypatch):
    config = WarmStartConfig(tasks=(WarmStartTask(KEYDOOR, (("delay", 1),)),), episodes=2)
    examples = config_examples(small.tokenizer, config)
    key = cache_key(config, examples)
    assert cache_key(config, list(examples)) == key
    # Other text (an env's feedback, a hindsight block) means other token ids.
    changed = examples[0]._replace(context_ids=examples[0].context_ids[:-1])
    assert cache_key(config, [changed, *examples[1:]]) != key
    other = {**local_tokenizer.vocabulary(), "sha256": "f" * 64}
    monkeypatch.setattr("creditgym.trainers.warm_start.vocabulary", lambda: other)
    assert cache_key(config, examples) != key


def _warm_weights(seed: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    loaded = build_small()
    config = WarmStartConfig(
        tasks=(WarmStartTask(KEYDOOR, (("delay", 1),)),),
        episodes=6,
        epochs=2,
        batch_size=8,
        seed=seed,
    )
    losses = warm_start(loaded, config)
    return {k: v.clone() for k, v in loaded.model.state_dict().items()}, losses


@pytest.mark.slow  # three warm starts of `small` on KeyDoor transcripts (69 s)
def test_warm_start_is_deterministic_for_a_seed():
    first, first_losses = _warm_weights(seed=0)
    second, second_losses = _warm_weights(seed=0)
    other, _ = _warm_weights(seed=1)
    assert first_losses == second_losses
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert any(not torch.equal(first[name], other[name]) for name in first)
    assert first_losses[-1] < first_losses[0]  # it fits the transcripts at all


# --- learning on KeyDoor at delay 1 -------------------------------------------------
ENV_KWARGS = {"delay": 1, "max_steps": 5}
AGENT = AgentConfig(constrained=True, max_new_tokens=8, history_len=0, temperature=1.0)
ITERATIONS = 12
EVAL_SEEDS = list(range(900_000, 900_064))
MIN_TRAINED_SUCCESS = 0.6
MAX_P_VALUE = 0.01


def success_count(loaded: LoadedModel) -> int:
    agent = LLMAgent(loaded, seed=12345, **vars(AGENT))
    trajectories, _ = collect(
        KEYDOOR, agent, EVAL_SEEDS, num_envs=8, env_kwargs=ENV_KWARGS, progress=False
    )
    assert len(trajectories) == len(EVAL_SEEDS), "an evaluation episode was dropped"
    return sum(trajectory.success for trajectory in trajectories)


@pytest.mark.slow
def test_short_grpo_run_on_keydoor_delay_1_beats_the_untrained_policy(tmp_path):
    assert envs.ENVS[KEYDOOR].markov  # history 0 is the env's own prompt length
    untrained = success_count(build_small())
    loaded = build_small()
    config = PolicyGradientConfig(
        steps=ITERATIONS,
        group_size=8,
        tasks_per_step=4,
        learning_rate=3e-3,
        micro_batch_trajectories=8,
        finetune="full",
        checkpoint_every=ITERATIONS,
        seed=0,
    )
    trainer = PolicyGradientTrainer(loaded, GRPO(), KEYDOOR, ENV_KWARGS, AGENT, config, tmp_path)
    records = trainer.train()
    assert len(records) == ITERATIONS
    trained = success_count(trainer.policy)
    n = len(EVAL_SEEDS)
    p_value = fisher_one_sided(untrained, trained, n)
    summary = (
        f"small + grpo on KeyDoor delay 1: untrained {untrained}/{n}, trained {trained}/{n} "
        f"after {ITERATIONS} iterations (one-sided Fisher p = {p_value:.2g})"
    )
    print(summary)
    assert trained / n >= MIN_TRAINED_SUCCESS, summary
    assert p_value <= MAX_P_VALUE, summary


def test_runner_history_defaults_to_zero_on_markov_envs_only():
    from creditgym.benchmarks.run import parse_config, resolve

    keydoor, sysdiag = parse_config(["--env", "keydoor"]), parse_config(["--env", "sysdiag"])
    assert (resolve(keydoor).history_len, resolve(sysdiag).history_len) == (0, 2)
    # The resolved K names the run: spelling out an env's default K is the same run (same
    # folder), another K is another run.
    assert (
        resolve(sysdiag).name
        == resolve(parse_config(["--env", "sysdiag", "--history-len", "2"])).name
    )
    assert (
        resolve(keydoor).name
        != resolve(parse_config(["--env", "keydoor", "--history-len", "2"])).name
    )
    assert (
        resolve(keydoor).name
        == resolve(parse_config(["--env", "keydoor", "--history-len", "0"])).name
    )
    demo = parse_config(["--preset", "demo"])
    assert (demo.env, demo.model, resolve(demo).history_len) == ("keydoor", "small", 0)
