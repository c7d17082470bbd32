"""The corpus `small`'s tokenizer is trained on, and the rebuild of its committed file.

The text the policy actually reads and writes: the chat-templated prompts of
`agents.prompts` (intro, task, observation, admissible actions, instruction; with and
without a hindsight block) for every step of seeded random-agent episodes of the envs
registered with `tokenizer_episodes` (`corpus_env_ids()`), plus each admissible command in
the constrained-decoding format `<action>command</action>`. The tokenizer itself (byte-level
BPE, its committed file and fingerprint) is `models.local_tokenizer`.

An env enters the corpus only by its `EnvInfo.tokenizer_episodes` (0 by default), so
registering an env never changes the vocabulary. Training is deterministic (BPE breaks
count ties by pair id; tested across processes), and tests/test_small_model.py checks that
the current corpus trains to the committed bytes and that `corpus_key()` is `CORPUS_KEY`.
When the corpus changes (an env in it bumps its `-vN`, an env joins it), bump
`models.local_tokenizer.TOKENIZER_VERSION`, rebuild, and set its `TOKENIZER_SHA256` and
`CORPUS_KEY` here to what the rebuild prints:

    python -m creditgym.agents.tokenizer_corpus  # writes small_tokenizer_v<N>.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import gymnasium as gym

from creditgym import envs
from creditgym.agents import prompts
from creditgym.agents.atomic import atomic_write_text
from creditgym.agents.base import RandomAgent
from creditgym.agents.episode import play_episode
from creditgym.agents.parsing import ACTION_CLOSE, ACTION_OPEN
from creditgym.models.chat_tokenizer import CHATML_TEMPLATE, build_byte_tokenizer
from creditgym.models.local_tokenizer import TOKENIZER_FILE, VOCAB_SIZE, train_backend

# `corpus_key()` of the recipe the committed tokenizer file was trained from.
CORPUS_KEY = "50be9dcdaa13"
# Each corpus episode is cut at this many steps (or the env's own limit, if shorter).
CORPUS_MAX_STEPS = 8
# Stands in for a credit module's hindsight text in the corpus, so the prompt's
# hindsight header is learnt; the modules' own blocks reuse env feedback and observations.
CORPUS_HINDSIGHT = "Outcome: {verdict}. Feedback: {feedback}"


def corpus_env_ids() -> list[str]:
    """The envs whose text forms the corpus: those registered with `tokenizer_episodes`
    > 0, in registration order."""
    return [env_id for env_id, info in envs.ENVS.items() if info.tokenizer_episodes > 0]


def corpus_key(env_ids: Sequence[str] | None = None) -> str:
    """Hash of everything that decides the corpus and the trained tokenizer (12 hex): the
    envs (ids, bumped whenever an env's text changes; episodes; intros), the prompt
    scaffolding of `agents.prompts`, and the settings here. Default: `corpus_env_ids()`."""
    ids = corpus_env_ids() if env_ids is None else list(env_ids)
    identity = {
        "vocab_size": VOCAB_SIZE,
        "max_steps": CORPUS_MAX_STEPS,
        "envs": [
            [env_id, envs.ENVS[env_id].tokenizer_episodes, envs.ENVS[env_id].intro]
            for env_id in ids
        ],
        "instruction": prompts.INSTRUCTION,
        "hindsight": CORPUS_HINDSIGHT,
        "template": CHATML_TEMPLATE,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]


def corpus_texts(env_ids: Sequence[str]) -> Iterator[str]:
    """The training corpus: per env, its `EnvInfo.tokenizer_episodes` seeded random-agent
    episodes.

    Yields, per step, the rendered causal prompt (no history, as `small` prompts Markov
    envs; the history lines reuse the same observations), the same prompt with a
    hindsight block, and `<action>command</action>` for each admissible command.
    Deterministic: seeds 0, 1, ..., `RandomAgent(seed)`, the envs' own
    same-seed determinism (tests/test_env_registry.py).
    """
    # The chat template rendered by the same jinja code the policy's tokenizer runs.
    template = build_byte_tokenizer()
    for env_id in env_ids:
        limit = min(CORPUS_MAX_STEPS, envs.ENVS[env_id].max_episode_steps)
        env = gym.make(env_id, max_steps=limit)
        try:
            for seed in range(envs.ENVS[env_id].tokenizer_episodes):
                trajectory = play_episode(env, RandomAgent(seed=seed), seed=seed)
                hindsight = CORPUS_HINDSIGHT.format(
                    verdict="success" if trajectory.success else "failure",
                    feedback=trajectory.feedback,
                )
                for step in trajectory.steps:
                    for block in (None, hindsight):
                        messages = prompts.build_messages(
                            env_id,
                            trajectory.task,
                            (),
                            step.observation,
                            step.admissible_commands,
                            block,
                        )
                        yield template.apply_chat_template(
                            messages, add_generation_prompt=True, tokenize=False
                        )
                    for command in step.admissible_commands[: prompts.MAX_LISTED_COMMANDS]:
                        yield f"{ACTION_OPEN}{command}{ACTION_CLOSE}"
        finally:
            env.close()


def rebuild(path: Path = TOKENIZER_FILE) -> str:
    """Train on the current corpus and write the tokenizer to `path`; returns its sha256."""
    text = train_backend(list(corpus_texts(corpus_env_ids()))).to_str()
    atomic_write_text(path, text)
    return hashlib.sha256(text.encode()).hexdigest()


if __name__ == "__main__":
    # `python -m creditgym.agents.tokenizer_corpus [PATH]`: the rebuild the module docstring
    # describes.
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else TOKENIZER_FILE
    print(f"{target}: sha256 {rebuild(target)}, corpus key {corpus_key()}")
