"""The LLM policy: prompts in, sampled actions out, with exact token bookkeeping.

One `act` call handles a batch of environments: each prompt is built from the step's
`AgentInput` (agents.prompts, the verl-agent / GiGPO / HCAPO format), rendered with the
model's chat template, and all rows are generated together with left padding and a KV
cache. `stream()` offers the same steps as a continuous batch (`models.batching`):
rollouts add an environment's next step as soon as its observation arrives, while the
other rows keep decoding. The sampling loop is written out (not `model.generate`) so
that each token's log-prob is recorded under the distribution it was actually drawn from
(constraint mask, temperature, top-p; see `models.logprobs.sampling_logprobs`), and the
prompt and generated ids are stored as produced: nothing is re-tokenised afterwards.

Randomness is per episode, not per batch: row r draws its Gumbel noise from a generator
seeded by (agent seed, `AgentInput.episode_key`, step index), and samples
argmax(log-prob + Gumbel) -- an exact sample of the distribution whose log-probs are
recorded. An episode therefore samples the same tokens whichever other episodes share
its batch: float noise in the logits (batch shapes change matmul rounding) flips a
sample only at a near-exact tie of the two best perturbed scores, where an inverse-CDF
draw over a 49k-entry cumulative sum would flip far more often. This is what makes
multi-process rollouts reproducible, and what lets the benchmark compare batched and
sequential generation on identical work.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from creditgym.agents.base import AgentAction, AgentInput
from creditgym.agents.constrained import build_action_trie
from creditgym.agents.parsing import ACTION_CLOSE, parse_action
from creditgym.agents.prompts import build_messages
from creditgym.models.batching import ContinuousBatch
from creditgym.models.generation_cache import GenerationCache
from creditgym.models.logprobs import check_sampling_params
from creditgym.models.registry import LoadedModel
from creditgym.models.token_trie import TokenTrie

# Tokens decoded when looking for `</action>` at the end of the response (enough for a
# byte-level tokenizer, which spells the 9-character tag in 9 tokens).
_STOP_TAIL_TOKENS = 16


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingConfig:
    """How an `LLMAgent` samples; trainers take one for their rollouts and re-score with it.

    The one home of these settings and their defaults: `LLMAgent`'s keyword defaults and
    the trainers take theirs from here.

    Attributes:
        temperature: softmax temperature (> 0); 1.0 in verl-agent rollouts.
        top_p: nucleus mass in (0, 1].
        max_new_tokens: cap on generated tokens per step (EOS / `</action>` stop earlier).
            48 is the command line's default since the committed reference runs (it is
            part of their run names), and it holds the longest constrained SysDiag action,
            45 tokens under smollm2-135m's tokenizer (`<action>` + command + `</action>`,
            measured over the commands of 40 episodes). Byte-level `tiny` spells the same
            action in up to 109 tokens and unconstrained reasoning needs far more (the
            `paper` preset uses 512): pass more there.
        history_len: past (observation, action) pairs in the prompt (K = 2, as in GiGPO).
        constrained: generate `<action>` + one admissible command + `</action>` only.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    history_len: int = 2
    constrained: bool = False


def _row_generator(key: str) -> torch.Generator:
    """A CPU generator seeded by a stable hash of `key` (Python's `hash` is salted)."""
    digest = hashlib.sha256(key.encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]
) -> tuple[str, tuple[int, ...]]:
    """Render chat messages with the model's template (generation prompt added).

    Returns the prompt text and its token ids. Credit modules rebuild a step's prompt
    with `agents.prompts.messages_for_step` and this function; the ids then equal the
    recorded `Step.prompt_token_ids` (tested).
    """
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    return text, tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


class LLMAgent:
    """A causal LM acting through `agents.base.Agent.act`, batched over environments.

    Args:
        loaded: model and tokenizer (`models.registry.load_model`).
        temperature, top_p, max_new_tokens, history_len, constrained: see
            `SamplingConfig` (whose defaults these are).
        seed: base seed of the per-episode sampling RNGs.
        generation_cache: keeps prompts' keys and values and responses' hidden states for
            hindsight scoring (`models.generation_cache`; trainers pass their credit
            module's); None: nothing kept.
        share_prefix: prefill a prompt prefix that steps share (system and task text)
            once and reuse it (`models.batching.ContinuousBatch`); off by default, so
            runs made before it keep their arithmetic.
    """

    def __init__(
        self,
        loaded: LoadedModel,
        temperature: float = SamplingConfig.temperature,
        top_p: float = SamplingConfig.top_p,
        max_new_tokens: int = SamplingConfig.max_new_tokens,
        history_len: int = SamplingConfig.history_len,
        constrained: bool = SamplingConfig.constrained,
        seed: int = 0,
        generation_cache: GenerationCache | None = None,
        share_prefix: bool = False,
    ) -> None:
        check_sampling_params(temperature, top_p)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
        if history_len < 0:
            raise ValueError(f"history_len must be >= 0 (got {history_len})")
        if loaded.tokenizer.eos_token_id is None or loaded.tokenizer.pad_token_id is None:
            raise ValueError(f"model {loaded.name!r}: tokenizer needs EOS and pad tokens")
        self.loaded = loaded
        self.config = SamplingConfig(temperature, top_p, max_new_tokens, history_len, constrained)
        self.seed = seed
        self.name = f"llm:{loaded.name}"
        if generation_cache is not None and not generation_cache.serves(loaded.model):
            raise ValueError(f"model {loaded.name!r}: its generation cache is another model's")
        self.generation_cache = generation_cache
        self.share_prefix = share_prefix
        self._calls = 0  # seeds rows that come without an episode key
        self._warned_cut = False

    def messages(self, agent_input: AgentInput) -> list[dict[str, str]]:
        """The chat messages of one step (last `history_len` history pairs)."""
        history_len = self.config.history_len
        history = agent_input.history[-history_len:] if history_len else ()
        return build_messages(
            agent_input.env_id,
            agent_input.task,
            history,
            agent_input.observation,
            agent_input.admissible_commands,
        )

    def act(self, inputs: Sequence[AgentInput]) -> list[AgentAction]:
        """Sample one response per input in one batched generation; parse the actions."""
        stream = self.stream()
        for row, agent_input in enumerate(inputs):
            stream.add(row, agent_input)
        actions: dict[int, AgentAction] = {}
        while len(stream):
            actions.update(stream.advance())
        return [actions[row] for row in range(len(inputs))]

    def stream(self) -> LLMStream:
        """A continuous batch of this agent's steps (`models.batching`): inputs join
        while others generate; `agents.rollout.collect` uses it to keep the batch full."""
        return LLMStream(self)

    def _batch(self) -> ContinuousBatch:
        return ContinuousBatch(
            self.loaded.model,
            pad_id=self.loaded.tokenizer.pad_token_id,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            max_new_tokens=self.config.max_new_tokens,
            stop=self._finished,
            generation_cache=self.generation_cache,
            share_prefix=self.share_prefix,
        )

    def warn_cut(self, longest: int, commands: Sequence[str]) -> None:
        """Say once per agent that `max_new_tokens` cuts constrained responses: a command
        spelled in more tokens than the cap loses its end (the closing tag, or part of the
        command), so the policy cannot take it whole. Not an error: byte-level `tiny` with
        the default cap is such a case by design (see `SamplingConfig.max_new_tokens`);
        the exact-MDP oracles refuse it (`measure.ground_truth.llm_policy_table`)."""
        if not self._warned_cut:
            self._warned_cut = True
            logger.warning(
                "constrained decoding spells one of %s in %d tokens but max_new_tokens is "
                "%d: such responses are cut off (raise --max-new-tokens)",
                list(commands),
                longest,
                self.config.max_new_tokens,
            )

    def _finished(self, generated: list[int], trie: TokenTrie | None) -> bool:
        if generated[-1] == self.loaded.tokenizer.eos_token_id:
            return True
        if trie is not None:
            return not trie.walk(generated).children
        tail = self.loaded.tokenizer.decode(generated[-_STOP_TAIL_TOKENS:])
        return ACTION_CLOSE in tail


class LLMStream:
    """`LLMAgent`'s steps as a continuous batch: `add(key, input)` queues a step,
    `advance()` runs one decode step and returns (key, action) of the steps whose
    response is complete. Same prompts, seeds and parsing as `LLMAgent.act`."""

    def __init__(self, agent: LLMAgent) -> None:
        self.agent = agent
        self.batch = agent._batch()
        self.inputs: dict[Hashable, tuple[AgentInput, str, tuple[int, ...]]] = {}
        self.call = agent._calls  # seeds rows that come without an episode key
        agent._calls += 1

    def __len__(self) -> int:
        return len(self.batch)

    def add(self, key: Hashable, agent_input: AgentInput) -> None:
        if key in self.inputs:
            raise ValueError(f"step {key!r} is already generating")
        agent, x = self.agent, agent_input
        prompt_text, prompt_ids = encode_prompt(agent.loaded.tokenizer, agent.messages(x))
        trie = (
            build_action_trie(agent.loaded.tokenizer, x.admissible_commands)
            if agent.config.constrained and x.admissible_commands
            else None
        )
        if trie is not None and trie.longest > agent.config.max_new_tokens:
            agent.warn_cut(trie.longest, x.admissible_commands)
        episode = x.episode_key or f"call{self.call}/row{key}"
        rng = _row_generator(f"{agent.seed}/{episode}/step{len(x.history)}")
        self.inputs[key] = (x, prompt_text, prompt_ids)
        self.batch.add(key, prompt_ids, trie, rng)

    def advance(self) -> list[tuple[Hashable, AgentAction]]:
        tokenizer = self.agent.loaded.tokenizer
        actions = []
        for key, generation in self.batch.advance():
            x, prompt_text, prompt_ids = self.inputs.pop(key)
            response = tokenizer.decode(list(generation.token_ids), skip_special_tokens=True)
            parsed = parse_action(response, x.admissible_commands)
            actions.append(
                (
                    key,
                    AgentAction(
                        action=parsed.action,
                        prompt_text=prompt_text,
                        prompt_token_ids=prompt_ids,
                        response_text=response,
                        action_token_ids=generation.token_ids,
                        action_logprobs=generation.logprobs,
                    ),
                )
            )
        return actions
