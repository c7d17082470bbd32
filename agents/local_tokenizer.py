"""A byte-level BPE tokenizer trained here on the environments' own text, for `small`.

The byte tokenizer of `tiny` spells a KeyDoor prompt in ~720 tokens and an action in ~30,
so a policy-gradient iteration spends its time on tokens that carry no decision. This
tokenizer is trained with the `tokenizers` library (byte-level BPE, Sennrich et al.
2016, ACL, arXiv 1508.07909; GPT-2's byte alphabet) on the text the policy actually
reads and writes: the chat-templated prompts of `agents.prompts` (intro, task,
observation, admissible actions, instruction; with and without a hindsight block) for
every step of seeded random-agent episodes of the envs registered with
`tokenizer_episodes` (`corpus_env_ids()`), plus each
admissible command in the constrained-decoding format `<action>command</action>`.
Merges may cross spaces (no regex pre-split), so recurring phrases ("take the key",
the fixed instruction) become single tokens: the same KeyDoor prompt takes ~90 tokens
and an action `<action>`, `take the key`, `</action>`, EOS.

Every string round-trips: the 256 byte symbols are in the vocabulary whatever the
corpus held, so text no env produced (a typed command, another env's feedback) still
encodes, only in more tokens.

The trained tokenizer is a committed, versioned file, `agents/small_tokenizer_v1.json`
(`TOKENIZER_FILE`), not a cache built on first use: registering an env never changes the
vocabulary of `small` (an env enters the corpus only by its `EnvInfo.tokenizer_episodes`,
0 by default), and every run records the file's fingerprint (`vocabulary()`) in its
config.json, so `benchmarks.run` refuses to resume a run under another vocabulary.
Training is deterministic (BPE breaks count ties by pair id; tested across processes),
and tests/test_small_model.py checks that the current corpus trains to the committed
bytes. When the corpus changes (an env in it bumps its `-vN`, an env joins it), bump
`TOKENIZER_VERSION`, rebuild, and set `TOKENIZER_SHA256` and `CORPUS_KEY` to what it prints:

    python -m creditgym.agents.local_tokenizer  # writes small_tokenizer_v<N>.json

A new vocabulary means `small`'s runs start afresh (a run under the old one is refused)
and `small-warm`'s cache is rebuilt (its key holds the fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import gymnasium as gym
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from creditgym import envs
from creditgym.agents import prompts
from creditgym.agents.atomic import atomic_write_text
from creditgym.agents.base import RandomAgent
from creditgym.agents.chat_tokenizer import (
    CHATML_TEMPLATE,
    SPECIAL_TOKENS,
    build_byte_tokenizer,
    chatml_tokenizer,
)
from creditgym.agents.episode import play_episode
from creditgym.agents.parsing import ACTION_CLOSE, ACTION_OPEN

# Bump with every rebuilt file (a new file name: the old one stays readable in git).
TOKENIZER_VERSION = 1
TOKENIZER_FILE = Path(__file__).with_name(f"small_tokenizer_v{TOKENIZER_VERSION}.json")
# sha256 of the committed file, and `corpus_key()` of the recipe it was trained from
# (tests/test_small_model.py checks both against the file and the current code).
TOKENIZER_SHA256 = "1d58cfb43bfddbb6550c8c9617f8fda403a54d2705754a72538a7b3eb84bbb47"
CORPUS_KEY = "50be9dcdaa13"
VOCAB_SIZE = 2048
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


def train_backend(texts: Sequence[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train byte-level BPE on `texts`; specials get ids 0-2, then the 256 bytes, merges.

    No regex pre-split (`use_regex=False`): merges may span spaces and punctuation, so
    fixed phrases become one token. The special tokens are matched before BPE, so the
    chat template's markers are always single tokens.
    """
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    return backend


def wrap(backend: Tokenizer) -> PreTrainedTokenizerFast:
    """The transformers tokenizer the policy uses (`agents.chat_tokenizer.chatml_tokenizer`)."""
    return chatml_tokenizer(backend)


def load_local_tokenizer() -> PreTrainedTokenizerFast:
    """`small`'s tokenizer, read from the committed `TOKENIZER_FILE`."""
    return wrap(Tokenizer.from_file(str(TOKENIZER_FILE)))


def vocabulary() -> dict[str, object]:
    """What a run records of `small`'s vocabulary: the tokenizer's version and the sha256
    of its file as read now (a rebuilt or edited file reads differently)."""
    return {
        "tokenizer": TOKENIZER_FILE.name,
        "version": TOKENIZER_VERSION,
        "sha256": hashlib.sha256(TOKENIZER_FILE.read_bytes()).hexdigest(),
    }


def rebuild(path: Path = TOKENIZER_FILE) -> str:
    """Train on the current corpus and write the tokenizer to `path`; returns its sha256."""
    text = train_backend(list(corpus_texts(corpus_env_ids()))).to_str()
    atomic_write_text(path, text)
    return hashlib.sha256(text.encode()).hexdigest()


if __name__ == "__main__":
    # `python -m creditgym.agents.local_tokenizer [PATH]`: the rebuild the module docstring
    # describes.
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else TOKENIZER_FILE
    print(f"{target}: sha256 {rebuild(target)}, corpus key {corpus_key()}")
