"""A supervised warm start that gives `small` a hindsight distribution: `small-warm`.

HCAPO (Tan et al. 2026, arXiv 2603.08754) and HP-RLVR (Chen et al. 2026) read credit off
how the policy's prediction of an action changes when the prompt also shows what came
of it. That is the hindsight distribution h(a | s, z) of Harutyunyan et al. 2019
("Hindsight Credit Assignment", NeurIPS, arXiv 1912.02503), whose ratio to pi(a | s)
says how much action a made outcome z likelier. A pretrained LLM brings some notion of
it; a randomly initialised model has none, so both methods would score noise. This warm
start learns it from data, the same prior for every credit method:

1. Transcripts: `episodes` seeded episodes per (env, kwargs) setting of `tasks`, half
   played by the uniform random agent and half by a noisy expert (the expert's command
   with probability 1 - `noise`, else a uniform one; `agents.base.NoisyExpertAgent`), so
   every command is seen with both outcomes.
2. Each step rendered three ways, the exact token sequences the credit modules score
   (`credit.views`): the causal prompt (`agents.prompts.messages_for_step`, no hindsight),
   HCAPO's outcome block (`credit.hcapo.outcome_hindsight`) and HP-RLVR's realized-future
   block (`credit.hp_rlvr.future_hindsight`), with `history_len` history pairs; the target
   is the command in the constrained-decoding format, `<action>command</action>` + EOS
   (`agents.constrained.action_token_sequences`), the tokens the policy generates.
3. Cross-entropy on the target tokens only, AdamW, `epochs` passes in a seeded order.

So the causal view learns the behaviour policy's p(a | s) and the hindsight views its
p(a | s, z): trained on the same transcripts, their ratio is the hindsight ratio of that
behaviour policy. The causal prior is not uniform: the noisy expert's share tilts it
towards the expert's commands (docs/small_model.md gives the untrained success rates).

Deterministic for a seed (transcripts, example order and model initialisation are all
seeded; tested). The result is cached as a model folder under `$CREDITGYM_CACHE/models`,
named by a hash of the settings, the size of `small`, its tokenizer's fingerprint and the
rendered examples themselves (every token of every prompt and target: the envs' text,
feedback included, the prompt scaffolding and the hindsight blocks), so a change to any
of them builds a new model instead of reading a stale one. `models.registry.MODELS` lists
`small-warm`; importing this module provides `load_small_warm` as its loader.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

from creditgym.agents.atomic import atomic_folder
from creditgym.agents.base import Agent, NoisyExpertAgent, RandomAgent
from creditgym.agents.constrained import action_token_sequences
from creditgym.agents.episode import play_episode
from creditgym.agents.prompts import messages_for_step
from creditgym.agents.trajectory import Trajectory
from creditgym.credit.hcapo import outcome_hindsight
from creditgym.credit.hp_rlvr import future_hindsight
from creditgym.credit.views import render_prompt_ids
from creditgym.envs import ENVS, EnvOptions
from creditgym.models.local_tokenizer import load_local_tokenizer, vocabulary
from creditgym.models.registry import (
    SMALL_CONFIG,
    LoadedModel,
    build_small,
    cache_dir,
    provide_loader,
)

logger = logging.getLogger(__name__)

WARM_START_VERSION = 1
IGNORE_INDEX = -100  # label id the cross-entropy skips (transformers' convention)


@dataclass(frozen=True)
class WarmStartTask:
    """One env setting the transcripts are played in: a registered id and its options
    (fields of its `EnvInfo.options`, which checks them)."""

    env_id: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    def options(self) -> EnvOptions:
        """The setting's options, checked by the env's options class."""
        return ENVS[self.env_id].options(**dict(self.kwargs))


@dataclass(frozen=True)
class WarmStartConfig:
    """Settings of the warm start (every field enters the cache key)."""

    tasks: tuple[WarmStartTask, ...] = (
        WarmStartTask("creditgym/KeyDoor-v0", (("delay", 1),)),
        WarmStartTask("creditgym/KeyDoor-v0", (("delay", 4), ("variance", "high"))),
        WarmStartTask("creditgym/KeyDoor-v0", (("delay", 8),)),
        WarmStartTask("creditgym/Umbrella-v0", (("length", 2),)),
        WarmStartTask("creditgym/Umbrella-v0", (("length", 5),)),
        WarmStartTask("creditgym/Umbrella-v0", (("length", 10),)),
    )
    """Env settings the transcripts come from: the two credit instruments at short and
    long horizons (their ground truth is exact, so the prior's effect can be measured)."""
    episodes: int = 16
    """Episodes per setting, alternating random agent and noisy expert."""
    noise: float = 0.5
    """Noisy expert: probability of a uniform command instead of the expert's."""
    history_len: int = 0
    """History pairs in the rendered prompts (0: the instruments are Markov, and runs on
    Markov envs prompt without history)."""
    epochs: int = 2
    """Passes over the examples."""
    batch_size: int = 32
    """Examples per optimiser step."""
    learning_rate: float = 3e-3
    """AdamW learning rate."""
    seed: int = 0
    """Seeds the transcripts and the example order (the model's init is `small`'s)."""


class Example(NamedTuple):
    """One supervised example: context ids [P], target ids [A], and which view it is."""

    context_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    view: str


# View name -> the hindsight block of step t (None: the causal prompt). The functions are
# the credit modules' own, so the warm start shows exactly the text they score under.
VIEWS: dict[str, Callable[[Trajectory, int], str | None]] = {
    "causal": lambda trajectory, t: None,
    "hcapo": lambda trajectory, t: outcome_hindsight(trajectory),
    "hp_rlvr": future_hindsight,
}


def behaviour_agent(episode: int, noise: float, seed: int) -> Agent:
    """Even episodes: the uniform random agent; odd ones: the noisy expert."""
    if episode % 2 == 0:
        return RandomAgent(seed=seed)
    return NoisyExpertAgent(noise=noise, seed=seed)


def episode_seed(config: WarmStartConfig, task_index: int, episode: int) -> int:
    """A 31-bit seed that depends only on (seed, setting, episode)."""
    key = f"{config.seed}/{task_index}/{episode}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little") >> 1


def behaviour_transcripts(config: WarmStartConfig) -> list[Trajectory]:
    """`config.episodes` episodes of each setting, played in-process (deterministic)."""
    trajectories = []
    for task_index, task in enumerate(config.tasks):
        env = gym.make(task.env_id, **task.options().kwargs())
        try:
            for episode in range(config.episodes):
                seed = episode_seed(config, task_index, episode)
                agent = behaviour_agent(episode, config.noise, seed)
                trajectories.append(play_episode(env, agent, seed=seed))
        finally:
            env.close()
    return trajectories


def render_examples(
    tokenizer: PreTrainedTokenizerBase, trajectories: Sequence[Trajectory], history_len: int
) -> list[Example]:
    """Every step of every trajectory in every view of `VIEWS` (see the module docstring)."""
    examples = []
    for trajectory in trajectories:
        for t, step in enumerate(trajectory.steps):
            (target,) = action_token_sequences(tokenizer, [step.action])
            for view, hindsight in VIEWS.items():
                messages = messages_for_step(
                    trajectory, t, history_len, hindsight=hindsight(trajectory, t)
                )
                context = render_prompt_ids(tokenizer, messages)
                examples.append(Example(context, tuple(target), view))
    return examples


def collate(examples: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded `input_ids`, `attention_mask` [B, L] and `labels` [B, L] (context and
    padding IGNORE_INDEX, so the loss is the token-mean over the targets)."""
    width = max(len(e.context_ids) + len(e.target_ids) for e in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, example in enumerate(examples):
        sequence = torch.tensor(example.context_ids + example.target_ids)
        input_ids[row, : len(sequence)] = sequence
        attention_mask[row, : len(sequence)] = 1
        labels[row, len(example.context_ids) : len(sequence)] = torch.tensor(example.target_ids)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def config_examples(tokenizer: PreTrainedTokenizerBase, config: WarmStartConfig) -> list[Example]:
    """The examples `config` trains on: its transcripts rendered in every view."""
    return render_examples(tokenizer, behaviour_transcripts(config), config.history_len)


def warm_start(
    loaded: LoadedModel, config: WarmStartConfig, examples: Sequence[Example] | None = None
) -> list[float]:
    """Train `loaded.model` in place on the rendered transcripts; returns each step's loss.

    Loss per optimiser step: the mean cross-entropy of the target tokens in the batch
    (transformers shifts the labels by one position).

    Args:
        examples: `config_examples(loaded.tokenizer, config)` when already rendered.
    """
    if examples is None:
        examples = config_examples(loaded.tokenizer, config)
    model = loaded.model
    model.requires_grad_(True)
    model.eval()  # no dropout: the policy samples from the deterministic network
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    order_rng = random.Random(config.seed)
    pad_id = loaded.tokenizer.pad_token_id
    losses = []
    for _ in range(config.epochs):
        order = list(range(len(examples)))
        order_rng.shuffle(order)
        for start in range(0, len(order), config.batch_size):
            batch = collate([examples[i] for i in order[start : start + config.batch_size]], pad_id)
            loss = model(**batch, use_cache=False).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    model.requires_grad_(False)
    return losses


def examples_digest(examples: Sequence[Example]) -> str:
    """sha256 of the examples' token ids and views, in order (the training corpus)."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(json.dumps([example.context_ids, example.target_ids, example.view]).encode())
    return digest.hexdigest()


def cache_key(config: WarmStartConfig, examples: Sequence[Example]) -> str:
    """Hash of what decides the warm-started weights (12 hex): the settings, the size of
    `small`, the tokenizer's fingerprint and the corpus (`examples_digest`)."""
    identity = {
        "version": WARM_START_VERSION,
        "config": dataclasses.asdict(config),
        "small": dataclasses.asdict(SMALL_CONFIG),
        "tokenizer": vocabulary(),
        "examples": examples_digest(examples),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]


def load_small_warm(
    device: str = "cpu", dtype: torch.dtype = torch.float32, config: WarmStartConfig | None = None
) -> LoadedModel:
    """`small` after `warm_start`, built once and cached (the `small-warm` model).

    Args:
        device, dtype: where and how the weights are loaded.
        config: warm-start settings; None: `WarmStartConfig()`.
    """
    config = config or WarmStartConfig()
    tokenizer = load_local_tokenizer()
    # Rendered on every load (seconds): the key must see the text the weights learnt.
    examples = config_examples(tokenizer, config)
    folder = cache_dir() / f"small-warm-{cache_key(config, examples)}"
    if not (folder / "model.safetensors").is_file():
        logger.info("warm-starting `small` on behaviour transcripts (once) ...")
        loaded = build_small()
        warm_start(loaded, config, examples)
        # Renamed into place at the end: an interrupted build leaves no cache entry.
        with atomic_folder(folder) as staging:
            loaded.model.save_pretrained(staging)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device)
    model.eval()
    return LoadedModel(name="small-warm", model=model, tokenizer=tokenizer)


provide_loader("small-warm", load_small_warm)


def describe(config: WarmStartConfig) -> Mapping[str, Any]:
    """Counts of transcripts and examples per view (for docs and the benchmark)."""
    trajectories = behaviour_transcripts(config)
    examples = render_examples(load_local_tokenizer(), trajectories, config.history_len)
    return {
        "trajectories": len(trajectories),
        "steps": sum(t.length for t in trajectories),
        "success_rate": sum(t.success for t in trajectories) / len(trajectories),
        "examples": {view: sum(e.view == view for e in examples) for view in VIEWS},
        "mean_tokens": sum(len(e.context_ids) + len(e.target_ids) for e in examples)
        / len(examples),
    }
